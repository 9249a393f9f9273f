"""``dkm sql``: run a Spark SQL statement against the project's tables and views, in a Spark
session of its own or, with ``--remote``, through a Spark Connect server (``dkm spark-connect``)
without a JVM."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import warnings
from pathlib import Path
from typing import Any

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
                     "result_changes, ledger, worker_metrics, worker_loads, timestamp_metrics. With --remote, "
                     "through a Spark Connect server (dkm spark-connect) instead of a Spark session of its own: "
                     "no JVM here."),
    )
    add_warehouse(p)
    p.add_argument("statement", help="the SQL statement, e.g. \"SELECT * FROM knn_results WHERE sub_id = 7\"")
    p.add_argument("--limit", type=int, default=50, help="rows to print (%(default)s)")
    p.add_argument("--json", action="store_true", help="print every row as one JSON object a line (no --limit)")
    p.add_argument("--remote", default=None, metavar="sc://HOST:PORT",
                   help="query through this Spark Connect server (dkm spark-connect) instead")
    p.add_argument("--token-file", type=Path, default=None,
                   help="with --remote: the server's token (default: $SPARK_CONNECT_AUTHENTICATE_TOKEN, else "
                        "<warehouse>/run/spark-connect-<database>.token when this host has it)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``dkm sql`` with the parsed ``args``; the exit status."""
    if args.remote is not None:
        return _remote(args)
    spark = session(args, "dkmsks-sql", warehouse_of(args))
    try:
        _print(spark.sql(args.statement), args)
    finally:
        spark.stop()
    return 0


def _remote(args: argparse.Namespace) -> int:
    from dkmsks.spark.connect import read_token, remote_session, token_path
    from dkmsks.warehouse import Warehouse

    token = os.environ.get("SPARK_CONNECT_AUTHENTICATE_TOKEN")
    if args.token_file is not None:
        token = read_token(args.token_file)
    elif token is None:
        local = token_path(Warehouse.at(args.warehouse, args.database))
        token = read_token(local) if local.exists() else None
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException

    from dkmsks.spark.connect import remote_error

    # The error goes out as one line below: not also as pyspark's JSON log record of it, nor as a
    # warning that the retries ran out.
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    warnings.filterwarnings("ignore", message=r"\[RETRIES_EXCEEDED\]")
    spark = remote_session(args.remote, token)
    try:
        _print(spark.sql(args.statement), args)
    except SparkConnectGrpcException as err:
        raise ValueError(remote_error(err, args.remote)) from None
    finally:
        with contextlib.suppress(Exception):  # releasing the session of a server that is gone
            spark.stop()
    return 0


def _print(frame: Any, args: argparse.Namespace) -> None:
    if args.json:
        for row in frame.collect():
            print(json.dumps(row.asDict(recursive=True), default=str))
    else:
        frame.show(args.limit, truncate=False)
