"""Partition the initial subscriptions after O_init (KOP, SOP or DkM-SKS) and write the plan
and the per-worker state; with --repartition, make a new plan from the current state.

spark-submit --master local[2] --jars .cache/jars/... spark_apps/partition.py \
    --warehouse .cache/warehouse --method dkm --workers 20 --theta 20 --gamma1 100000 --gamma2 20
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pyspark.sql import SparkSession

from dkmsks.flags import add_partition_flags, config_from_args
from dkmsks.spark.app import base_parser, main_with_session
from dkmsks.warehouse import Warehouse


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The job's command line."""
    p = base_parser(__doc__.splitlines()[0])
    add_partition_flags(p)
    p.add_argument("--repartition", action="store_true",
                   help="make a new plan from the current subscriptions and balls")
    p.add_argument("--if-absent", action="store_true",
                   help="do nothing when a plan already exists (safe retries of the initial partition)")
    p.add_argument("--knn-partitions", type=int, default=4,
                   help="Spark tasks for the initial kNN within O_init (%(default)s)")
    return p.parse_args(argv)


def run(spark: SparkSession, warehouse: Warehouse, args: argparse.Namespace) -> int:
    """Make the first plan (or, with ``--repartition``, a new one) and the state; the exit status."""
    from dkmsks.jobs.partition import run_partition, run_repartition
    from dkmsks.storage.lake import Lake
    from dkmsks.storage.plans import current_plan
    from dkmsks.storage.progress import partition_done

    config = config_from_args(args)
    run_id = args.run_id or ("repartition" if args.repartition else "partition")
    if args.repartition:
        if current_plan(Lake.of(warehouse)) is None:
            print("no partition plan yet: nothing to repartition (the scheduled run is a no-op)")
            return 0
        report = run_repartition(spark, warehouse, config, run_id=run_id)
    else:
        if args.if_absent and partition_done(warehouse):
            print("the initial partitioning is done already; nothing to do (--if-absent)")
            return 0
        report = run_partition(spark, warehouse, config, run_id=run_id, knn_partitions=args.knn_partitions)
    loads = report.loads
    print(f"plan {report.plan_version}: {report.method}, m={report.workers}, {report.subscriptions:,} "
          f"subscriptions, {report.subsets:,} subsets; C(w) min {min(loads):.4g} max {max(loads):.4g}")
    print("phases: " + ", ".join(f"{k} {v / 1e3:.1f} s" for k, v in report.phases_ms.items()))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the job in its own Spark session; the exit status."""
    return main_with_session(argv, parse_args, run, "dkmsks-partition")


if __name__ == "__main__":
    sys.exit(main())
