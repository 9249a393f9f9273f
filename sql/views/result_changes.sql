-- Every result change per timestamp (registration, update, deletion) in commit order; the
-- journal is append-only, so `spark.readStream.table("journal")` filtered on
-- record = 'change' is the same stream, delivered as each run commits.
CREATE OR REPLACE VIEW result_changes
COMMENT 'dkmsks: result changes per timestamp'
AS SELECT t, worker, sub_id, change, object_ids, d2, run_id
FROM journal WHERE record = 'change'
