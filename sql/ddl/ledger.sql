-- Processed timestamps. A run that processes (from_t, t_last] commits knn_state once; each of
-- its timestamps gets a row naming that commit and the run's start.
CREATE TABLE IF NOT EXISTS IDENTIFIER(:table) (
  t BIGINT NOT NULL,
  plan_version BIGINT NOT NULL,
  state_version BIGINT NOT NULL COMMENT 'Delta version of knn_state that includes t',
  run_from_t BIGINT NOT NULL COMMENT 'state at this timestamp is the run base (exclusive start)',
  objects BIGINT NOT NULL,
  insertions BIGINT NOT NULL,
  deletions BIGINT NOT NULL,
  run_id STRING NOT NULL
) USING delta
COMMENT 'dkmsks: ledger of processed timestamps'
