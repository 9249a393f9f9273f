-- Every result change per timestamp (registration, update, deletion), appended once per run.
-- With knn_state time travel it reconstructs the results at any processed timestamp.
CREATE TABLE IF NOT EXISTS IDENTIFIER(:table) (
  t BIGINT NOT NULL,
  worker INT NOT NULL,
  sub_id BIGINT NOT NULL,
  change STRING NOT NULL COMMENT 'insert, update or delete',
  object_ids ARRAY<BIGINT> COMMENT 'A(s) after the change; NULL for delete',
  d2 ARRAY<DOUBLE> COMMENT 'squared distances after the change; NULL for delete'
) USING delta
COMMENT 'dkmsks: result changes per timestamp'
