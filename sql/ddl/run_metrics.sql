-- Driver phase times of each run (read, assign, workers, commit, ...; maintenance: optimize/vacuum per table).
CREATE TABLE IF NOT EXISTS IDENTIFIER(:table) (
  run_id STRING NOT NULL,
  job STRING NOT NULL COMMENT 'partition, microbatch, repartition or maintain',
  from_t BIGINT NOT NULL COMMENT 'exclusive start of the timestamps processed',
  to_t BIGINT NOT NULL COMMENT 'last timestamp processed',
  phase STRING NOT NULL,
  ms DOUBLE NOT NULL
) USING delta
COMMENT 'dkmsks: run phase times'
