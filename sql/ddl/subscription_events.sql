-- Landing table of subscription insertions and deletions; (id, t, op) identifies an event.
CREATE TABLE IF NOT EXISTS IDENTIFIER(:table) (
  op STRING NOT NULL COMMENT 'insert or delete',
  id BIGINT NOT NULL COMMENT 'subscription id (may be registered again after a delete)',
  x DOUBLE COMMENT 'x coordinate (any finite number); NULL for deletions',
  y DOUBLE COMMENT 'y coordinate, in the units of x; NULL for deletions',
  keywords ARRAY<STRING> COMMENT 'OR keywords; NULL for deletions',
  k INT COMMENT 'number of neighbours; NULL for deletions',
  t BIGINT NOT NULL COMMENT 'timestamp of the event',
  source STRING COMMENT 'file the row came from',
  line BIGINT COMMENT 'line of the row in that file'
) USING delta
COMMENT 'dkmsks: subscription events'
