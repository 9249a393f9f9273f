-- One-row status of the pipeline: plan, last processed timestamp, sizes, quarantine.
SELECT
  (SELECT max(plan_version) FROM knn_current) AS plan_version,
  (SELECT max(t) FROM ledger) AS last_t,
  (SELECT count(*) FROM ledger) AS processed_timestamps,
  (SELECT count(*) FROM knn_current) AS live_subscriptions,
  (SELECT coalesce(sum(size(object_ids)), 0) FROM knn_current) AS result_rows,
  (SELECT count(*) FROM quarantine) AS quarantined
