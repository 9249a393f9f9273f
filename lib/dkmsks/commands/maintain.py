"""``dkm maintain``: Delta maintenance — small files compacted, VACUUM, the as-of horizon."""

from __future__ import annotations

import argparse

from dkmsks.commands.spark_common import add_warehouse, session, warehouse_of
from dkmsks.storage.retention import DEFAULT_HOURS, ENV


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``dkm maintain`` and its flags to the ``dkm`` parser."""
    p = subparsers.add_parser(
        "maintain",
        help="compact small files, vacuum old ones and set the as-of horizon on every table",
        description=("Per table of the warehouse: sets delta.logRetentionDuration and "
                     "delta.deletedFileRetentionDuration to the as-of horizon, compacts small files "
                     "(OPTIMIZE) and deletes files older than the horizon that no current version needs "
                     "(VACUUM), holding the writer lock. 'dkm export --as-of T' is exact for every T "
                     "processed within the horizon; older ones may be refused. --dry-run reads the tables "
                     "without Spark and says what a run would do."),
    )
    add_warehouse(p)
    p.add_argument("--retention-hours", type=int, default=None,
                   help=f"the as-of horizon in hours (default ${ENV} or {DEFAULT_HOURS})")
    p.add_argument("--dry-run", action="store_true", help="show what would be done; change nothing")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``dkm maintain`` with the parsed ``args``; the exit status."""
    from dkmsks.jobs.maintain import plan_maintenance, run_maintenance

    warehouse = warehouse_of(args)
    print(f"warehouse {warehouse}")
    if args.dry_run:
        report = plan_maintenance(warehouse, retention_hours=args.retention_hours)
    else:
        spark = session(args, "dkmsks-maintain", warehouse)
        try:
            report = run_maintenance(spark, warehouse, run_id="maintain", retention_hours=args.retention_hours)
        finally:
            spark.stop()
    print("\n".join(report.lines()))
    return 0
