"""Shared plumbing of the spark-submit entry points in ``spark_apps/``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from pyspark.sql import SparkSession

from dkmsks.warehouse import Warehouse, default_database, default_root


def base_parser(description: str) -> argparse.ArgumentParser:
    """A job's parser with the flags every ``spark_apps`` job takes (warehouse, master, run id...)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--warehouse", default=None,
                   help=f"warehouse: a folder, or s3://bucket/prefix on object storage (endpoint and credentials "
                        f"from the AWS variables) (default: $DKMSKS_WAREHOUSE or {default_root()})")
    p.add_argument("--master", default=None,
                   help="Spark master when run without spark-submit (default local[2])")
    p.add_argument("--database", default=None,
                   help=f"database of the pipeline's tables in the warehouse (default: $DKMSKS_DATABASE or "
                        f"{default_database()})")
    p.add_argument("--run-id", default=None, help="identifier recorded with every write (Airflow passes its run_id)")
    p.add_argument("--spark-ui", action="store_true",
                   help="keep Spark's UI on 127.0.0.1 and write event logs to <warehouse>/run/spark-events")
    return p


def main_with_session(
    argv: Sequence[str] | None,
    parse_args: Callable[[Sequence[str] | None], argparse.Namespace],
    run: Callable[[SparkSession, Warehouse, argparse.Namespace], int],
    app_name: str,
) -> int:
    """Parse, build the warehouse and the one session (:mod:`dkmsks.spark.session`), run, stop."""
    from dkmsks.spark.session import build_session
    from dkmsks.storage.objectstore import ObjectStore, WarehouseUnreachable
    from dkmsks.storage.writer_lock import WriterBusy

    args = parse_args(argv)
    warehouse = Warehouse.at(args.warehouse, args.database)
    if warehouse.location is not None:
        try:
            ObjectStore.of(warehouse.location).check()
        except WarehouseUnreachable as err:
            print(f"{app_name}: error: {err}", file=sys.stderr)
            return 2
    spark = build_session(warehouse, app_name=app_name, master=args.master, ui=args.spark_ui)
    try:
        return run(spark, warehouse, args)
    except WriterBusy as err:
        print(f"{app_name}: busy: {err}", file=sys.stderr)
        return 3
    finally:
        spark.stop()
