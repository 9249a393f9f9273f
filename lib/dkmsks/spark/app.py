"""Shared plumbing of the spark-submit entry points in ``spark_apps/``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from pyspark.sql import SparkSession

DEFAULT_WAREHOUSE = Path(os.environ.get("DKMSKS_WAREHOUSE", ".cache/warehouse"))


def base_parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--warehouse", type=Path, default=DEFAULT_WAREHOUSE,
                   help="Delta warehouse and metastore folder (default: $DKMSKS_WAREHOUSE or %(default)s)")
    p.add_argument("--master", default=None,
                   help="Spark master when run without spark-submit (default local[2])")
    p.add_argument("--database", default=os.environ.get("DKMSKS_DATABASE"),
                   help="database of the pipeline's tables in the warehouse (default: $DKMSKS_DATABASE or default)")
    p.add_argument("--run-id", default=None, help="identifier recorded with every write (Airflow passes its run_id)")
    return p


def main_with_session(
    argv: Sequence[str] | None,
    parse_args: Callable[[Sequence[str] | None], argparse.Namespace],
    run: Callable[[SparkSession, argparse.Namespace], int],
    app_name: str,
) -> int:
    """Parse, build the one session (see :mod:`dkmsks.spark.session`), run, stop."""
    from dkmsks.spark.session import build_session, use_database
    from dkmsks.spark.writer_lock import WriterBusy

    args = parse_args(argv)
    try:
        spark = build_session(args.warehouse, app_name=app_name, master=args.master)
    except WriterBusy as err:
        print(f"{app_name}: busy: {err}", file=sys.stderr)
        return 3
    try:
        use_database(spark, args.database)
        return run(spark, args)
    finally:
        spark.stop()
