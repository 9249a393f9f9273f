-- Naive baseline: every (subscription, object) pair sharing a keyword, for the objects of
-- timestamps :from_t..:to_t, with its squared distance; no spatial pruning.
SELECT DISTINCT s.sub_id, s.k, o.id AS oid, (o.x - s.x) * (o.x - s.x) + (o.y - s.y) * (o.y - s.y) AS d2
FROM (SELECT id, x, y, explode(keywords) AS keyword FROM objects WHERE t BETWEEN :from_t AND :to_t) AS o
JOIN IDENTIFIER(:subscriptions) AS s ON o.keyword = s.keyword
