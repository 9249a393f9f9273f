-- Naive baseline: how many objects timestamps :from_t..:to_t published.
SELECT count(*) AS n FROM objects WHERE t BETWEEN :from_t AND :to_t
