-- Per-timestamp, per-worker work counters (pairs tested) and times (DESIGN §3 fact 4).
CREATE TABLE IF NOT EXISTS IDENTIFIER(:table) (
  t BIGINT NOT NULL,
  plan_version BIGINT NOT NULL,
  worker INT NOT NULL,
  subscriptions BIGINT NOT NULL COMMENT 'live subscriptions held',
  pairs_tested BIGINT NOT NULL COMMENT 'object-subscription pairs produced by the index',
  pairs_in_ball BIGINT NOT NULL COMMENT 'pairs whose object lies in the ball (minimum work)',
  results_changed BIGINT NOT NULL,
  knn_ms DOUBLE NOT NULL, insert_ms DOUBLE NOT NULL, delete_ms DOUBLE NOT NULL,
  run_id STRING NOT NULL
) USING delta
COMMENT 'dkmsks: per-worker metrics per timestamp'
