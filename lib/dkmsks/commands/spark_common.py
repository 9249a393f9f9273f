"""Flags and session handling shared by the warehouse-backed ``dkm`` commands."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from dkmsks.warehouse import Warehouse, default_database, default_root

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def add_warehouse(p: argparse.ArgumentParser, *, spark: bool = True) -> None:
    """``--warehouse`` and ``--database`` (and ``--master`` for commands that start Spark)."""
    p.add_argument("--warehouse", default=None,
                   help=f"warehouse: a folder, or s3://bucket/prefix on object storage (endpoint and credentials "
                        f"from the AWS variables) (default: $DKMSKS_WAREHOUSE or {default_root()})")
    p.add_argument("--database", default=None,
                   help=f"database of the pipeline's tables (default: $DKMSKS_DATABASE or {default_database()})")
    if spark:
        p.add_argument("--master", default=None, help="Spark master (default local[2], or $DKMSKS_SPARK_MASTER)")
        p.add_argument("--spark-ui", action="store_true",
                       help="keep Spark's UI on 127.0.0.1 (port 4040 or the next free one) and write event logs "
                            "to <warehouse>/run/spark-events (dkm spark-history shows finished jobs)")


def warehouse_of(args: argparse.Namespace) -> Warehouse:
    """The warehouse of ``--warehouse`` and ``--database``; on object storage, checked to
    answer first (:class:`~dkmsks.storage.objectstore.WarehouseUnreachable` otherwise), so
    that a wrong endpoint, bucket or key is one line and nothing is written."""
    warehouse = Warehouse.at(args.warehouse, args.database)
    reachable(warehouse)
    return warehouse


def reachable(warehouse: Warehouse) -> None:
    """Raise :class:`~dkmsks.storage.objectstore.WarehouseUnreachable` when ``warehouse`` is
    on an object store that cannot be used; nothing for a local one."""
    if warehouse.location is not None:
        from dkmsks.storage.objectstore import ObjectStore

        ObjectStore.of(warehouse.location).check()


def session(args: argparse.Namespace, app: str, warehouse: Warehouse, *, master: str | None = None) -> SparkSession:
    """A Spark session on ``warehouse`` with the command's master and Spark UI flags."""
    from dkmsks.spark.session import build_session

    return build_session(warehouse, app_name=app, master=master or args.master, ui=getattr(args, "spark_ui", False))
