"""Results at any processed timestamp, from Delta time travel plus the change log.

A run commits ``knn_state`` once for its timestamps ``(from_t, to_t]``. The state at ``to_t``
is that commit (``VERSION AS OF``); the state at an earlier ``T`` of the same run is the
state at ``from_t`` (an older version) with the run's ``result_changes`` up to ``T`` applied.
"""

from __future__ import annotations

import numpy as np
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from dkmsks.core.model import KnnResult, Results
from dkmsks.spark import tables
from dkmsks.spark.driver_data import state_frame

#: Order of changes of one subscription within one timestamp (DESIGN §1).
_CHANGE_ORDER = {"delete": 0, "insert": 1, "update": 2}


def processed_timestamps(spark: SparkSession) -> list[int]:
    return sorted(int(r.t) for r in spark.table(tables.LEDGER).select("t").collect())


def results_as_of(spark: SparkSession, as_of: int | None = None) -> tuple[int, Results]:
    """``(T, results)`` of every live subscription at processed timestamp ``T`` (default: last)."""
    ledger = {int(r.t): r for r in spark.table(tables.LEDGER).collect()}
    if not ledger:
        raise ValueError("nothing processed yet: the ledger is empty (run the partition job first)")
    t = max(ledger) if as_of is None else int(as_of)
    if t not in ledger:
        done = sorted(ledger)
        raise ValueError(
            f"timestamp {t} has not been processed; processed timestamps run from {done[0]} to {done[-1]}"
            + (f" ({len(done)} in all)" if len(done) > 2 else "")
        )
    row = ledger[t]
    same_commit_later = any(r.state_version == row.state_version and tt > t for tt, r in ledger.items())
    if not same_commit_later:
        return t, _state_results(spark, int(row.state_version))
    base_row = ledger[int(row.run_from_t)]
    results = _state_results(spark, int(base_row.state_version))
    changes = (
        spark.table(tables.CHANGES)
        .where((F.col("t") > int(row.run_from_t)) & (F.col("t") <= t))
        .select("t", "sub_id", "change", "object_ids", "d2")
        .collect()
    )
    changes.sort(key=lambda c: (c.t, _CHANGE_ORDER[c.change]))
    for c in changes:
        if c.change == "delete":
            results.pop(int(c.sub_id), None)
        else:
            results[int(c.sub_id)] = KnnResult(np.asarray(c.object_ids, dtype=np.int64),
                                               np.asarray(c.d2, dtype=np.float64))
    return t, results


def _state_results(spark: SparkSession, version: int) -> Results:
    table = state_frame(spark, version).select("sub_id", "object_ids", "d2").toArrow()
    sub_ids = table.column("sub_id").to_pylist()
    oids = table.column("object_ids").to_pylist()
    d2 = table.column("d2").to_pylist()
    return {
        int(s): KnnResult(np.asarray(o, dtype=np.int64), np.asarray(d, dtype=np.float64))
        for s, o, d in zip(sub_ids, oids, d2, strict=True)
    }
