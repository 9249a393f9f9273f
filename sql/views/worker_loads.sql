-- Worker loads C(w) of the current assignment (sum of estimated costs) and subscription counts.
CREATE OR REPLACE VIEW worker_loads
COMMENT 'dkmsks: per-worker subscriptions and estimated load C(w)'
AS SELECT s.worker, count(*) AS subscriptions, sum(s.weight) AS load_weight,
          sum(s.weight) / max(p.o_init) AS load
FROM knn_current s
CROSS JOIN (SELECT o_init FROM partition_plans ORDER BY plan_version DESC LIMIT 1) p
GROUP BY s.worker
