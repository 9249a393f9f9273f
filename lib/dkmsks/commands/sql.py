"""``dkm sql``: run a Spark SQL statement against the project's tables and views."""

from __future__ import annotations

import argparse

from dkmsks.commands.spark_common import add_warehouse, session, warehouse_of


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``dkm sql`` and its flags to the ``dkm`` parser."""
    p = subparsers.add_parser(
        "sql",
        help="query the kNN results and metrics with Spark SQL",
        description=("Runs one Spark SQL statement over the warehouse's tables and views (registered "
                     "by path in the session) and prints the rows. Tables: objects, subscription_events, "
                     "knn_state (compacted snapshot), journal, quarantine, partition_plans, partition_subsets, "
                     "keyword_stats, run_metrics. Views: knn_current, knn_results, result_stream, "
                     "result_changes, ledger, worker_metrics, worker_loads, timestamp_metrics."),
    )
    add_warehouse(p)
    p.add_argument("statement", help="the SQL statement, e.g. \"SELECT * FROM knn_results WHERE sub_id = 7\"")
    p.add_argument("--limit", type=int, default=50, help="rows to print (%(default)s)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``dkm sql`` with the parsed ``args``; the exit status."""
    spark = session(args, "dkmsks-sql", warehouse_of(args))
    try:
        spark.sql(args.statement).show(args.limit, truncate=False)
    finally:
        spark.stop()
    return 0
