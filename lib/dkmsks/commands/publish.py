"""``dkm publish``: append the next timestamps of a workload, as publishers would."""

from __future__ import annotations

import argparse
from pathlib import Path

from dkmsks.commands.spark_common import add_warehouse, session, warehouse_of
from dkmsks.io.formats import BOUNDS_HELP, bounds_option


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "publish",
        help="ingest the next N timestamps of a workload's files into the landing tables",
        description=("Finds the last timestamp already in the landing tables and ingests the "
                     "objects and subscription events of the next --timestamps timestamps from "
                     "the workload files (validated, quarantined like any ingestion)."),
    )
    p.add_argument("--objects", type=Path, required=True, help="workload objects file")
    p.add_argument("--events", type=Path, required=True, help="workload events file")
    add_warehouse(p)
    p.add_argument("--timestamps", type=int, default=1, help="how many timestamps to publish (%(default)s)")
    p.add_argument("--bounds", type=bounds_option, default=None, metavar="BOUNDS", help=BOUNDS_HELP)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pyspark.sql import functions as F

    from dkmsks.spark import tables
    from dkmsks.spark.ingest import ingest_files

    warehouse = warehouse_of(args)
    spark = session(args, "dkmsks-publish", warehouse)
    try:
        lasts = [spark.table(t).agg(F.max("t").alias("t")).collect()[0].t for t in (tables.OBJECTS, tables.EVENTS)]
        last = max((x for x in lasts if x is not None), default=None)
        if last is None:
            raise ValueError("the landing tables are empty: ingest O_init first (dkm run --until T0)")
        upto = last + args.timestamps
        o, e = ingest_files(spark, warehouse, objects=args.objects, events=args.events, run_id="publish", bounds=args.bounds,
                            after=last, upto=upto)
        print(f"published t={last + 1}..{upto}: {o.accepted:,} objects, {e.accepted:,} subscription events")
    finally:
        spark.stop()
    return 0
