"""Names of the project's Delta tables and their idempotent creation from ``sql/ddl``."""

from __future__ import annotations

from pyspark.sql import SparkSession

from dkmsks.spark.sql_files import run_sql

OBJECTS = "objects"
EVENTS = "subscription_events"
QUARANTINE = "quarantine"
PLANS = "partition_plans"
SUBSETS = "partition_subsets"
KEYWORD_STATS = "keyword_stats"
STATE = "knn_state"
JOURNAL = "journal"
RUN_METRICS = "run_metrics"
# Views over the journal and the state (sql/views), in creation order.
LEDGER = "ledger"
CHANGES = "result_changes"
WORKER_METRICS = "worker_metrics"
CURRENT = "knn_current"

ALL_TABLES = (OBJECTS, EVENTS, QUARANTINE, PLANS, SUBSETS, KEYWORD_STATS, STATE, JOURNAL, RUN_METRICS)
VIEWS = (LEDGER, CHANGES, WORKER_METRICS, CURRENT, "knn_results", "result_stream", "worker_loads",
         "timestamp_metrics")


def ensure_tables(spark: SparkSession) -> None:
    """Create every table (``CREATE TABLE IF NOT EXISTS``) and (re)create the user views."""
    for table in ALL_TABLES:
        run_sql(spark, f"ddl/{table}.sql", table=table)
    for view in VIEWS:
        run_sql(spark, f"views/{view}.sql")


def table_exists(spark: SparkSession, name: str) -> bool:
    return bool(spark.catalog.tableExists(name))
