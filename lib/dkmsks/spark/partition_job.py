"""Partitioning job: O_init statistics, initial kNN with Spark, a plan, the initial state.

``partition`` runs once O_init is in (paper §3, DESIGN §1): the initial subscriptions get
their exact kNN within O_init (computed by Spark tasks, each holding a per-keyword KD-tree
index over a broadcast O_init), the chosen partitioner makes a plan on the driver, and the
plan and the per-worker state are written to Delta, and the ledger's first record (``T0``)
goes to the journal last: a run that died before it is completed by running it again
(every earlier write is idempotent). ``repartition`` makes a new plan from the current
subscriptions and their *current* balls and rewrites the state in one commit, so the switch
is atomic and results are unchanged. Both hold the writer lock.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
from pyspark.sql import SparkSession

from dkmsks.core.knn_state import StateArrays
from dkmsks.core.model import Objects, Subscriptions, Vocabulary, data_space
from dkmsks.core.oracle import live_subscriptions
from dkmsks.core.partition import PartitionPlan, partition
from dkmsks.spark import tables
from dkmsks.spark.delta_io import insert, latest_version
from dkmsks.spark.driver_data import keyword_list_column, list_column, read_events_between
from dkmsks.spark.microbatch_job import (
    JOURNAL_APP,
    current_plan,
    last_processed,
    open_lake,
    record_run_metrics,
)
from dkmsks.spark.plan_cache import cache_dir, oinit_statistics
from dkmsks.spark.sql_files import run_sql
from dkmsks.spark.state_io import StateView, state_arrays
from dkmsks.spark.writer_lock import writer_lock


@dataclass(frozen=True, kw_only=True)
class PartitionParams:
    method: str = "dkm"
    workers: int = 20
    theta: int = 20
    gamma1: int = 100_000
    gamma2: int = 20
    grid: int = 16384
    t0: int = 0
    knn_partitions: int = 4
    #: Cost of a new subscription: "live" (over its actual ball, re-estimated as it shrinks;
    #: see dkmsks.core.partition.server) or "paper" (Eq. 7 over its O_init ball).
    new_cost: str = "live"

    def as_json(self) -> str:
        return json.dumps({"theta": self.theta, "gamma1": self.gamma1, "gamma2": self.gamma2,
                           "grid": self.grid, "t0": self.t0, "new_cost": self.new_cost}, sort_keys=True)


@dataclass
class PartitionReport:
    plan_version: int
    method: str
    workers: int
    subscriptions: int
    subsets: int
    loads: list[float]
    phases_ms: dict[str, float] = field(default_factory=dict)


#: The O_init index of the current broadcast, kept by each (reused) Python worker process so
#: that its tasks build it once, not once per slice.
_INDEX_CACHE: dict[int, object] = {}


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
    """kNN matrices of ``subs`` within ``objects``, computed by Spark tasks over slices.

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


def _write_plan(spark: SparkSession, plan: PartitionPlan, version: int, params: PartitionParams,
                effective_t: int) -> None:
    meta, _, subsets = plan.to_tables()
    row = {
        "plan_version": version, "method": plan.method.value, "workers": plan.m,
        "params": params.as_json(), "subsets": int(len(plan.subsets)), "subscriptions": int(len(plan)),
        "o_init": int(plan.n_objects), "effective_t": int(effective_t), "meta_json": json.dumps(meta),
    }
    insert(spark, spark.createDataFrame([row], schema=spark.table(tables.PLANS).schema), tables.PLANS,
           app_id="dkmsks-plans", version=version)
    cols = {k: np.asarray(v) for k, v in subsets.items()}
    n = cols["subset"].shape[0]
    target = spark.table(tables.SUBSETS).schema
    arrow = pa.table({
        "plan_version": pa.array(np.full(n, version, dtype=np.int64)),
        **{name: pa.array(cols[name].astype(np.int64 if target[name].dataType.typeName() == "long" else
                                            np.int32 if target[name].dataType.typeName() == "integer" else np.float64))
           for name in ("subset", "xmin", "ymin", "xmax", "ymax", "rxmin", "rymin", "rxmax", "rymax",
                        "weight", "size", "worker", "kind", "depth")},
    })
    insert(spark, spark.createDataFrame(arrow.to_pandas(), schema=target), tables.SUBSETS,
           app_id="dkmsks-subsets", version=version)


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


def _overwrite_state(spark: SparkSession, table: pa.Table, *, plan_version: int, through_t: int) -> int:
    """Replace ``knn_state`` in one commit; returns the new Delta version.

    The rows are staged as Parquet next to the warehouse and read back by Spark, so a state of
    10M subscriptions streams through the JVM instead of being held there as one local relation.
    """
    import shutil
    import uuid

    import pyarrow.parquet as pq

    from dkmsks.spark.writer_lock import lock_path

    staging = lock_path(spark).parent.parent / "_staging" / f"state-{uuid.uuid4().hex[:12]}"
    staging.mkdir(parents=True)
    try:
        pq.write_table(table, staging / "state.parquet", row_group_size=200_000)
        df = spark.read.schema(spark.table(tables.STATE).schema).parquet(str(staging))
        insert(spark, df.repartition("worker"), tables.STATE, overwrite=True, app_id="dkmsks-state-plan",
               version=plan_version, metadata={"job": "partition", "plan_version": plan_version, "through_t": through_t})
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return latest_version(spark, tables.STATE)


def partition_done(spark: SparkSession) -> bool:
    """Whether the initial partitioning completed (its ledger record is in the journal)."""
    tables.ensure_tables(spark)
    return last_processed(open_lake(spark)) is not None


def run_partition(spark: SparkSession, params: PartitionParams, *, run_id: str) -> PartitionReport:
    """Initial partitioning (paper §3–§4) after O_init; refuses once a first run completed."""
    tables.ensure_tables(spark)
    lake = open_lake(spark)
    with writer_lock(spark, f"partition {run_id}"):
        if last_processed(lake) is not None:
            raise ValueError("a partition plan already exists; use the repartition job to make a new one")
        phases: dict[str, float] = {}
        started = time.perf_counter()
        vocab = Vocabulary()
        stats, objects = oinit_statistics(lake, params.t0, vocab, cache_dir(spark), need_objects=True)
        assert objects is not None
        events = read_events_between(lake, vocab, after=None, upto=params.t0)
        subs = live_subscriptions(events, params.t0, t0=params.t0)
        subs = Subscriptions(subs.ids, subs.x, subs.y, subs.keywords, subs.k,
                             np.full(len(subs), params.t0, dtype=np.int64))
        phases["read_oinit"] = (time.perf_counter() - started) * 1e3

        # An interrupted first run left a plan without its ledger record: redo it under the
        # same version (deterministic; Delta skips the writes it already committed).
        existing = current_plan(lake)
        version = existing.plan_version if existing is not None else 0
        started = time.perf_counter()
        run_sql(spark, "dml/insert_keyword_stats.sql", table=tables.KEYWORD_STATS, objects=tables.OBJECTS,
                plan_version=version, t0=params.t0)
        ids, d2 = spark_initial_knn(spark, objects, len(vocab), subs, partitions=params.knn_partitions)
        phases["initial_knn"] = (time.perf_counter() - started) * 1e3

        started = time.perf_counter()
        space = data_space(objects, subs)
        plan = partition(params.method, stats, (ids, d2), subs, space, m=params.workers, theta=params.theta,
                         gamma1=params.gamma1, gamma2=params.gamma2)
        phases["partition"] = (time.perf_counter() - started) * 1e3

        started = time.perf_counter()
        _write_plan(spark, plan, version, params, params.t0)
        arrays = StateArrays(subs.ids, subs.x, subs.y, subs.keywords, subs.k, subs.t, ids, d2)
        _overwrite_state(spark, state_table(plan, version, arrays, vocab, np.full(len(subs), params.t0)),
                         plan_version=version, through_t=params.t0)
        lake.append(tables.JOURNAL, pa.table({
            "record": ["ledger"], "t": [params.t0], "plan_version": [version], "run_id": [run_id],
            "run_from_t": [params.t0], "run_through_t": [params.t0], "objects": [len(objects)],
            "insertions": [len(subs)], "deletions": [0],
        }), app_id=JOURNAL_APP, version=params.t0)
        phases["write"] = (time.perf_counter() - started) * 1e3
        record_run_metrics(lake, run_id, "partition", params.t0, params.t0, phases)
    return PartitionReport(version, plan.method.value, plan.m, len(plan), len(plan.subsets),
                           plan.loads.tolist(), phases)


def run_repartition(spark: SparkSession, params: PartitionParams, *, run_id: str) -> PartitionReport:
    """A new plan from the current subscriptions and their current balls, switched atomically.

    Results are carried over unchanged; only assignments, costs and the plan change. The
    data space and O_init statistics stay those of the first plan (DESIGN §1).
    """
    tables.ensure_tables(spark)
    lake = open_lake(spark)
    with writer_lock(spark, f"repartition {run_id}"):
        phases: dict[str, float] = {}
        started = time.perf_counter()
        info = current_plan(lake)
        if info is None:
            raise ValueError("no partition plan yet: run the partition job first")
        t_last = last_processed(lake)
        vocab = Vocabulary()
        stats, _ = oinit_statistics(lake, info.t0, vocab, cache_dir(spark))
        current = StateView.open(lake, fallback_plan=info.plan_version).read().sort_by("sub_id")
        arrays = state_arrays(current, vocab)
        phases["read"] = (time.perf_counter() - started) * 1e3

        started = time.perf_counter()
        subs = arrays.subscriptions()
        plan = partition(params.method, stats, (arrays.ids, arrays.d2), subs, info.space, m=params.workers,
                         theta=params.theta, gamma1=params.gamma1, gamma2=params.gamma2)
        phases["partition"] = (time.perf_counter() - started) * 1e3

        started = time.perf_counter()
        version = info.plan_version + 1
        _write_plan(spark, plan, version, PartitionParams(**{**params.__dict__, "t0": info.t0}), t_last)
        # One overwrite commit switches plan and state; the journal's records of the old
        # plan stay (the history), and the overlay ignores them from now on.
        _overwrite_state(
            spark, state_table(plan, version, arrays, vocab, np.asarray(current.column("updated_t").to_numpy())),
            plan_version=version, through_t=t_last,
        )
        phases["write"] = (time.perf_counter() - started) * 1e3
        record_run_metrics(lake, run_id, "repartition", t_last, t_last, phases)
    return PartitionReport(version, plan.method.value, plan.m, len(plan), len(plan.subsets),
                           plan.loads.tolist(), phases)


__all__ = ["PartitionParams", "PartitionReport", "partition_done", "run_partition", "run_repartition",
           "spark_initial_knn", "state_table"]
