"""Process every pending timestamp exactly once (one Spark task per worker), or keep
following new timestamps with --follow.

spark-submit --master local[2] --jars .cache/jars/... spark_apps/microbatch.py \
    --warehouse .cache/warehouse [--until T] [--follow --poll 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from pyspark.sql import SparkSession

from dkmsks.spark.app import base_parser, main_with_session


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--until", type=int, default=None, help="process timestamps up to this one only")
    p.add_argument("--max-timestamps", type=int, default=None, help="at most this many timestamps per run")
    p.add_argument("--follow", action="store_true", help="keep the application warm and poll for new timestamps")
    p.add_argument("--poll", type=float, default=2.0, help="seconds between polls in --follow mode (%(default)s)")
    p.add_argument("--idle-exit", type=float, default=None,
                   help="--follow: stop after this many seconds without new timestamps")
    return p.parse_args(argv)


def run(spark: SparkSession, args: argparse.Namespace) -> int:
    from dkmsks.spark.microbatch_job import run_microbatch

    run_id = args.run_id or "microbatch"
    idle_since = time.monotonic()
    round_no = 0
    while True:
        report = run_microbatch(spark, run_id=f"{run_id}-{round_no}" if args.follow else run_id,
                                until=args.until, max_timestamps=args.max_timestamps)
        round_no += 1
        if report.timestamps:
            idle_since = time.monotonic()
            phases = ", ".join(f"{k} {v / 1e3:.1f} s" for k, v in report.phases_ms.items())
            print(f"processed t={report.timestamps[0]}..{report.timestamps[-1]} ({len(report.timestamps)} "
                  f"timestamps, {report.objects:,} objects, +{report.insertions} -{report.deletions} "
                  f"subscriptions, {report.rejected} rejected){' [recovered]' if report.recovered else ''}: {phases}")
        elif not args.follow:
            print("no pending timestamp")
        if not args.follow:
            if report.recovered:
                continue  # the recovery round only completed the interrupted run
            return 0
        if args.idle_exit is not None and time.monotonic() - idle_since > args.idle_exit:
            return 0
        if not report.timestamps:
            time.sleep(args.poll)


def main(argv: Sequence[str] | None = None) -> int:
    return main_with_session(argv, parse_args, run, "dkmsks-microbatch")


if __name__ == "__main__":
    sys.exit(main())
