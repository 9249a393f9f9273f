"""Names of the project's Delta tables (DDL in ``sql/ddl/<name>.sql``) and user views
(``sql/views/<name>.sql``); :mod:`dkmsks.spark.catalog` registers them in a session."""

from __future__ import annotations

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
