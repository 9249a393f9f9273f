"""``dkm repartition``: a new plan from the current subscriptions and balls, switched atomically.

The same job as the ``dkmsks_repartition`` DAG and ``spark_apps/partition.py --repartition``
(:func:`dkmsks.jobs.partition.run_repartition`): results are unchanged, only assignments,
costs and the plan change; a running ``dkm follow`` notices the new plan and switches to it.
"""

from __future__ import annotations

import argparse

from dkmsks.commands.spark_common import add_warehouse, session, warehouse_of
from dkmsks.flags import add_partition_flags, config_from_args


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``dkm repartition`` and its flags to the ``dkm`` parser."""
    p = subparsers.add_parser(
        "repartition",
        help="make a new partition plan from the current state and switch to it",
        description=("Partitions the live subscriptions again with --method and its parameters, using their "
                     "current balls, and switches the state to the new plan in one commit (T0 and the data "
                     "space stay those of the first plan). Holds the writer lock; safe next to dkm follow."),
    )
    add_warehouse(p)
    add_partition_flags(p)
    p.add_argument("--run-id", default="repartition", help="recorded with the plan (%(default)s)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``dkm repartition`` with the parsed ``args``; the exit status."""
    from dkmsks.jobs.partition import run_repartition

    config = config_from_args(args)
    warehouse = warehouse_of(args)
    spark = session(args, "dkmsks-repartition", warehouse)
    try:
        report = run_repartition(spark, warehouse, config, run_id=args.run_id)
    finally:
        spark.stop()
    loads = report.loads
    print(f"plan {report.plan_version}: {report.method}, m={report.workers}, {report.subscriptions:,} subscriptions, "
          f"{report.subsets:,} subsets; C(w) min {min(loads):.4g} max {max(loads):.4g}")
    return 0
