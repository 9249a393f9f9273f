"""``dkm results``: the exact kNN of one subscription at a processed timestamp (no Spark)."""

from __future__ import annotations

import argparse

from dkmsks.commands.spark_common import add_warehouse, warehouse_of


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``dkm results`` and its flags to the ``dkm`` parser."""
    p = subparsers.add_parser(
        "results",
        help="print a subscription's exact k nearest objects",
        description=("Prints the result of --sub at --as-of T (default: the last processed timestamp): "
                     "rank, object id and Euclidean distance, ordered by (distance, object id)."),
    )
    p.add_argument("--sub", required=True, help="subscription id")
    p.add_argument("--as-of", type=int, default=None, metavar="T", help="processed timestamp (default: the last)")
    add_warehouse(p, spark=False)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``dkm results`` with the parsed ``args``; the exit status."""
    from dkmsks.client import Client

    r = Client(warehouse_of(args)).results(args.sub, as_of=args.as_of)
    print(f"subscription {r.sub_id} at t={r.t}: {len(r.object_ids)} object(s)")
    for rank, (oid, d) in enumerate(zip(r.object_ids, r.distances, strict=True), start=1):
        print(f"{rank:>5}  {oid:>20}  {d!r}")
    return 0
