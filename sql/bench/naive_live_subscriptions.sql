-- Naive baseline: the ids of the live subscriptions.
SELECT DISTINCT sub_id FROM IDENTIFIER(:table)
