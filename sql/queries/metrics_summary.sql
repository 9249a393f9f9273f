-- Medians over processed timestamps of the per-timestamp metrics view.
SELECT count(*) AS timestamps,
       percentile(knn_ms_slowest_worker, 0.5) AS knn_ms,
       percentile(pairs_tested, 0.5) AS pairs_tested,
       percentile(pairs_in_ball, 0.5) AS pairs_in_ball,
       percentile(work_max_over_mean, 0.5) AS work_max_over_mean
FROM timestamp_metrics
