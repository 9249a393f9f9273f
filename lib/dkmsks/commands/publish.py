"""``dkm publish``: land the next timestamps of a workload, as publishers would.

Spark-free (:mod:`dkmsks.storage.publish`): rows are validated with the readers' rule set and
appended with delta-rs under the landing lock, so publishing one timestamp costs a fraction of
a second instead of a Spark application's start.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from dkmsks.commands.spark_common import add_warehouse, warehouse_of
from dkmsks.io.formats import BOUNDS_HELP, bounds_option


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``dkm publish`` and its flags to the ``dkm`` parser."""
    p = subparsers.add_parser(
        "publish",
        help="land the next N timestamps of a workload's files (no Spark)",
        description=("Finds the newest timestamp landed from files of these names (or taken by the "
                     "pipeline, if newer) and lands the objects and subscription events of the next "
                     "--timestamps timestamps from the workload files: validated with the readers' rules, "
                     "checked against the warehouse "
                     "(closed timestamps, landed object ids, live subscriptions), refused rows "
                     "quarantined with file, line and reason. Publishing the same rows again changes "
                     "nothing. Rows of other timestamps are skipped unvalidated."),
    )
    p.add_argument("--objects", type=Path, default=None, help="workload objects file")
    p.add_argument("--events", type=Path, default=None, help="workload subscription events file")
    add_warehouse(p, spark=False)
    p.add_argument("--timestamps", type=int, default=1, help="how many timestamps to publish (%(default)s)")
    p.add_argument("--after", type=int, default=None, metavar="T",
                   help="publish the timestamps after T (default: the newest one landed from these files, or "
                        "the last one the pipeline took)")
    p.add_argument("--bounds", type=bounds_option, default=None, metavar="BOUNDS", help=BOUNDS_HELP)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``dkm publish`` with the parsed ``args``; the exit status."""
    from dkmsks.storage.publish import publish_files

    done = publish_files(warehouse_of(args), objects=args.objects, events=args.events,
                         timestamps=args.timestamps, after=args.after, bounds=args.bounds)
    r = done.report
    extra = [f"{n:,} {what}" for n, what in ((r.replayed, "replayed"), (r.quarantined, "newly quarantined")) if n]
    if r.objects or r.events:
        print(f"published t={r.first_t}..{r.last_t}: {r.objects:,} objects, {r.events:,} subscription events"
              + (f" ({', '.join(extra)})" if extra else ""))
    elif r.replayed:
        # Landed before under other names (another publisher): the default window cannot move on.
        print(f"nothing new at t={done.after + 1}..{done.upto}: {r.replayed:,} rows were landed before by another "
              f"publisher; give --after {done.upto} to go on")
    else:
        print(f"nothing new to publish at t={done.after + 1}..{done.upto}"
              + (f" ({', '.join(extra)})" if extra else ""))
    return 0
