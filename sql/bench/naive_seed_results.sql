-- Naive baseline seeded with the pipeline's current results.
INSERT INTO IDENTIFIER(:results)
SELECT sub_id, object_ids, d2 FROM IDENTIFIER(:state) WHERE size(object_ids) > 0
