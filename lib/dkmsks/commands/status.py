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
    import numpy as np
    import pyarrow.compute as pc

    from dkmsks.storage import tables
    from dkmsks.storage.journal import last_processed, pending_timestamps
    from dkmsks.storage.lake import Lake, MissingTable, where
    from dkmsks.storage.plans import current_plan
    from dkmsks.storage.state_io import StateView

    warehouse = warehouse_of(args)
    lake = Lake.of(warehouse)
    print(f"warehouse {warehouse}")
    try:
        info = current_plan(lake)
    except MissingTable:
        print("no tables yet: ingest O_init first (dkm run, or the dkmsks_ingest DAG)")
        return 0
    if info is None:
        print("no partition plan yet (ingest O_init, then run the partition job)")
    else:
        c = info.config
        print(f"plan {info.plan_version}: method {c.method.value}, m={c.workers}, T0={c.t0}, grid {c.grid}, "
              f"new_cost {c.new_cost.value}")
    last = last_processed(lake)
    ledger = lake.read(tables.JOURNAL, columns=["t"], predicate=where(record__eq="ledger"))
    pending = pending_timestamps(lake, last) if last is not None else []
    print(f"last processed timestamp: {last} ({len(pc.unique(ledger.column('t')))} processed), "
          f"pending: {len(pending)}" + (f" (t={pending[0]}..{pending[-1]})" if pending else ""))
    if info is not None:
        state = StateView.open(lake, fallback_plan=info.plan_version).read(
            columns=["sub_id", "worker", "weight", "object_ids"])
        rows = int(pc.sum(pc.list_value_length(state.column("object_ids"))).as_py() or 0)
        print(f"live subscriptions: {state.num_rows:,}; result rows: {rows:,}")
        worker = np.asarray(state.column("worker").to_numpy(), dtype=np.int64)
        weight = np.asarray(state.column("weight").to_numpy(), dtype=np.float64)
        count = np.bincount(worker, minlength=info.workers)
        load = np.bincount(worker, weights=weight, minlength=info.workers) / max(int(info.meta.get("n_objects", 1)), 1)
        print("worker loads:")
        for w in range(info.workers):
            print(f"  worker {w:>3}: {count[w]:>9,} subscriptions, C(w) = {load[w]:.6g}")
    reasons = lake.read(tables.QUARANTINE, columns=["target", "reason"])
    kinds = Counter(zip(reasons.column("target").to_pylist(),
                        (quarantine_kind(r) for r in reasons.column("reason").to_pylist()), strict=True))
    print(f"quarantined input rows: {reasons.num_rows:,}" + (f" ({len(kinds)} kinds of reason)" if kinds else ""))
    for (target, kind), n in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {n:>8,}  {target}: {kind}")  # every kind: a user must see each problem
    return 0
