-- One row per partition plan (versioned): method, parameters, sizes and the plan metadata.
CREATE TABLE IF NOT EXISTS IDENTIFIER(:table) (
  plan_version BIGINT NOT NULL COMMENT 'increases by one per (re)partitioning',
  method STRING NOT NULL COMMENT 'kop, sop, dkm or ps2',
  workers INT NOT NULL COMMENT 'm',
  params STRING NOT NULL COMMENT 'the PartitionConfig as JSON (dkmsks.core.config)',
  subsets BIGINT NOT NULL,
  subscriptions BIGINT NOT NULL,
  o_init BIGINT NOT NULL,
  effective_t BIGINT NOT NULL COMMENT 'the plan serves timestamps after this one',
  meta_json STRING NOT NULL COMMENT 'PartitionPlan.to_tables() metadata (space, loads, ...)'
) USING delta
COMMENT 'dkmsks: partition plans'
