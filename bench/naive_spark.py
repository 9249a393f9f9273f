"""The naive Spark approach to spatial-keyword kNN monitoring: the baseline of bench_pipeline.

What a Spark user would write without this system (DESIGN §3 fact 6): keep every live
subscription in a Delta table exploded by keyword, and for each timestamp

1. apply the subscription events of ``t`` (deletions, then insertions; DESIGN §1 order);
2. explode the keywords of the objects of ``t`` and join them with the subscription table on
   keyword (no spatial pruning), keep distinct (subscription, object) pairs, compute ``d²``;
3. union these candidates with the current results of the touched subscriptions, rank with
   ``row_number() OVER (PARTITION BY sub_id ORDER BY d2, object id)``, keep ``rn <= k``;
4. MERGE the subscriptions whose top-k changed into a Delta results table.

Tables (in the current database): ``naive_subs(sub_id, x, y, k, keyword)`` and
``naive_results(sub_id, object_ids, d2)``; a live subscription without a row in
``naive_results`` has an empty result. Reads the pipeline's landing tables ``objects`` and
``subscription_events`` (so both approaches see the same, validated data).

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

SUBS = "naive_subs"
RESULTS = "naive_results"


@dataclass
class NaiveStep:
    t: int
    objects: int
    candidate_pairs: int
    changed: int
    phases_ms: dict[str, float] = field(default_factory=dict)

    @property
    def total_ms(self) -> float:
        return sum(self.phases_ms.values())


def _create_tables(spark: SparkSession) -> None:
    for table in (SUBS, RESULTS):
        spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(f"CREATE TABLE {SUBS} (sub_id BIGINT, x DOUBLE, y DOUBLE, k INT, keyword STRING) USING delta")
    spark.sql(f"CREATE TABLE {RESULTS} (sub_id BIGINT, object_ids ARRAY<BIGINT>, d2 ARRAY<DOUBLE>) USING delta")


def seed_from_state(spark: SparkSession, state: str = "knn_current") -> None:
    """Naive tables holding the pipeline's current subscriptions and results (one Delta copy)."""
    _create_tables(spark)
    spark.sql(f"INSERT INTO {SUBS} SELECT sub_id, x, y, k, explode(keywords) FROM {state}")
    spark.sql(f"INSERT INTO {RESULTS} SELECT sub_id, object_ids, d2 FROM {state} WHERE size(object_ids) > 0")


def _apply_events(spark: SparkSession, where: str) -> None:
    """Deletions then insertions of the events matching ``where`` (one timestamp)."""
    dels = f"SELECT DISTINCT id FROM subscription_events WHERE op = 'delete' AND {where}"
    for table in (SUBS, RESULTS):  # Delta's DELETE takes no subquery; MERGE does the same
        spark.sql(f"MERGE INTO {table} a USING ({dels}) d ON a.sub_id = d.id WHEN MATCHED THEN DELETE")
    spark.sql(
        f"INSERT INTO {SUBS} SELECT id, x, y, k, explode(keywords) FROM subscription_events "
        f"WHERE op = 'insert' AND {where}"
    )


def _changed_results(spark: SparkSession, object_filter: str) -> tuple[DataFrame, int]:
    """The new top-k of every subscription a new object entered; persisted. Also returns the
    number of candidate (subscription, object) pairs of the keyword join."""
    cand = spark.sql(f"""
        SELECT DISTINCT s.sub_id, s.k, o.id AS oid,
               (o.x - s.x) * (o.x - s.x) + (o.y - s.y) * (o.y - s.y) AS d2
        FROM (SELECT id, x, y, explode(keywords) AS keyword FROM objects WHERE {object_filter}) o
        JOIN {SUBS} s ON o.keyword = s.keyword
    """).persist()
    n_pairs = cand.count()
    cand.createOrReplaceTempView("_naive_cand")
    changed = spark.sql(f"""
        WITH touched AS (SELECT DISTINCT sub_id, k FROM _naive_cand),
        current AS (
            SELECT r.sub_id, t.k, e.object_ids AS oid, e.d2 AS d2
            FROM {RESULTS} r JOIN touched t ON r.sub_id = t.sub_id
            LATERAL VIEW explode(arrays_zip(r.object_ids, r.d2)) z AS e
        ),
        both AS (
            SELECT sub_id, k, oid, d2, 0 AS is_new FROM current
            UNION ALL
            SELECT sub_id, k, oid, d2, 1 AS is_new FROM _naive_cand
        ),
        ranked AS (
            SELECT *, row_number() OVER (PARTITION BY sub_id ORDER BY d2, oid) AS rn FROM both
        ),
        top AS (
            SELECT sub_id, sort_array(collect_list(struct(d2, oid))) AS l, max(is_new) AS changed
            FROM ranked WHERE rn <= k GROUP BY sub_id
        )
        SELECT sub_id, transform(l, e -> e.oid) AS object_ids, transform(l, e -> e.d2) AS d2
        FROM top WHERE changed = 1
    """).persist()
    changed.count()
    cand.unpersist()
    spark.catalog.dropTempView("_naive_cand")
    return changed, n_pairs


def _merge(spark: SparkSession, changed: DataFrame) -> int:
    changed.createOrReplaceTempView("_naive_changed")
    spark.sql(f"""
        MERGE INTO {RESULTS} r USING _naive_changed c ON r.sub_id = c.sub_id
        WHEN MATCHED THEN UPDATE SET r.object_ids = c.object_ids, r.d2 = c.d2
        WHEN NOT MATCHED THEN INSERT (sub_id, object_ids, d2) VALUES (c.sub_id, c.object_ids, c.d2)
    """)
    n = changed.count()
    changed.unpersist()
    spark.catalog.dropTempView("_naive_changed")
    return n


def naive_step(spark: SparkSession, t: int) -> NaiveStep:
    """Process timestamp ``t`` the naive way; returns its phase times."""
    phases: dict[str, float] = {}
    started = time.perf_counter()
    _apply_events(spark, f"t = {int(t)}")
    phases["events"] = (time.perf_counter() - started) * 1e3
    started = time.perf_counter()
    changed, n_pairs = _changed_results(spark, f"t = {int(t)}")
    phases["join_topk"] = (time.perf_counter() - started) * 1e3
    started = time.perf_counter()
    n_changed = _merge(spark, changed)
    phases["merge"] = (time.perf_counter() - started) * 1e3
    n_obj = spark.sql(f"SELECT count(*) AS n FROM objects WHERE t = {int(t)}").collect()[0].n
    return NaiveStep(int(t), int(n_obj), int(n_pairs), n_changed, phases)


def naive_initial(spark: SparkSession, t0: int = 0) -> NaiveStep:
    """The initial phase the naive way: subscriptions of ``t <= t0``, then O_init (small data only)."""
    _create_tables(spark)
    started = time.perf_counter()
    # Replays every initial event in timestamp order (DESIGN §1): the generator registers all
    # initial subscriptions at t0, but a file may carry earlier events.
    for row in spark.sql(f"SELECT DISTINCT t FROM subscription_events WHERE t <= {int(t0)} ORDER BY t").collect():
        _apply_events(spark, f"t = {int(row.t)}")
    changed, n_pairs = _changed_results(spark, f"t <= {int(t0)}")
    n_changed = _merge(spark, changed)
    n_obj = spark.sql(f"SELECT count(*) AS n FROM objects WHERE t <= {int(t0)}").collect()[0].n
    return NaiveStep(int(t0), int(n_obj), int(n_pairs), n_changed,
                     {"initial": (time.perf_counter() - started) * 1e3})


def naive_results(spark: SparkSession) -> Results:
    """Results of every live subscription (empty for those without a row), as core types."""
    live = spark.sql(f"SELECT DISTINCT sub_id FROM {SUBS}").toArrow().column("sub_id").to_pylist()
    table = spark.table(RESULTS).toArrow()
    out: Results = {int(s): KnnResult(np.zeros(0, np.int64), np.zeros(0, np.float64)) for s in live}
    for s, o, d in zip(table.column("sub_id").to_pylist(), table.column("object_ids").to_pylist(),
                       table.column("d2").to_pylist(), strict=True):
        if s in out:
            out[int(s)] = KnnResult(np.asarray(o, dtype=np.int64), np.asarray(d, dtype=np.float64))
    return out
