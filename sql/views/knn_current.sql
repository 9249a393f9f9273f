-- The current state of each subscription: the newest of its knn_state row and its journal
-- 'final' records, by t. At equal t the snapshot row wins (a compaction merged that very record,
-- or a repartition carried it over with the new plan's worker), then an upsert beats a delete
-- (within a timestamp deletions apply first: a subscription deleted on one worker and registered
-- again on another at the same t is live). A record no newer than the snapshot's row loses, so
-- finals a compaction already merged, and those of an older plan, need no mark to be told
-- apart (docs/design.md §9): no scan of the whole snapshot for its newest updated_t, and a
-- filter on sub_id reaches both scans through the window, which is partitioned by sub_id.
-- The journal scan also skips what compactions merged: ${hivevar:knn_state_through_t} is the
-- snapshot's newest updated_t (from its files' statistics) when the session registered this view
-- (dkmsks.spark.catalog), so Delta skips the final files of every round before it by their t
-- statistics; without the bound every query read every final record ever appended. A bound
-- older than the snapshot only reads more records, which then lose as above.
CREATE OR REPLACE VIEW knn_current
COMMENT 'dkmsks: current per-subscription state (knn_state + uncompacted journal records)'
AS WITH candidates AS (
  SELECT plan_version, worker, sub_id, x, y, keywords, k, registered_t, weight, subset, object_ids, d2,
         updated_t, 2 AS precedence
  FROM knn_state
  UNION ALL
  SELECT plan_version, worker, sub_id, x, y, keywords, k, registered_t, weight, subset, object_ids, d2,
         t AS updated_t, CASE WHEN change = 'upsert' THEN 1 ELSE 0 END AS precedence
  FROM journal WHERE record = 'final' AND t > ${hivevar:knn_state_through_t}
), newest AS (
  SELECT *, row_number() OVER (PARTITION BY sub_id ORDER BY updated_t DESC, precedence DESC) AS n
  FROM candidates
)
SELECT plan_version, worker, sub_id, x, y, keywords, k, registered_t, weight, subset, object_ids, d2, updated_t
FROM newest WHERE n = 1 AND precedence > 0
