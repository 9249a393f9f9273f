"""``dkm unsubscribe``: delete one subscription at the next open timestamp (no Spark)."""

from __future__ import annotations

import argparse

from dkmsks.commands.spark_common import add_warehouse, warehouse_of
from dkmsks.commands.subscribe import add_id, add_t


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``dkm unsubscribe`` and its flags to the ``dkm`` parser."""
    p = subparsers.add_parser(
        "unsubscribe",
        help="delete a subscription without a file",
        description=("Lands one subscription deletion; the id must be live at --t (the current state "
                     "plus the events landed but not processed yet) and --t must be open. The "
                     "subscription receives no object of --t."),
    )
    add_id(p)
    add_t(p)
    add_warehouse(p, spark=False)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``dkm unsubscribe`` with the parsed ``args``; the exit status."""
    from dkmsks.client import Client

    t = Client(warehouse_of(args)).unsubscribe(args.id, t=args.t)
    print(f"unsubscribed {args.id.strip()} at t={t}")
    return 0
