"""The initial state of a plan, built with Spark: the kNN of the initial subscriptions within
``O_init`` (Spark tasks, each with a per-keyword KD-tree index over a broadcast ``O_init``,
docs/design.md §3 fact 5) and the ``knn_state`` rows of a plan, written in one overwrite commit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
from pyspark.sql import SparkSession

from dkmsks.core.knn_state import StateArrays
from dkmsks.core.model import Objects, Subscriptions, Vocabulary
from dkmsks.core.partition import PartitionPlan
from dkmsks.spark.delta_io import insert, latest_version
from dkmsks.storage import tables
from dkmsks.storage.driver_data import keyword_list_column, list_column
from dkmsks.storage.writer_lock import check_writer
from dkmsks.warehouse import Warehouse

if TYPE_CHECKING:
    from dkmsks.core.knn_init import StaticKnnIndex

#: The O_init index of the current broadcast, kept by each (reused) Python worker process so
#: that its tasks build it once, not once per slice.
_INDEX_CACHE: dict[int, StaticKnnIndex] = {}


def _knn_slice(index: int, bounds: list[int], objects_bc, key: int, subs_bc, width: int):  # executed in Spark tasks
    """Exact kNN within O_init of the subscriptions ``bounds[index]:bounds[index + 1]``."""
    from dkmsks.core.knn_init import StaticKnnIndex

    lo, hi = bounds[index], bounds[index + 1]
    if hi <= lo:
        return
    if key not in _INDEX_CACHE:
        _INDEX_CACHE.clear()
        objects, n_keywords = objects_bc.value
        _INDEX_CACHE[key] = StaticKnnIndex.build(objects, n_keywords, workers=1)
    subs = subs_bc.value.take(np.arange(lo, hi))
    ids, d2 = _INDEX_CACHE[key].query(subs, width=width)
    yield lo, ids, d2


def spark_initial_knn(
    spark: SparkSession, objects: Objects, n_keywords: int, subs: Subscriptions, *, partitions: int
) -> tuple[np.ndarray, np.ndarray]:
    """The kNN matrices of ``subs`` within ``objects``, computed by Spark tasks over slices.

    O_init and the subscriptions travel as broadcast numpy columns and the matrices come back
    one slice at a time (``toLocalIterator``), so |S| = 10M needs no Python object per row
    and no result larger than a slice on the driver.
    """
    width = max(int(subs.k.max()) if len(subs) else 1, 1)
    n = len(subs)
    ids = np.full((n, width), -1, dtype=np.int64)
    d2 = np.full((n, width), np.inf)
    if n == 0:
        return ids, d2
    slices = max(1, partitions, -(-n // 250_000))  # slices of at most 250k subscriptions
    bounds = np.linspace(0, n, slices + 1).astype(np.int64).tolist()
    objects_bc = spark.sparkContext.broadcast((objects, n_keywords))
    subs_bc = spark.sparkContext.broadcast(subs)
    key = int(objects_bc._jbroadcast.id())  # the broadcast's id, the same in every task
    try:
        rdd = spark.sparkContext.parallelize(range(slices), slices).mapPartitionsWithIndex(
            lambda i, _: _knn_slice(i, bounds, objects_bc, key, subs_bc, width))
        for lo, part_ids, part_d2 in rdd.toLocalIterator():
            ids[lo:lo + part_ids.shape[0]] = part_ids
            d2[lo:lo + part_d2.shape[0]] = part_d2
    finally:
        objects_bc.destroy()
        subs_bc.destroy()
    return ids, d2


def state_table(
    plan: PartitionPlan, version: int, arrays: StateArrays, vocab: Vocabulary, updated_t: np.ndarray
) -> pa.Table:
    """The ``knn_state`` rows of a plan: one per subscription, in the plan's order."""
    if not np.array_equal(plan.sub_ids, arrays.sub_ids):
        raise ValueError("plan and state list different subscriptions")
    lengths = np.minimum(np.count_nonzero(arrays.ids >= 0, axis=1), arrays.k).astype(np.int64)
    n = len(arrays)
    return pa.table({
        "plan_version": pa.array(np.full(n, version, dtype=np.int64)),
        "worker": pa.array(plan.worker.astype(np.int32)),
        "sub_id": pa.array(arrays.sub_ids),
        "x": pa.array(arrays.x), "y": pa.array(arrays.y),
        "keywords": keyword_list_column(arrays.keywords, vocab),
        "k": pa.array(arrays.k.astype(np.int32)),
        "registered_t": pa.array(arrays.t),
        "weight": pa.array(plan.weight.astype(np.int64)),
        "subset": pa.array(plan.subset.astype(np.int64)),
        "object_ids": list_column(arrays.ids, lengths, pa.int64()),
        "d2": list_column(arrays.d2, lengths, pa.float64()),
        "updated_t": pa.array(updated_t.astype(np.int64)),
    })


def overwrite_state(spark: SparkSession, warehouse: Warehouse, table: pa.Table, *, plan_version: int,
                    through_t: int) -> int:
    """Replace ``knn_state`` in one commit; returns the new Delta version.

    The rows are staged as Parquet next to the warehouse and read back by Spark, so a state of
    10M subscriptions streams through the JVM instead of being held there as one local relation.
    Each worker's rows are written sorted by ``sub_id``: with the table's small Parquet pages
    (``sql/ddl/knn_state.sql``) a point query on a few subscriptions skips all but a few pages
    of each file (docs/design.md §9).
    """
    import shutil
    import uuid

    import pyarrow.parquet as pq

    name = f"state-{uuid.uuid4().hex[:12]}"
    if warehouse.location is None:
        staging = warehouse.staging_dir / name
        staging.mkdir(parents=True)
        pq.write_table(table, staging / "state.parquet", row_group_size=200_000)
        read_from, remove = str(staging), lambda: shutil.rmtree(staging, ignore_errors=True)
    else:
        # On object storage the executors may be on other hosts: the staged rows go there too.
        from dkmsks.storage.objectstore import arrow_filesystem

        filesystem, key = arrow_filesystem(), warehouse.location.key("_staging", name)
        pq.write_table(table, f"{warehouse.location.bucket}/{key}/state.parquet", row_group_size=200_000,
                       filesystem=filesystem)
        read_from = warehouse.location.uri("_staging", name, scheme="s3a")

        def remove() -> None:
            filesystem.delete_dir(f"{warehouse.location.bucket}/{key}")  # type: ignore[union-attr]
    try:
        check_writer(warehouse)  # on object storage: still the writer (dkmsks.storage.leases)
        df = spark.read.schema(spark.table(tables.STATE).schema).parquet(read_from)
        # Sorted by (worker, sub_id): the partitioned write needs the worker order, and a sort by
        # sub_id alone would be re-sorted by worker before the write.
        rows = df.repartition("worker").sortWithinPartitions("worker", "sub_id")
        insert(spark, rows, tables.STATE, overwrite=True, app_id="dkmsks-state-plan", version=plan_version,
               metadata={"job": "partition", "plan_version": plan_version, "through_t": through_t})
    finally:
        remove()
    return latest_version(spark, tables.STATE)
