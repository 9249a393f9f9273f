-- Keyword frequencies of O_init for a plan (Eq. 1): computed by Spark from the landing table.
INSERT INTO IDENTIFIER(:table)
SELECT CAST(:plan_version AS BIGINT) AS plan_version, keyword, count(*) AS objects,
       (SELECT count(*) FROM IDENTIFIER(:objects) WHERE t <= :t0) AS o_init
FROM (SELECT explode(keywords) AS keyword FROM IDENTIFIER(:objects) WHERE t <= :t0)
GROUP BY keyword
