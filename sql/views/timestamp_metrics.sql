-- Per-timestamp update metrics: slowest worker's kNN time, insertion/deletion time, work balance.
CREATE OR REPLACE VIEW timestamp_metrics
COMMENT 'dkmsks: per-timestamp update time split and work counters'
AS SELECT t, plan_version,
          max(knn_ms) AS knn_ms_slowest_worker,
          max(knn_ms) - min(knn_ms) AS knn_ms_load_balance,
          max(insert_ms) AS insert_ms, max(delete_ms) AS delete_ms,
          sum(pairs_tested) AS pairs_tested, sum(pairs_in_ball) AS pairs_in_ball,
          max(pairs_tested) / greatest(avg(pairs_tested), 1) AS work_max_over_mean,
          sum(results_changed) AS results_changed, sum(subscriptions) AS subscriptions
FROM worker_metrics
GROUP BY t, plan_version
