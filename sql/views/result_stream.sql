-- Result changes as subscribers see them, per timestamp, with distances (not squared).
-- The change data feed of knn_state (`table_changes('knn_state', v)`) carries the same
-- changes at compaction granularity.
CREATE OR REPLACE VIEW result_stream
COMMENT 'dkmsks: result changes per timestamp (insert, update, delete) with distances'
AS SELECT t, sub_id, worker, change, object_ids, transform(d2, v -> sqrt(v)) AS distances, run_id
FROM journal WHERE record = 'change'
