-- Quarantined rows grouped by target and reason (numbers stripped so like reasons group).
SELECT target, regexp_replace(reason, '[0-9]+', 'N') AS reason, count(*) AS n
FROM quarantine
GROUP BY 1, 2
ORDER BY n DESC
LIMIT 20
