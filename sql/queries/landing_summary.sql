-- Row counts of the landing tables: O_init (t <= :t0), stream timestamps, subscription events.
SELECT 'objects in O_init' AS what, count(*) AS n FROM IDENTIFIER(:objects) WHERE t <= :t0
UNION ALL
SELECT 'stream objects', count(*) FROM IDENTIFIER(:objects) WHERE t > :t0
UNION ALL
SELECT 'stream timestamps', count(DISTINCT t) FROM IDENTIFIER(:objects) WHERE t > :t0
UNION ALL
SELECT 'initial subscriptions', count(*) FROM IDENTIFIER(:events) WHERE op = 'insert' AND t <= :t0
UNION ALL
SELECT 'subscription insertions', count(*) FROM IDENTIFIER(:events) WHERE op = 'insert' AND t > :t0
UNION ALL
SELECT 'subscription deletions', count(*) FROM IDENTIFIER(:events) WHERE op = 'delete'
UNION ALL
SELECT 'quarantined rows', count(*) FROM IDENTIFIER(:quarantine)
