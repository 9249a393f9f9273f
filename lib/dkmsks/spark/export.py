"""Results at any processed timestamp, read from the Delta logs without Spark (delta-rs).

Every ``knn_state`` commit (partition, repartition, compaction) records in its commit
metadata the timestamp it is exact at (``through_t``). The results at a processed ``T`` are
those of the newest such version with ``through_t <= T`` with the journal's result changes in
``(through_t, T]`` applied in order (docs/design.md §1: deletions, insertions, updates). Readers never
take a lock: each reads committed table versions, so a run committing meanwhile is either
wholly visible or not at all.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dkmsks.core.model import KnnResult, Results
from dkmsks.spark import tables
from dkmsks.spark.lake import Lake, where

#: Order of changes of one subscription within one timestamp (docs/design.md §1).
_CHANGE_ORDER = {"delete": 0, "insert": 1, "update": 2}


def processed_timestamps(lake: Lake) -> list[int]:
    t = lake.read(tables.JOURNAL, columns=["t"], predicate=where(record__eq="ledger")).column("t")
    return sorted(int(v) for v in pc.unique(t).to_pylist())


def state_checkpoints(lake: Lake) -> list[tuple[int, int]]:
    """``(through_t, version)`` of every ``knn_state`` commit that names the time it is exact at."""
    found = []
    for commit in lake.table(tables.STATE).history():
        meta = commit.get("userMetadata")
        meta = json.loads(meta) if isinstance(meta, str) and meta else {}
        if "through_t" in meta and "version" in commit:
            found.append((int(meta["through_t"]), int(commit["version"])))
    return sorted(found)


def resolve_as_of(lake: Lake, as_of: int | None) -> int:
    """``as_of`` checked against the ledger (default: the last processed timestamp)."""
    done = processed_timestamps(lake)
    if not done:
        raise ValueError("nothing processed yet: the ledger is empty (run the partition job first)")
    t = done[-1] if as_of is None else int(as_of)
    if t not in set(done):
        raise ValueError(
            f"timestamp {t} has not been processed; processed timestamps run from {done[0]} to {done[-1]}"
            + (f" ({len(done)} in all)" if len(done) > 2 else "")
        )
    return t


def results_as_of(lake: Lake, as_of: int | None = None, sub_ids: list[int] | None = None) -> tuple[int, Results]:
    """``(T, results)`` of every live subscription (or of ``sub_ids``) at processed timestamp
    ``T`` (default: the last)."""
    t = resolve_as_of(lake, as_of)
    base = [(through, version) for through, version in state_checkpoints(lake) if through <= t]
    if not base:
        raise ValueError(f"no knn_state version is exact at or before t={t}")
    through, version = max(base)
    state = lake.read(tables.STATE, columns=["sub_id", "object_ids", "d2"], version=version)
    changes = lake.read(tables.JOURNAL, columns=["t", "sub_id", "change", "object_ids", "d2"],
                        predicate=where(record__eq="change", t__gt=through, t__le=t))
    if sub_ids is not None:
        wanted = pa.array(sorted(set(int(s) for s in sub_ids)), type=pa.int64())
        state = state.filter(pc.is_in(state.column("sub_id"), value_set=wanted))
        changes = changes.filter(pc.is_in(changes.column("sub_id"), value_set=wanted))
    results = _results(state)
    order = sorted(range(changes.num_rows), key=lambda i: (changes.column("t")[i].as_py(),
                                                           _CHANGE_ORDER[changes.column("change")[i].as_py()]))
    rows = changes.take(pa.array(order, type=pa.int64())).to_pylist() if order else []
    for c in rows:
        if c["change"] == "delete":
            results.pop(int(c["sub_id"]), None)
        else:
            results[int(c["sub_id"])] = KnnResult(np.asarray(c["object_ids"], dtype=np.int64),
                                                   np.asarray(c["d2"], dtype=np.float64))
    return t, results


def _results(table: pa.Table) -> Results:
    sub_ids = table.column("sub_id").to_pylist()
    oids = table.column("object_ids").to_pylist()
    d2 = table.column("d2").to_pylist()
    return {
        int(s): KnnResult(np.asarray(o, dtype=np.int64), np.asarray(d, dtype=np.float64))
        for s, o, d in zip(sub_ids, oids, d2, strict=True)
    }
