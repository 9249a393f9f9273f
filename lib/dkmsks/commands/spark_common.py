"""Flags and session handling shared by the Spark-backed ``dkm`` commands."""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def add_warehouse(p: argparse.ArgumentParser, *, required: bool = True) -> None:
    default = os.environ.get("DKMSKS_WAREHOUSE")
    p.add_argument("--warehouse", type=Path, required=required and default is None,
                   default=Path(default) if default else None,
                   help="Delta warehouse and metastore folder (or $DKMSKS_WAREHOUSE)")
    p.add_argument("--master", default=None, help="Spark master (default local[2], or $DKMSKS_SPARK_MASTER)")
    p.add_argument("--database", default=os.environ.get("DKMSKS_DATABASE"),
                   help="database of the pipeline's tables (default: $DKMSKS_DATABASE or default)")


def add_tuning(p: argparse.ArgumentParser) -> None:
    p.add_argument("--method", choices=["kop", "sop", "dkm"], default="dkm", help="partitioner (%(default)s)")
    p.add_argument("--workers", type=int, default=20, help="m, number of workers (%(default)s)")
    p.add_argument("--theta", type=int, default=20, help="SOP: theta (%(default)s)")
    p.add_argument("--gamma1", type=int, default=100_000, help="DkM-SKS: gamma1 (%(default)s)")
    p.add_argument("--gamma2", type=int, default=20, help="DkM-SKS: gamma2 (%(default)s)")
    p.add_argument("--grid", type=int, default=16384, help="DkM-SKS worker grid G (%(default)s)")
    p.add_argument("--t0", type=int, default=0, help="end of the initial phase T0 (%(default)s)")
    p.add_argument("--new-cost", choices=["live", "paper"], default="live",
                   help="cost of new subscriptions: over their actual ball, re-estimated as it shrinks "
                        "(live), or the paper's Eq. 7 estimate (paper) (%(default)s)")


def session(args: argparse.Namespace, app: str):
    from dkmsks.spark.session import build_session, use_database

    if args.warehouse is None:
        raise ValueError("give --warehouse DIR (or set DKMSKS_WAREHOUSE)")
    spark = build_session(args.warehouse, app_name=app, master=args.master)
    use_database(spark, getattr(args, "database", None))
    return spark
