-- Landing table of published objects (docs/design.md §6): one row per object id, first ingestion wins.
CREATE TABLE IF NOT EXISTS IDENTIFIER(:table) (
  id BIGINT NOT NULL COMMENT 'object id, unique across the stream',
  x DOUBLE NOT NULL COMMENT 'x coordinate: any finite number (degrees, projected metres, ...)',
  y DOUBLE NOT NULL COMMENT 'y coordinate, in the units of x',
  keywords ARRAY<STRING> NOT NULL COMMENT 'distinct normalised keywords, sorted',
  t BIGINT NOT NULL COMMENT 'timestamp; t <= T0 is O_init',
  source STRING COMMENT 'file the row came from',
  line BIGINT COMMENT 'line of the row in that file'
) USING delta
COMMENT 'dkmsks: published objects'
