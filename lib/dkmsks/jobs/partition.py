"""Partitioning job: O_init statistics, initial kNN with Spark, a plan, the initial state.

``run_partition`` runs once O_init is in (paper §3, docs/design.md §1): the initial subscriptions get
their exact kNN within O_init (Spark tasks, :mod:`dkmsks.spark.initial_state`), the chosen
partitioner makes a plan on the driver, the plan and the per-worker state are written to
Delta, and the ledger's first record (``T0``) goes to the journal last: a run that died before
it is completed by running it again (every earlier write is idempotent). ``run_repartition``
makes a new plan from the current subscriptions and their *current* balls and rewrites the
state in one commit, so the switch is atomic and results are unchanged. Both hold the writer
lock.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from dkmsks.core.config import Method, PartitionConfig
from dkmsks.core.knn_state import StateArrays
from dkmsks.core.model import Subscriptions, Vocabulary, data_space
from dkmsks.core.oracle import live_subscriptions
from dkmsks.core.partition import PartitionPlan, partition
from dkmsks.spark.initial_state import overwrite_state, spark_initial_knn, state_table
from dkmsks.spark.sql_files import run_sql
from dkmsks.storage import tables
from dkmsks.storage.driver_data import read_events_between
from dkmsks.storage.journal import commit_first_ledger, last_processed, record_run_metrics
from dkmsks.storage.lake import Lake
from dkmsks.storage.plan_cache import oinit_statistics
from dkmsks.storage.plans import current_plan
from dkmsks.storage.state_io import StateView, state_arrays
from dkmsks.storage.writer_lock import writer_lock
from dkmsks.warehouse import Warehouse

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass
class PartitionReport:
    """What a partition job did: the plan it wrote, its size and phase times."""

    plan_version: int
    method: str
    workers: int
    subscriptions: int
    subsets: int
    loads: list[float]
    phases_ms: dict[str, float] = field(default_factory=dict)


def run_partition(spark: SparkSession, warehouse: Warehouse, config: PartitionConfig, *, run_id: str,
                  knn_partitions: int = 4) -> PartitionReport:
    """Initial partitioning (paper §3–§4) after O_init; refuses once a first run completed."""
    lake = Lake.of(warehouse)
    with writer_lock(warehouse, f"partition {run_id}"):
        if last_processed(lake) is not None:
            raise ValueError("a partition plan already exists; use the repartition job to make a new one")
        phases: dict[str, float] = {}
        started = time.perf_counter()
        vocab = Vocabulary()
        t0 = config.t0
        stats, objects = oinit_statistics(lake, t0, vocab, warehouse.cache_dir, need_objects=True)
        assert objects is not None
        events = read_events_between(lake, vocab, after=None, upto=t0)
        subs = live_subscriptions(events, t0, t0=t0)
        subs = Subscriptions(subs.ids, subs.x, subs.y, subs.keywords, subs.k, np.full(len(subs), t0, dtype=np.int64))
        phases["read_oinit"] = (time.perf_counter() - started) * 1e3

        # An interrupted first run left a plan without its ledger record: redo it under the
        # same version (deterministic; Delta skips the writes it already committed).
        existing = current_plan(lake)
        version = existing.plan_version if existing is not None else 0
        started = time.perf_counter()
        run_sql(spark, "dml/insert_keyword_stats.sql", table=tables.KEYWORD_STATS, objects=tables.OBJECTS,
                plan_version=version, t0=t0)
        ids, d2 = spark_initial_knn(spark, objects, len(vocab), subs, partitions=knn_partitions)
        phases["initial_knn"] = (time.perf_counter() - started) * 1e3

        started = time.perf_counter()
        space = data_space(objects, subs)
        plan = partition(config.method, stats, (ids, d2), subs, space, objects=objects, **config.partition_kwargs())
        phases["partition"] = (time.perf_counter() - started) * 1e3

        started = time.perf_counter()
        write_plan(spark, plan, version, config, t0, vocab)
        arrays = StateArrays(subs.ids, subs.x, subs.y, subs.keywords, subs.k, subs.t, ids, d2)
        overwrite_state(spark, warehouse, state_table(plan, version, arrays, vocab, np.full(len(subs), t0)),
                        plan_version=version, through_t=t0)
        commit_first_ledger(lake, t0=t0, plan_version=version, run_id=run_id, objects=len(objects),
                            insertions=len(subs))
        phases["write"] = (time.perf_counter() - started) * 1e3
        record_run_metrics(lake, run_id, "partition", t0, t0, phases)
    return PartitionReport(version, plan.method.value, plan.m, len(plan), len(plan.subsets),
                           plan.loads.tolist(), phases)


def run_repartition(spark: SparkSession, warehouse: Warehouse, config: PartitionConfig, *,
                    run_id: str) -> PartitionReport:
    """A new plan from the current subscriptions and their current balls, switched atomically.

    Results are carried over unchanged; only assignments, costs and the plan change. The
    data space, ``T0`` and the O_init statistics stay those of the first plan (docs/design.md §1).
    """
    lake = Lake.of(warehouse)
    with writer_lock(warehouse, f"repartition {run_id}"):
        phases: dict[str, float] = {}
        started = time.perf_counter()
        info = current_plan(lake)
        t_last = last_processed(lake)
        if info is None or t_last is None:  # no plan, or a first run that did not finish
            raise ValueError("no partition plan yet: run the partition job first")
        config = config.replace(t0=info.config.t0)
        vocab = Vocabulary()
        # ps2 counts O_init's objects per part itself; the others need only the statistics.
        stats, objects = oinit_statistics(lake, config.t0, vocab, warehouse.cache_dir,
                                          need_objects=config.method is Method.PS2)
        current = StateView.open(lake, fallback_plan=info.plan_version).read().sort_by("sub_id")
        arrays = state_arrays(current, vocab)
        phases["read"] = (time.perf_counter() - started) * 1e3

        started = time.perf_counter()
        subs = arrays.subscriptions()
        plan = partition(config.method, stats, (arrays.ids, arrays.d2), subs, info.space, objects=objects,
                         **config.partition_kwargs())
        phases["partition"] = (time.perf_counter() - started) * 1e3

        started = time.perf_counter()
        version = info.plan_version + 1
        write_plan(spark, plan, version, config, t_last, vocab)
        # One overwrite commit switches plan and state; the journal's records of the old
        # plan stay (the history), and the overlay ignores them from now on.
        overwrite_state(
            spark, warehouse,
            state_table(plan, version, arrays, vocab, np.asarray(current.column("updated_t").to_numpy())),
            plan_version=version, through_t=t_last,
        )
        phases["write"] = (time.perf_counter() - started) * 1e3
        record_run_metrics(lake, run_id, "repartition", t_last, t_last, phases)
    return PartitionReport(version, plan.method.value, plan.m, len(plan), len(plan.subsets),
                           plan.loads.tolist(), phases)


def write_plan(spark: SparkSession, plan: PartitionPlan, version: int, config: PartitionConfig,
               effective_t: int, vocab: Vocabulary) -> None:
    """Both plan tables for ``version`` (each write skipped when already committed). ``ps2``
    term sets are stored as words (``vocab`` numbers them in this job only)."""
    from dkmsks.spark.delta_io import insert

    meta, _, subsets = plan.to_tables()
    row = {
        "plan_version": version, "method": plan.method.value, "workers": plan.m,
        "params": config.to_json(), "subsets": int(len(plan.subsets)), "subscriptions": int(len(plan)),
        "o_init": int(plan.n_objects), "effective_t": int(effective_t), "meta_json": json.dumps(meta),
    }
    insert(spark, spark.createDataFrame([row], schema=spark.table(tables.PLANS).schema), tables.PLANS,
           app_id="dkmsks-plans", version=version)
    cols = {k: np.asarray(v) for k, v in subsets.items()}
    n = cols["subset"].shape[0]
    target = spark.table(tables.SUBSETS).schema
    numpy_type = {"long": np.int64, "integer": np.int32, "double": np.float64}
    arrow = pa.table({
        "plan_version": pa.array(np.full(n, version, dtype=np.int64)),
        **{name: pa.array(cols[name].astype(numpy_type[target[name].dataType.typeName()]))
           for name in ("subset", "xmin", "ymin", "xmax", "ymax", "rxmin", "rymin", "rxmax", "rymax",
                        "weight", "size", "worker", "kind", "depth")},
    })
    if "terms" in target.fieldNames():
        words = np.asarray(vocab.words, dtype=object)
        arrow = arrow.append_column("all_terms", pa.array(cols["all_terms"].astype(bool)))
        arrow = arrow.append_column("terms", pa.array([words[np.asarray(t, dtype=np.int64)].tolist()
                                                       for t in cols["terms"]], type=pa.list_(pa.string())))
    elif plan.method is Method.PS2:
        raise ValueError(f"{tables.SUBSETS} predates ps2 (no terms column): use a fresh warehouse for ps2")
    insert(spark, spark.createDataFrame(arrow.to_pandas(), schema=target), tables.SUBSETS,
           app_id="dkmsks-subsets", version=version)
