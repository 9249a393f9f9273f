"""Process every pending timestamp exactly once (one Spark task per worker), or keep
following new timestamps with --follow.

spark-submit --master local[2] --jars .cache/jars/... spark_apps/microbatch.py \
    --warehouse .cache/warehouse [--until T] [--follow --poll 2]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pyspark.sql import SparkSession

from dkmsks.spark.app import base_parser, main_with_session
from dkmsks.warehouse import Warehouse


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The job's command line."""
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--until", type=int, default=None, help="process timestamps up to this one only")
    p.add_argument("--max-timestamps", type=int, default=None,
                   help="commit every N timestamps (0 or absent: all pending in one run; with --follow, "
                        "absent: at most 100 per round, follow mode's default)")
    p.add_argument("--follow", action="store_true",
                   help="keep the application and one task per worker warm; process new timestamps as they land "
                        "(needs at least m task slots, e.g. --master local[32])")
    p.add_argument("--poll", type=float, default=2.0, help="seconds between polls in --follow mode (%(default)s)")
    p.add_argument("--idle-exit", type=float, default=None,
                   help="--follow: stop after this many seconds without new timestamps")
    p.add_argument("--compaction", choices=["auto", "always", "never"], default="auto",
                   help="merge the journal's results into knn_state after the run: when the uncompacted "
                        "tail is large (auto), always, or never (%(default)s)")
    p.add_argument("--lock-timeout", type=float, default=None,
                   help="seconds to wait for another writer of the same warehouse before failing "
                        "(default $DKMSKS_LOCK_TIMEOUT or 900)")
    args = p.parse_args(argv)
    if args.max_timestamps is not None and args.max_timestamps < 0:
        p.error("--max-timestamps must be at least 0")
    args.follow_max_timestamps = args.max_timestamps  # --follow tells absent from 0 (round_cap)
    args.max_timestamps = args.max_timestamps or None
    return args


def follow(spark: SparkSession, warehouse: Warehouse, args: argparse.Namespace) -> int:
    """Warm workers (one long-running task each) process each new timestamp as it lands."""
    from dkmsks.jobs.follow import follow_forever, round_cap

    return follow_forever(spark, warehouse, run_id=args.run_id or "follow",
                          until=args.until, max_timestamps=round_cap(args.follow_max_timestamps), poll=args.poll,
                          idle_exit=args.idle_exit, log=lambda text: print(text, flush=True))


def run(spark: SparkSession, warehouse: Warehouse, args: argparse.Namespace) -> int:
    """Process the pending timestamps with the current plan; the exit status."""
    from dkmsks.jobs.microbatch import run_microbatch
    from dkmsks.storage.lake import Lake
    from dkmsks.storage.plans import current_plan

    if current_plan(Lake.of(warehouse)) is None:
        # A scheduled run before the first partitioning has nothing to do; it is not an error.
        print("no partition plan yet (ingest O_init and partition first): nothing to do")
        return 0
    if args.follow:
        return follow(spark, warehouse, args)
    run_id = args.run_id or "microbatch"
    while True:
        report = run_microbatch(spark, warehouse, run_id=run_id, until=args.until, max_timestamps=args.max_timestamps,
                                compaction=args.compaction, lock_timeout=args.lock_timeout)
        if not report.timestamps:
            print("no pending timestamp" + (" (state compacted)" if report.compacted else ""))
            return 0
        phases = ", ".join(f"{k} {v / 1e3:.1f} s" for k, v in report.phases_ms.items())
        print(f"processed t={report.timestamps[0]}..{report.timestamps[-1]} ({len(report.timestamps)} "
              f"timestamps, {report.objects:,} objects, +{report.insertions} -{report.deletions} "
              f"subscriptions, {report.rejected} rejected){' [replay: already committed]' if report.replayed else ''}"
              f": {phases}", flush=True)
        if args.max_timestamps is None:
            return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the job in its own Spark session; the exit status."""
    return main_with_session(argv, parse_args, run, "dkmsks-microbatch")


if __name__ == "__main__":
    sys.exit(main())
