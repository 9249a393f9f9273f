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

from dkmsks.spark.app import base_parser, main_with_session


def add_partition_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--method", choices=["kop", "sop", "dkm"], default="dkm", help="partitioner (%(default)s)")
    p.add_argument("--workers", type=int, default=20, help="m, number of workers (%(default)s)")
    p.add_argument("--theta", type=int, default=20, help="SOP: regions = theta * m (%(default)s)")
    p.add_argument("--gamma1", type=int, default=100_000, help="DkM-SKS: subsets = gamma1 * m (%(default)s)")
    p.add_argument("--gamma2", type=int, default=20, help="DkM-SKS: hybrid split below this size (%(default)s)")
    p.add_argument("--grid", type=int, default=16384, help="DkM-SKS worker grid size G (%(default)s)")
    p.add_argument("--t0", type=int, default=0, help="end of the initial phase T0 (%(default)s)")
    p.add_argument("--new-cost", choices=["live", "paper"], default="live",
                   help="cost of new subscriptions: actual ball (live) or the paper's Eq. 7 (%(default)s)")


def params_from(args: argparse.Namespace):
    from dkmsks.spark.partition_job import PartitionParams

    for name in ("workers", "theta", "gamma1", "grid"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.gamma2 < 0:
        raise ValueError(f"--gamma2 must be at least 0, got {args.gamma2}")
    return PartitionParams(method=args.method, workers=args.workers, theta=args.theta, gamma1=args.gamma1,
                           gamma2=args.gamma2, grid=args.grid, t0=args.t0, new_cost=args.new_cost)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = base_parser(__doc__.splitlines()[0])
    add_partition_args(p)
    p.add_argument("--repartition", action="store_true",
                   help="make a new plan from the current subscriptions and balls")
    p.add_argument("--if-absent", action="store_true",
                   help="do nothing when a plan already exists (safe retries of the initial partition)")
    return p.parse_args(argv)


def run(spark: SparkSession, args: argparse.Namespace) -> int:
    from dkmsks.spark import tables
    from dkmsks.spark.partition_job import partition_done, run_partition, run_repartition

    params = params_from(args)
    run_id = args.run_id or ("repartition" if args.repartition else "partition")
    if args.repartition:
        from dkmsks.spark.microbatch_job import current_plan

        tables.ensure_tables(spark)
        if current_plan(spark) is None:
            print("no partition plan yet: nothing to repartition (the scheduled run is a no-op)")
            return 0
        report = run_repartition(spark, params, run_id=run_id)
    else:
        tables.ensure_tables(spark)
        if args.if_absent and partition_done(spark):
            print("the initial partitioning is done already; nothing to do (--if-absent)")
            return 0
        report = run_partition(spark, params, run_id=run_id)
    loads = report.loads
    print(f"plan {report.plan_version}: {report.method}, m={report.workers}, {report.subscriptions:,} "
          f"subscriptions, {report.subsets:,} subsets; C(w) min {min(loads):.4g} max {max(loads):.4g}")
    print("phases: " + ", ".join(f"{k} {v / 1e3:.1f} s" for k, v in report.phases_ms.items()))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return main_with_session(argv, parse_args, run, "dkmsks-partition")


if __name__ == "__main__":
    sys.exit(main())
