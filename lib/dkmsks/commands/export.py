"""``dkm export``: the results export at any processed timestamp (Delta time travel)."""

from __future__ import annotations

import argparse
from pathlib import Path

from dkmsks.commands.spark_common import add_warehouse, warehouse_of


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``dkm export`` and its flags to the ``dkm`` parser."""
    p = subparsers.add_parser(
        "export",
        help="write the exact results at a processed timestamp as JSON lines",
        description=("Writes one JSON line per live subscription at --as-of T (default: the last "
                     "processed timestamp): {sub_id, t, object_ids, distances}, ordered by "
                     "(distance, object id). Earlier timestamps come from Delta time travel: exact for "
                     "every T processed within the as-of horizon (dkm maintain); older ones are refused "
                     "once their history is vacuumed. Reads the Delta logs directly (no Spark): safe "
                     "while the pipeline runs."),
    )
    add_warehouse(p, spark=False)
    p.add_argument("--as-of", type=int, default=None, help="processed timestamp (default: the last)")
    p.add_argument("--out", type=Path, required=True, help="output file (.jsonl)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``dkm export`` with the parsed ``args``; the exit status."""
    from dkmsks.io.writers import write_results_table
    from dkmsks.storage.export import results_table_as_of
    from dkmsks.storage.lake import Lake

    t, table = results_table_as_of(Lake.of(warehouse_of(args)), args.as_of)
    n = write_results_table(args.out, table, t)
    print(f"wrote {n:,} results at t={t} to {args.out}")
    return 0
