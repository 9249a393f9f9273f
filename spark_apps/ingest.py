"""Ingest an objects file and/or a subscription-events file into the Delta landing tables.

Rows that fail validation go to the ``quarantine`` table with their line and reason; a
replayed file changes nothing (insert-only MERGE).

spark-submit --master local[2] --jars .cache/jars/... spark_apps/ingest.py \
    --warehouse .cache/warehouse --objects objects.tsv.gz --events events.tsv.gz --run-id manual
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from pyspark.sql import SparkSession

from dkmsks.spark.app import base_parser, main_with_session
from dkmsks.warehouse import Warehouse


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--objects", type=Path, help="objects file (TSV/CSV, .gz, or Parquet)")
    p.add_argument("--events", type=Path, help="subscription events file")
    args = p.parse_args(argv)
    if not args.objects and not args.events:
        p.error("give --objects, --events or both")
    return args


def run(spark: SparkSession, warehouse: Warehouse, args: argparse.Namespace) -> int:
    from dkmsks.spark.ingest import ingest_events, ingest_objects

    run_id = args.run_id or "ingest"
    if args.objects:
        r = ingest_objects(spark, args.objects, run_id=run_id)
        print(f"objects: {r.accepted:,} accepted, {r.rejected:,} quarantined")
    if args.events:
        r = ingest_events(spark, args.events, run_id=run_id)
        print(f"subscription events: {r.accepted:,} accepted, {r.rejected:,} quarantined")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return main_with_session(argv, parse_args, run, "dkmsks-ingest")


if __name__ == "__main__":
    sys.exit(main())
