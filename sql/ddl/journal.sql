-- The run journal: append-only, one commit per micro-batch run (the run's commit point,
-- idempotent by its txnAppId/txnVersion). Four kinds of records, one partition each:
--   ledger  one per processed timestamp (counts, the run's range);
--   change  every result change (insert, update, delete) per timestamp: the result stream;
--   final   the state row of every subscription the run touched (overlaid on knn_state
--           until a compaction merges it there);
--   metric  per timestamp and worker: work counters and times (docs/design.md §3 fact 4).
CREATE TABLE IF NOT EXISTS IDENTIFIER(:table) (
  record STRING NOT NULL COMMENT 'ledger, change, final or metric',
  t BIGINT NOT NULL COMMENT 'timestamp (final: of the last change of the subscription)',
  plan_version BIGINT NOT NULL,
  run_id STRING NOT NULL,
  worker INT,
  sub_id BIGINT,
  change STRING COMMENT 'change: insert, update or delete; final: upsert or delete',
  object_ids ARRAY<BIGINT> COMMENT 'A(s) after the change, ordered by (distance, object id)',
  d2 ARRAY<DOUBLE> COMMENT 'squared distances, same order',
  x DOUBLE, y DOUBLE, keywords ARRAY<STRING>, k INT, registered_t BIGINT,
  weight BIGINT COMMENT 'final: estimated cost C(s) times |O_init|',
  subset BIGINT COMMENT 'final: plan subset, -1 for subscriptions registered after the plan',
  subscriptions BIGINT, pairs_tested BIGINT, pairs_in_ball BIGINT, results_changed BIGINT,
  knn_ms DOUBLE, insert_ms DOUBLE, delete_ms DOUBLE,
  run_from_t BIGINT COMMENT 'ledger: exclusive start of the run', run_through_t BIGINT COMMENT 'ledger: last timestamp of the run',
  objects BIGINT, insertions BIGINT, deletions BIGINT
) USING delta
PARTITIONED BY (record)
TBLPROPERTIES ('delta.appendOnly' = 'true')
COMMENT 'dkmsks: run journal (commit point of every micro-batch run)'
