"""Results at any processed timestamp, from Delta time travel plus the journal's changes.

Every ``knn_state`` commit (partition, repartition, compaction) records in its user metadata
the timestamp it is exact at (``through_t``). The results at a processed ``T`` are those of
the newest such version with ``through_t <= T`` with the journal's result changes in
``(through_t, T]`` applied in order (DESIGN §1: deletions, insertions, updates).
"""

from __future__ import annotations

import json

import numpy as np
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from dkmsks.core.model import KnnResult, Results
from dkmsks.spark import tables

#: Order of changes of one subscription within one timestamp (DESIGN §1).
_CHANGE_ORDER = {"delete": 0, "insert": 1, "update": 2}


def processed_timestamps(spark: SparkSession) -> list[int]:
    return sorted(int(r.t) for r in spark.table(tables.LEDGER).select("t").collect())


def state_checkpoints(spark: SparkSession) -> list[tuple[int, int]]:
    """``(through_t, version)`` of every ``knn_state`` commit that names the time it is exact at."""
    from delta.tables import DeltaTable

    found = []
    for row in DeltaTable.forName(spark, tables.STATE).history().select("version", "userMetadata").collect():
        meta = json.loads(row.userMetadata) if row.userMetadata else {}
        if "through_t" in meta:
            found.append((int(meta["through_t"]), int(row.version)))
    return sorted(found)


def results_as_of(spark: SparkSession, as_of: int | None = None) -> tuple[int, Results]:
    """``(T, results)`` of every live subscription at processed timestamp ``T`` (default: last)."""
    done = processed_timestamps(spark)
    if not done:
        raise ValueError("nothing processed yet: the ledger is empty (run the partition job first)")
    t = done[-1] if as_of is None else int(as_of)
    if t not in set(done):
        raise ValueError(
            f"timestamp {t} has not been processed; processed timestamps run from {done[0]} to {done[-1]}"
            + (f" ({len(done)} in all)" if len(done) > 2 else "")
        )
    base = [(through, version) for through, version in state_checkpoints(spark) if through <= t]
    if not base:
        raise ValueError(f"no knn_state version is exact at or before t={t}")
    through, version = max(base)
    results = _state_results(spark, version)
    changes = (
        spark.table(tables.CHANGES)
        .where((F.col("t") > through) & (F.col("t") <= t))
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
    table = (spark.read.option("versionAsOf", int(version)).table(tables.STATE)
             .select("sub_id", "object_ids", "d2").toArrow())
    sub_ids = table.column("sub_id").to_pylist()
    oids = table.column("object_ids").to_pylist()
    d2 = table.column("d2").to_pylist()
    return {
        int(s): KnnResult(np.asarray(o, dtype=np.int64), np.asarray(d, dtype=np.float64))
        for s, o, d in zip(sub_ids, oids, d2, strict=True)
    }
