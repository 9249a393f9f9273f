"""Delta maintenance: compact small files, VACUUM beyond the as-of horizon, set retention.

Per table of the warehouse, under the writer lock (dkmsks.jobs.maintain).

spark-submit --master local[2] --jars .cache/jars/... spark_apps/maintain.py \
    --warehouse .cache/warehouse [--retention-hours 168]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pyspark.sql import SparkSession

from dkmsks.spark.app import base_parser, main_with_session
from dkmsks.storage.retention import DEFAULT_HOURS, ENV
from dkmsks.warehouse import Warehouse


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The job's command line."""
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--retention-hours", type=int, default=None,
                   help=f"the as-of horizon: history every table keeps, in hours (default ${ENV} or {DEFAULT_HOURS})")
    args = p.parse_args(argv)
    if args.retention_hours is not None and args.retention_hours < 0:
        p.error("--retention-hours must be at least 0")
    return args


def run(spark: SparkSession, warehouse: Warehouse, args: argparse.Namespace) -> int:
    """Maintain every table of the warehouse and print the report; the exit status."""
    from dkmsks.jobs.maintain import run_maintenance

    report = run_maintenance(spark, warehouse, run_id=args.run_id or "maintain", retention_hours=args.retention_hours)
    print("\n".join(report.lines()), flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the job in its own Spark session; the exit status."""
    return main_with_session(argv, parse_args, run, "dkmsks-maintain")


if __name__ == "__main__":
    sys.exit(main())
