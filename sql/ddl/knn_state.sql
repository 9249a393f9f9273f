-- Per-worker kNN state: one row per live subscription with its assignment, estimated cost and
-- exact current result. Partitioned by worker; its change data feed is the result stream.
-- Laid out for point reads by sub_id (docs/design.md §9): writers sort each worker's rows by
-- sub_id, and Parquet pages hold at most 1000 rows, so a query on a few sub_ids reads a few
-- pages of each file through the Parquet page index instead of every row. Delta hands table
-- properties to the Parquet writer of its Spark writes (tests/spark/test_state_layout.py checks
-- the partition job's overwrite and maintenance's rewrite); maintenance sets it on tables
-- created before it was here.
CREATE TABLE IF NOT EXISTS IDENTIFIER(:table) (
  plan_version BIGINT NOT NULL COMMENT 'plan the assignment belongs to (same on every row)',
  worker INT NOT NULL COMMENT 'worker holding the subscription',
  sub_id BIGINT NOT NULL,
  x DOUBLE NOT NULL, y DOUBLE NOT NULL,
  keywords ARRAY<STRING> NOT NULL,
  k INT NOT NULL,
  registered_t BIGINT NOT NULL COMMENT 'registration timestamp (initial subscriptions: <= T0)',
  weight BIGINT NOT NULL COMMENT 'estimated cost C(s) times |O_init| (exact integer, sums to C(w))',
  subset BIGINT NOT NULL COMMENT 'plan subset of an initial subscription, -1 for later ones',
  object_ids ARRAY<BIGINT> NOT NULL COMMENT 'A(s) ordered by (distance, object id)',
  d2 ARRAY<DOUBLE> NOT NULL COMMENT 'squared distances, same order (exact; distance = sqrt)',
  updated_t BIGINT NOT NULL COMMENT 'timestamp of the last change of this row'
) USING delta
PARTITIONED BY (worker)
TBLPROPERTIES (
  'delta.enableChangeDataFeed' = 'true',
  'delta.enableDeletionVectors' = 'true',
  'parquet.page.row.count.limit' = '1000'
)
COMMENT 'dkmsks: per-worker exact kNN state'
