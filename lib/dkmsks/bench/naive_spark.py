"""The naive Spark approach to spatial-keyword kNN monitoring: the baseline of ``dkm bench pipeline``.

What a Spark user would write without this system (docs/design.md §3 fact 6): keep every live
subscription in a Delta table exploded by keyword, and for each timestamp

1. apply the subscription events of ``t`` (deletions, then insertions; docs/design.md §1 order);
2. explode the keywords of the objects of ``t`` and join them with the subscription table on
   keyword (no spatial pruning), keep distinct (subscription, object) pairs, compute ``d²``;
3. union these candidates with the current results of the touched subscriptions, rank with
   ``row_number() OVER (PARTITION BY sub_id ORDER BY d2, object id)``, keep ``rn <= k``;
4. MERGE the subscriptions whose top-k changed into a Delta results table.

Tables (in the current database): ``naive_subs(sub_id, x, y, k, keyword)`` and
``naive_results(sub_id, object_ids, d2)``; a live subscription without a row in
``naive_results`` has an empty result. The statements are ``sql/bench/naive_*.sql``. Reads the
pipeline's landing tables ``objects`` and ``subscription_events`` (so both approaches see the
same, validated data).

The initial state is either computed the same naive way from ``O_init`` (:func:`naive_initial`,
feasible for small workloads only) or copied from the pipeline's current state (``knn_current``)
(:func:`seed_from_state`, for timing at paper scale).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from pyspark.sql import DataFrame, SparkSession

from dkmsks.core.model import KnnResult, Results
from dkmsks.spark.sql_files import run_sql

SUBS = "naive_subs"
RESULTS = "naive_results"
#: Every object up to a timestamp: the lower end of a ``t BETWEEN`` range.
_FIRST_T = int(np.iinfo(np.int64).min)


@dataclass
class NaiveStep:
    """What one naive timestamp did: its objects, the candidate pairs, the changed results and phase times."""

    t: int
    objects: int
    candidate_pairs: int
    changed: int
    phases_ms: dict[str, float] = field(default_factory=dict)

    @property
    def total_ms(self) -> float:
        """The timestamp's time over all phases, in milliseconds."""
        return sum(self.phases_ms.values())


def _create_tables(spark: SparkSession) -> None:
    for table in (SUBS, RESULTS):
        run_sql(spark, "bench/naive_drop_table.sql", table=table)
    run_sql(spark, "bench/naive_create_subscriptions.sql", table=SUBS)
    run_sql(spark, "bench/naive_create_results.sql", table=RESULTS)


def seed_from_state(spark: SparkSession, state: str = "knn_current") -> None:
    """Naive tables holding the pipeline's current subscriptions and results (one Delta copy)."""
    _create_tables(spark)
    run_sql(spark, "bench/naive_seed_subscriptions.sql", subscriptions=SUBS, state=state)
    run_sql(spark, "bench/naive_seed_results.sql", results=RESULTS, state=state)


def _apply_events(spark: SparkSession, t: int) -> None:
    """Deletions then insertions of the subscription events of timestamp ``t``."""
    for table in (SUBS, RESULTS):
        run_sql(spark, "bench/naive_delete_subscriptions.sql", table=table, t=t)
    run_sql(spark, "bench/naive_insert_subscriptions.sql", subscriptions=SUBS, t=t)


def _changed_results(spark: SparkSession, from_t: int, to_t: int) -> tuple[DataFrame, int]:
    """The new top-k of every subscription an object of ``from_t..to_t`` entered; persisted.
    Also returns the number of candidate (subscription, object) pairs of the keyword join."""
    cand = run_sql(spark, "bench/naive_candidates.sql", subscriptions=SUBS, from_t=from_t, to_t=to_t).persist()
    n_pairs = cand.count()
    cand.createOrReplaceTempView("naive_candidates")
    changed = run_sql(spark, "bench/naive_new_top_k.sql", results=RESULTS).persist()
    changed.count()
    cand.unpersist()
    spark.catalog.dropTempView("naive_candidates")
    return changed, n_pairs


def _merge(spark: SparkSession, changed: DataFrame) -> int:
    changed.createOrReplaceTempView("naive_changed")
    run_sql(spark, "bench/naive_merge_results.sql", results=RESULTS)
    n = changed.count()
    changed.unpersist()
    spark.catalog.dropTempView("naive_changed")
    return n


def _objects(spark: SparkSession, from_t: int, to_t: int) -> int:
    return int(run_sql(spark, "bench/naive_count_objects.sql", from_t=from_t, to_t=to_t).collect()[0].n)


def naive_step(spark: SparkSession, t: int) -> NaiveStep:
    """Process timestamp ``t`` the naive way; returns its phase times."""
    t = int(t)
    phases: dict[str, float] = {}
    started = time.perf_counter()
    _apply_events(spark, t)
    phases["events"] = (time.perf_counter() - started) * 1e3
    started = time.perf_counter()
    changed, n_pairs = _changed_results(spark, t, t)
    phases["join_topk"] = (time.perf_counter() - started) * 1e3
    started = time.perf_counter()
    n_changed = _merge(spark, changed)
    phases["merge"] = (time.perf_counter() - started) * 1e3
    return NaiveStep(t, _objects(spark, t, t), int(n_pairs), n_changed, phases)


def naive_initial(spark: SparkSession, t0: int = 0) -> NaiveStep:
    """The initial phase the naive way: subscriptions of ``t <= t0``, then O_init (small data only)."""
    t0 = int(t0)
    _create_tables(spark)
    started = time.perf_counter()
    # Replays every initial event in timestamp order (docs/design.md §1): the generator registers all
    # initial subscriptions at t0, but a file may carry earlier events.
    for row in run_sql(spark, "bench/naive_initial_timestamps.sql", t0=t0).collect():
        _apply_events(spark, int(row.t))
    changed, n_pairs = _changed_results(spark, _FIRST_T, t0)
    n_changed = _merge(spark, changed)
    return NaiveStep(t0, _objects(spark, _FIRST_T, t0), int(n_pairs), n_changed,
                     {"initial": (time.perf_counter() - started) * 1e3})


def naive_results(spark: SparkSession) -> Results:
    """Results of every live subscription (empty for those without a row), as core types."""
    live = run_sql(spark, "bench/naive_live_subscriptions.sql", table=SUBS).toArrow().column("sub_id").to_pylist()
    table = spark.table(RESULTS).toArrow()
    out: Results = {int(s): KnnResult(np.zeros(0, np.int64), np.zeros(0, np.float64)) for s in live}
    for s, o, d in zip(table.column("sub_id").to_pylist(), table.column("object_ids").to_pylist(),
                       table.column("d2").to_pylist(), strict=True):
        if s in out:
            out[int(s)] = KnnResult(np.asarray(o, dtype=np.int64), np.asarray(d, dtype=np.float64))
    return out
