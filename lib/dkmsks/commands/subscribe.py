"""``dkm subscribe``: register one subscription at the next open timestamp (no Spark)."""

from __future__ import annotations

import argparse

from dkmsks.commands.spark_common import add_warehouse, warehouse_of
from dkmsks.io.formats import BOUNDS_HELP, MAX_K, bounds_option


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``dkm subscribe`` and its flags to the ``dkm`` parser."""
    p = subparsers.add_parser(
        "subscribe",
        help="register a subscription (location, keywords, k) without a file",
        description=("Lands one subscription insertion, validated with the readers' rules and checked "
                     "against the warehouse (the id must not be live; --t must be open). Its result is "
                     "exact from --t on; see it with dkm results or dkm watch. Values are read exactly "
                     "as a file's fields are (write --x=-122.4 for a negative value)."),
    )
    add_id(p)
    p.add_argument("--x", required=True, help="x coordinate (any finite number unless --bounds)")
    p.add_argument("--y", required=True, help="y coordinate, in the units of x")
    p.add_argument("--keywords", required=True,
                   help="OR keywords separated by single spaces, each lower-case [a-z0-9] words joined by '_'")
    p.add_argument("--k", required=True, help=f"number of nearest objects to keep (1..{MAX_K})")
    add_t(p)
    add_warehouse(p, spark=False)
    p.add_argument("--bounds", type=bounds_option, default=None, metavar="BOUNDS", help=BOUNDS_HELP)
    p.set_defaults(func=run)


def add_id(p: argparse.ArgumentParser) -> None:
    # Text, not int: the readers' integer rule judges it and names it in the error.
    """Add the ``--id`` flag."""
    p.add_argument("--id", required=True, help="subscription id (an int64)")


def add_t(p: argparse.ArgumentParser) -> None:
    """Add the ``--t`` flag."""
    p.add_argument("--t", default=None,
                   help="timestamp (default: the next open timestamp, the first one the pipeline has not taken)")


def run(args: argparse.Namespace) -> int:
    """Run ``dkm subscribe`` with the parsed ``args``; the exit status."""
    from dkmsks.client import Client

    client = Client(warehouse_of(args), bounds=args.bounds)
    t = client.subscribe(args.id, args.x, args.y, args.keywords, args.k, t=args.t)
    print(f"subscribed {args.id.strip()} at t={t}; its result is exact once t={t} is processed "
          f"(dkm results --sub {args.id.strip()}, dkm watch --sub {args.id.strip()} --from {t - 1})")
    return 0
