-- Current exact results: one row per (subscription, rank) with the object's location and keywords.
CREATE OR REPLACE VIEW knn_results
COMMENT 'dkmsks: current kNN result of every live subscription, ordered by rank'
AS WITH ranked AS (
  SELECT s.sub_id, z.pos + 1 AS rank, z.col.object_ids AS object_id, sqrt(z.col.d2) AS distance,
         s.x AS sub_x, s.y AS sub_y, s.keywords AS sub_keywords, s.k, s.worker, s.updated_t
  FROM knn_current s
  LATERAL VIEW posexplode(arrays_zip(s.object_ids, s.d2)) z AS pos, col
)
SELECT r.sub_id, r.rank, r.object_id, r.distance, o.x AS object_x, o.y AS object_y,
       o.keywords AS object_keywords, r.sub_x, r.sub_y, r.sub_keywords, r.k, r.worker, r.updated_t
FROM ranked r JOIN objects o ON o.id = r.object_id
