-- Per-timestamp, per-worker work counters (pairs tested) and times (docs/design.md §3 fact 4).
CREATE OR REPLACE VIEW worker_metrics
COMMENT 'dkmsks: per-worker metrics per timestamp'
AS SELECT t, plan_version, worker, subscriptions, pairs_tested, pairs_in_ball, results_changed,
          knn_ms, insert_ms, delete_ms, run_id
FROM journal WHERE record = 'metric'
