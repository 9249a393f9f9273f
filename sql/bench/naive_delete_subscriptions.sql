-- Naive baseline: the subscriptions deleted at timestamp :t leave a table (Delta's DELETE takes
-- no subquery; a MERGE does the same).
MERGE INTO IDENTIFIER(:table) AS a
USING (SELECT DISTINCT id FROM subscription_events WHERE op = 'delete' AND t = :t) AS d
ON a.sub_id = d.id
WHEN MATCHED THEN DELETE
