-- Rejected input rows with the reason; nothing is dropped silently.
CREATE TABLE IF NOT EXISTS IDENTIFIER(:table) (
  target STRING NOT NULL COMMENT 'table the row was meant for',
  source STRING NOT NULL COMMENT 'input file name',
  line BIGINT NOT NULL COMMENT 'line in that file (header = 1)',
  reason STRING NOT NULL COMMENT 'why the row was refused',
  text STRING COMMENT 'the row as read (first 500 characters)',
  run_id STRING COMMENT 'the ingestion run that saw it first'
) USING delta
COMMENT 'dkmsks: quarantined input rows'
