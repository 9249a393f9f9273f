"""``dkm status``: plan, last processed timestamp, pending work, worker loads, quarantine.

Read from the Delta logs through delta-rs (no Spark, no lock): it answers in about a second
while the pipeline runs, and what it shows is one committed state.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter

from dkmsks.commands.spark_common import add_warehouse, warehouse_of


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``dkm status`` and its flags to the ``dkm`` parser."""
    p = subparsers.add_parser(
        "status",
        help="show the plan, the last processed timestamp, worker loads and quarantined rows",
        description="A one-screen summary of a warehouse's pipeline state (read without Spark).",
    )
    add_warehouse(p, spark=False)
    p.set_defaults(func=run)


def quarantine_kind(reason: str) -> str:
    """A reason with quoted values and numbers masked, so like reasons group together
    (``sql/queries/quarantine_kinds.sql`` is the same rule for Spark SQL)."""
    return re.sub(r"[0-9]+", "N", re.sub(r"'[^']*'", "'...'", reason))


def run(args: argparse.Namespace) -> int:
    """Run ``dkm status`` with the parsed ``args``; the exit status."""
    from dkmsks.storage import tables
    from dkmsks.storage.lake import Lake, MissingTable
    from dkmsks.storage.progress import summary

    warehouse = warehouse_of(args)
    lake = Lake.of(warehouse)
    print(f"warehouse {warehouse}")
    try:
        s = summary(lake)
    except MissingTable:
        print("no tables yet: ingest O_init first (dkm run, or the dkmsks_ingest DAG)")
        return 0
    info = s.plan
    if info is None:
        print("no partition plan yet (ingest O_init, then run the partition job)")
    else:
        c = info.config
        print(f"plan {info.plan_version}: method {c.method.value}, m={c.workers}, T0={c.t0}, grid {c.grid}, "
              f"new_cost {c.new_cost.value}")
    pending = s.pending
    print(f"last processed timestamp: {s.last_processed} ({s.processed} processed), "
          f"pending: {len(pending)}" + (f" (t={pending[0]}..{pending[-1]})" if pending else ""))
    if info is not None:
        print(f"live subscriptions: {s.live:,}; result rows: {s.result_rows:,}")
        print("worker loads:")
        for w in range(info.workers):
            print(f"  worker {w:>3}: {s.worker_subscriptions[w]:>9,} subscriptions, C(w) = {s.worker_loads[w]:.6g}")
    reasons = lake.read(tables.QUARANTINE, columns=["target", "reason"])
    kinds = Counter(zip(reasons.column("target").to_pylist(),
                        (quarantine_kind(r) for r in reasons.column("reason").to_pylist()), strict=True))
    print(f"quarantined input rows: {reasons.num_rows:,}" + (f" ({len(kinds)} kinds of reason)" if kinds else ""))
    for (target, kind), n in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {n:>8,}  {target}: {kind}")  # every kind: a user must see each problem
    return 0
