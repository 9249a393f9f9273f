"""``knn_state`` is laid out for point reads by ``sub_id`` (docs/design.md §9): the partition
job's writer sorts each worker's rows by ``sub_id`` into Parquet pages of at most 1000 rows, and
maintenance's OPTIMIZE sorts again what compactions appended unsorted. A query on one
subscription must then read a few pages of each file, not every row; the rows it returns must be
the rows written. Rows read are Spark's own scan metric of the executed query.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from scan_metrics import rows_scanned

pytestmark = pytest.mark.spark

WORKERS = 2
ROWS = 40_000  # 20,000 per worker: 20 pages or more per file


def _state_rows(rng: np.random.Generator, sub_ids: np.ndarray) -> pa.Table:
    """Hand-made ``knn_state`` rows for ``sub_ids`` (in the given order), each with a short result."""
    n = len(sub_ids)
    k = rng.integers(1, 4, n)
    ids = [list(rng.integers(0, 10**6, m)) for m in k]
    return pa.table({
        "plan_version": pa.array(np.zeros(n, dtype=np.int64)),
        "worker": pa.array((sub_ids % WORKERS).astype(np.int32)),
        "sub_id": pa.array(sub_ids.astype(np.int64)),
        "x": pa.array(rng.random(n)), "y": pa.array(rng.random(n)),
        "keywords": pa.array([["a"]] * n, type=pa.list_(pa.string())),
        "k": pa.array(k.astype(np.int32)),
        "registered_t": pa.array(np.zeros(n, dtype=np.int64)),
        "weight": pa.array(np.ones(n, dtype=np.int64)),
        "subset": pa.array(np.zeros(n, dtype=np.int64)),
        "object_ids": pa.array(ids, type=pa.list_(pa.int64())),
        "d2": pa.array([sorted(rng.random(len(r))) for r in ids], type=pa.list_(pa.float64())),
        "updated_t": pa.array(np.zeros(n, dtype=np.int64)),
    })


def _point_read(spark, sub_id: int):
    df = spark.sql("SELECT sub_id, object_ids, d2 FROM knn_state WHERE sub_id = :s", args={"s": sub_id})
    got = [(r.sub_id, list(r.object_ids), list(r.d2)) for r in df.collect()]
    return got, rows_scanned(df)


def test_a_point_query_reads_a_few_pages_of_the_sorted_state(spark, fresh_db, rng):
    from dkmsks.jobs.maintain import run_maintenance
    from dkmsks.spark.initial_state import overwrite_state
    from dkmsks.storage import tables

    sub_ids = rng.permutation(ROWS).astype(np.int64)  # the writer gets them in no order
    written = _state_rows(rng, sub_ids)
    overwrite_state(spark, fresh_db, written, plan_version=0, through_t=0)
    expected = {s: (s, o, d) for s, o, d in zip(written.column("sub_id").to_pylist(),
                                                written.column("object_ids").to_pylist(),
                                                written.column("d2").to_pylist(), strict=True)}
    for sub_id in rng.choice(sub_ids, 3, replace=False).tolist():
        got, scanned = _point_read(spark, sub_id)
        assert got == [expected[sub_id]]
        assert scanned <= ROWS // 4, f"a point query read {scanned} of {ROWS} rows: knn_state is not sorted by sub_id"

    # A compaction's MERGE appends each worker's rows unsorted; maintenance sorts them back in.
    extra_ids = rng.permutation(np.arange(ROWS, 2 * ROWS)).astype(np.int64)
    extra = _state_rows(rng, extra_ids)
    spark.createDataFrame(extra.to_pandas(), schema=spark.table(tables.STATE).schema) \
        .repartition(WORKERS, "worker").write.format("delta").mode("append").saveAsTable(tables.STATE)
    for s, o, d in zip(extra.column("sub_id").to_pylist(), extra.column("object_ids").to_pylist(),
                       extra.column("d2").to_pylist(), strict=True):
        expected[s] = (s, o, d)
    probe = int(rng.choice(extra_ids))
    got, unsorted_scan = _point_read(spark, probe)
    assert got == [expected[probe]]
    run_maintenance(spark, fresh_db, run_id="layout-test")
    assert spark.sql("SELECT count(*) AS n FROM knn_state").collect()[0].n == 2 * ROWS
    for sub_id in [probe, *rng.choice(sub_ids, 2, replace=False).tolist()]:
        got, scanned = _point_read(spark, sub_id)
        assert got == [expected[sub_id]]
        assert scanned <= 2 * ROWS // 4, f"after maintenance a point query read {scanned} of {2 * ROWS} rows"
    assert scanned < unsorted_scan
