-- Naive baseline: the new top-k of every subscription a candidate (temp view naive_candidates)
-- entered, ranked by (d2, object id) with the current results; only those that changed.
WITH touched AS (SELECT DISTINCT sub_id, k FROM naive_candidates),
current AS (
  SELECT r.sub_id, t.k, e.object_ids AS oid, e.d2 AS d2
  FROM IDENTIFIER(:results) AS r JOIN touched AS t ON r.sub_id = t.sub_id
  LATERAL VIEW explode(arrays_zip(r.object_ids, r.d2)) z AS e
),
both AS (
  SELECT sub_id, k, oid, d2, 0 AS is_new FROM current
  UNION ALL
  SELECT sub_id, k, oid, d2, 1 AS is_new FROM naive_candidates
),
ranked AS (
  SELECT *, row_number() OVER (PARTITION BY sub_id ORDER BY d2, oid) AS rn FROM both
),
top AS (
  SELECT sub_id, sort_array(collect_list(struct(d2, oid))) AS l, max(is_new) AS changed
  FROM ranked WHERE rn <= k GROUP BY sub_id
)
SELECT sub_id, transform(l, e -> e.oid) AS object_ids, transform(l, e -> e.d2) AS d2
FROM top WHERE changed = 1
