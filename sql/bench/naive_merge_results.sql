-- Naive baseline: the changed top-k (temp view naive_changed) replace or add results.
MERGE INTO IDENTIFIER(:results) AS r
USING naive_changed AS c
ON r.sub_id = c.sub_id
WHEN MATCHED THEN UPDATE SET r.object_ids = c.object_ids, r.d2 = c.d2
WHEN NOT MATCHED THEN INSERT (sub_id, object_ids, d2) VALUES (c.sub_id, c.object_ids, c.d2)
