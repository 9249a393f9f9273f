-- dkm bench paper, a Spark point: per timestamp over workers the paper's metrics from
-- worker_metrics, then the run's phase times; one JSON object per row.
SELECT to_json(named_struct(
  't', t, 'knn_max', max(knn_ms), 'knn_min', min(knn_ms), 'insert', max(insert_ms),
  'delete', max(delete_ms), 'work', sum(pairs_tested), 'work_max', max(pairs_tested),
  'work_min', min(pairs_tested), 'workers', count(*), 'min_work', sum(pairs_in_ball))) AS j
FROM worker_metrics GROUP BY t
UNION ALL
SELECT to_json(named_struct('job', job, 'phase', phase, 'ms', sum(ms))) AS j
FROM run_metrics GROUP BY job, phase
