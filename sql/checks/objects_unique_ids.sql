-- Check: object ids are unique in the landing table. Returns the offending ids (none on good data).
SELECT id, count(*) AS copies FROM IDENTIFIER(:table) GROUP BY id HAVING count(*) > 1
