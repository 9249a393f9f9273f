-- The current state: the knn_state snapshot overlaid with the journal's final records that no
-- compaction has merged yet (those of the snapshot's plan newer than its newest row). At equal t
-- the upsert wins ('upsert' > 'delete'): a subscription deleted on one worker and registered
-- again on another at the same timestamp is live, deletions apply first within a timestamp.
CREATE OR REPLACE VIEW knn_current
COMMENT 'dkmsks: current per-subscription state (knn_state + uncompacted journal records)'
AS WITH snapshot AS (
  SELECT coalesce(max(plan_version), (SELECT max(plan_version) FROM partition_plans)) AS plan_version,
         coalesce(max(updated_t), -9223372036854775808) AS through_t
  FROM knn_state
), tail AS (
  SELECT j.*, row_number() OVER (PARTITION BY j.sub_id ORDER BY j.t DESC, j.change DESC) AS newest
  FROM journal j JOIN snapshot s ON j.plan_version = s.plan_version
  WHERE j.record = 'final' AND j.t > s.through_t
)
SELECT plan_version, worker, sub_id, x, y, keywords, k, registered_t, weight, subset, object_ids, d2, updated_t
FROM knn_state s LEFT ANTI JOIN tail USING (sub_id)
UNION ALL
SELECT plan_version, worker, sub_id, x, y, keywords, k, registered_t, weight, subset, object_ids, d2, t AS updated_t
FROM tail WHERE newest = 1 AND change = 'upsert'
