-- Naive baseline seeded with the pipeline's live subscriptions (timing at paper scale).
INSERT INTO IDENTIFIER(:subscriptions)
SELECT sub_id, x, y, k, explode(keywords) FROM IDENTIFIER(:state)
