-- Merge the final state of the subscriptions a run touched into knn_state (one commit per run).
MERGE INTO IDENTIFIER(:target) AS s
USING IDENTIFIER(:source) AS f
ON s.sub_id = f.sub_id
WHEN MATCHED AND f.change = 'delete' THEN DELETE
WHEN MATCHED THEN UPDATE SET
  s.plan_version = f.plan_version, s.worker = f.worker, s.x = f.x, s.y = f.y,
  s.keywords = f.keywords, s.k = f.k, s.registered_t = f.registered_t, s.weight = f.weight,
  s.subset = f.subset, s.object_ids = f.object_ids, s.d2 = f.d2, s.updated_t = f.t
WHEN NOT MATCHED AND f.change = 'upsert' THEN INSERT
  (plan_version, worker, sub_id, x, y, keywords, k, registered_t, weight, subset, object_ids, d2, updated_t)
  VALUES (f.plan_version, f.worker, f.sub_id, f.x, f.y, f.keywords, f.k, f.registered_t, f.weight,
          f.subset, f.object_ids, f.d2, f.t)
