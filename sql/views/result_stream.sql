-- Result changes as subscribers see them: the change data feed of knn_state.
CREATE OR REPLACE VIEW result_stream
COMMENT 'dkmsks: change data feed of the kNN state (insert, update_preimage/postimage, delete)'
AS SELECT _commit_version AS state_version, _commit_timestamp AS committed_at, _change_type AS change_type,
          sub_id, worker, object_ids, transform(d2, v -> sqrt(v)) AS distances, updated_t
FROM table_changes('knn_state', 0)
