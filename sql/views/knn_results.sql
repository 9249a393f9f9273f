-- Current exact results: one row per (subscription, rank) with the object's location and keywords.
-- The objects are joined as a LEFT JOIN to objects grouped by id (ids are unique in objects, so the
-- grouping changes no row, and every result object is there): Spark then knows the right side is
-- unique on the key and drops the join from any query that reads no object column, such as a
-- reader's point query of (sub_id, rank, object_id, distance) or a count; otherwise that query
-- shuffled the whole landing table for a handful of ids (docs/design.md §9 has the measurement).
CREATE OR REPLACE VIEW knn_results
COMMENT 'dkmsks: current kNN result of every live subscription, ordered by rank'
AS WITH ranked AS (
  SELECT s.sub_id, z.pos + 1 AS rank, z.col.object_ids AS object_id, sqrt(z.col.d2) AS distance,
         s.x AS sub_x, s.y AS sub_y, s.keywords AS sub_keywords, s.k, s.worker, s.updated_t
  FROM knn_current s
  LATERAL VIEW posexplode(arrays_zip(s.object_ids, s.d2)) z AS pos, col
), located AS (
  SELECT id, any_value(x) AS x, any_value(y) AS y, any_value(keywords) AS keywords
  FROM objects GROUP BY id
)
SELECT r.sub_id, r.rank, r.object_id, r.distance, o.x AS object_x, o.y AS object_y,
       o.keywords AS object_keywords, r.sub_x, r.sub_y, r.sub_keywords, r.k, r.worker, r.updated_t
FROM ranked r LEFT JOIN located o ON o.id = r.object_id
