-- The most frequent keywords among objects published up to a timestamp.
SELECT keyword, count(*) AS objects
FROM (SELECT explode(keywords) AS keyword FROM IDENTIFIER(:table) WHERE t <= :as_of)
GROUP BY keyword
ORDER BY objects DESC, keyword
LIMIT :top
