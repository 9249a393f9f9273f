-- spark-sql's init file (dkm spark-sql): the warehouse's tables by path in this session's
-- catalog; ${hivevar:tables} and ${hivevar:database} come from dkm spark-sql's --hivevar flags.
CREATE DATABASE IF NOT EXISTS ${hivevar:database};
USE ${hivevar:database};
CREATE TABLE IF NOT EXISTS objects USING delta LOCATION '${hivevar:tables}/objects';
CREATE TABLE IF NOT EXISTS subscription_events USING delta LOCATION '${hivevar:tables}/subscription_events';
CREATE TABLE IF NOT EXISTS quarantine USING delta LOCATION '${hivevar:tables}/quarantine';
CREATE TABLE IF NOT EXISTS partition_plans USING delta LOCATION '${hivevar:tables}/partition_plans';
CREATE TABLE IF NOT EXISTS partition_subsets USING delta LOCATION '${hivevar:tables}/partition_subsets';
CREATE TABLE IF NOT EXISTS keyword_stats USING delta LOCATION '${hivevar:tables}/keyword_stats';
CREATE TABLE IF NOT EXISTS knn_state USING delta LOCATION '${hivevar:tables}/knn_state';
CREATE TABLE IF NOT EXISTS journal USING delta LOCATION '${hivevar:tables}/journal';
CREATE TABLE IF NOT EXISTS run_metrics USING delta LOCATION '${hivevar:tables}/run_metrics';
