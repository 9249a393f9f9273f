"""Ingest an objects file and/or a subscription-events file into the Delta landing tables.

Rows that fail validation go to the ``quarantine`` table with their line and reason; a
replayed file changes nothing (insert-only MERGE). An input that is unusable as a whole
(truncated gzip, missing columns, every row rejected: see :mod:`dkmsks.spark.ingest`) ends
the job with one line on stderr and exit status 2, which the DAGs do not retry.

spark-submit --master local[2] --jars .cache/jars/... spark_apps/ingest.py \
    --warehouse .cache/warehouse --objects objects.tsv.gz --events events.tsv.gz --run-id manual
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from pyspark.sql import SparkSession

from dkmsks.io.formats import BOUNDS_HELP, bounds_option
from dkmsks.io.rejections import EXIT_INPUT_UNUSABLE, InputError
from dkmsks.spark.app import base_parser, main_with_session
from dkmsks.warehouse import Warehouse


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The job's command line."""
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--objects", type=Path, help="objects file (TSV/CSV, .gz, or Parquet)")
    p.add_argument("--events", type=Path, help="subscription events file")
    p.add_argument("--bounds", type=bounds_option, default=None, metavar="BOUNDS", help=BOUNDS_HELP)
    p.add_argument("--until", type=int, default=None,
                   help="ingest the rows with t <= T only (e.g. 0: O_init and the initial subscriptions)")
    args = p.parse_args(argv)
    if not args.objects and not args.events:
        p.error("give --objects, --events or both")
    return args


def run(spark: SparkSession, warehouse: Warehouse, args: argparse.Namespace) -> int:
    """Ingest the files into the landing tables; the exit status."""
    from dkmsks.spark.ingest import ingest_files

    try:
        reports = ingest_files(spark, warehouse, objects=args.objects, events=args.events,
                               run_id=args.run_id or "ingest", bounds=args.bounds, upto=args.until)
    except InputError as err:
        # One line, and an exit status that tells the DAG not to retry: the input must change.
        print(f"dkmsks-ingest: error: {err}", file=sys.stderr)
        return EXIT_INPUT_UNUSABLE
    for r in reports:
        print(f"{r.table.replace('_', ' ')}: {r.accepted:,} accepted, {r.rejected:,} quarantined")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the job in its own Spark session; the exit status."""
    return main_with_session(argv, parse_args, run, "dkmsks-ingest")


if __name__ == "__main__":
    sys.exit(main())
