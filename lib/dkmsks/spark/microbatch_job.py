"""Micro-batch job: every pending timestamp exactly once, one Spark task per worker.

The driver is the main server (DESIGN §4): it reads the pending objects and subscription
events, routes deletions to the workers holding them and assigns insertions with the plan's
cost model and ``C(w)``. Each worker's state rows go to one Spark task (an RDD partitioned by
worker id), which rebuilds the core worker and applies the pending timestamps in order
(DESIGN §3 fact 2: many timestamps in one job equal one job per timestamp).

Commit protocol (one run = the timestamps ``(from_t, to_t]``):

1. ``knn_state`` MERGE, tagged with ``through_t = to_t`` in the commit's user metadata and
   made idempotent by Delta's ``txnAppId``/``txnVersion`` — this is the commit point;
2. ``result_changes`` and ``worker_metrics`` blind appends and the ``ledger`` MERGE, each
   idempotent (``txnVersion = to_t`` / MERGE on ``t``).

If a run dies after step 1, the next run sees ``through_t`` ahead of the ledger, recomputes
the same timestamps from the state *before* that commit (Delta time travel), skips step 1
and completes step 2: nothing is lost or applied twice.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import numpy as np
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from dkmsks.core.knn_init import StaticKnnIndex
from dkmsks.core.model import Objects, Op, Rect, Subscriptions, SubscriptionEvents, Vocabulary
from dkmsks.core.partition import MainServer, Method, PartitionPlan
from dkmsks.spark import tables
from dkmsks.spark.bridge import BatchPayload, KeywordColumn, run_worker
from dkmsks.spark.delta_io import delta_txn, insert
from dkmsks.spark.driver_data import read_events_between, read_objects_between, read_state_columns, state_frame
from dkmsks.spark.partition_job import load_oinit
from dkmsks.spark.schemas import WORKER_OUTPUT
from dkmsks.spark.sql_files import run_sql


@dataclass(frozen=True)
class PlanInfo:
    plan_version: int
    method: str
    workers: int
    t0: int
    grid: int
    space: Rect
    meta: dict
    new_cost: str = "paper"


def current_plan(spark: SparkSession) -> PlanInfo | None:
    """The plan the state belongs to (``knn_state.plan_version``), else the newest plan."""
    rows = spark.table(tables.STATE).select("plan_version").limit(1).collect()
    plans = spark.table(tables.PLANS)
    if rows:
        plans = plans.where(F.col("plan_version") == rows[0].plan_version)
    found = plans.orderBy(F.col("plan_version").desc()).limit(1).collect()
    if not found:
        return None
    p = found[0]
    meta = json.loads(p.meta_json)
    params = json.loads(p.params)
    return PlanInfo(int(p.plan_version), p.method, int(p.workers), int(params["t0"]), int(params["grid"]),
                    Rect(*(float(v) for v in meta["space"])), meta, params.get("new_cost", "paper"))


def last_processed(spark: SparkSession) -> int | None:
    row = spark.table(tables.LEDGER).agg(F.max("t").alias("t")).collect()[0]
    return None if row.t is None else int(row.t)


def pending_timestamps(spark: SparkSession, after: int, until: int | None = None) -> list[int]:
    """Distinct timestamps after ``after`` (and up to ``until``) with objects or events."""
    ts = (
        spark.table(tables.OBJECTS).select("t").where(F.col("t") > after)
        .union(spark.table(tables.EVENTS).select("t").where(F.col("t") > after))
    )
    if until is not None:
        ts = ts.where(F.col("t") <= until)
    return sorted(int(r.t) for r in ts.distinct().collect())


def _state_commit(spark: SparkSession) -> tuple[int, dict]:
    """Version and user metadata of the latest ``knn_state`` commit."""
    from delta.tables import DeltaTable

    last = DeltaTable.forName(spark, tables.STATE).history(1).collect()[0]
    meta = json.loads(last.userMetadata) if last.userMetadata else {}
    return int(last.version), meta


def write_ledger(
    spark: SparkSession, ts: list[int], *, plan_version: int, state_version: int, run_from_t: int,
    counts: dict[int, tuple[int, int, int]], run_id: str, replace: bool = False,
) -> None:
    rows = [
        (int(t), int(plan_version), int(state_version), int(run_from_t), int(counts.get(t, (0, 0, 0))[0]),
         int(counts.get(t, (0, 0, 0))[1]), int(counts.get(t, (0, 0, 0))[2]), run_id)
        for t in ts
    ]
    df = spark.createDataFrame(rows, schema=spark.table(tables.LEDGER).schema)
    view = "_dkmsks_ledger_src"
    df.createOrReplaceTempView(view)
    try:
        run_sql(spark, "dml/merge_ledger.sql", target=tables.LEDGER, source=view)
    finally:
        spark.catalog.dropTempView(view)


def build_main_server(spark: SparkSession, info: PlanInfo, vocab: Vocabulary,
                      state_version: int | None = None) -> MainServer:
    """The main server of the current plan with ``C(w)`` of the live subscriptions."""
    objects, stats = load_oinit(spark, info.t0, vocab)
    # With live costs a new subscription is costed over its actual (infinite) ball: no O_init
    # kNN is needed, so the index is only built for the paper's estimate.
    needs_knn = info.method != Method.KOP.value and info.new_cost == "paper"
    knn_index = StaticKnnIndex.build(objects, len(vocab)) if needs_knn else None
    state = read_state_columns(spark, state_version)
    subsets = spark.table(tables.SUBSETS).where(F.col("plan_version") == info.plan_version).drop(
        "plan_version").toArrow()
    subset_cols = {name: subsets.column(name).to_numpy() for name in subsets.column_names}
    meta = dict(info.meta)
    meta["load_weight"] = np.bincount(state.worker, weights=state.weight, minlength=info.workers).astype(np.int64).tolist()
    plan = PartitionPlan.from_tables(
        meta,
        {"sub_id": state.sub_ids, "worker": state.worker, "weight": state.weight, "subset": state.subset},
        subset_cols,
    )
    # Subscriptions restored from knn_state count as the plan's: their stored (last refreshed)
    # costs stay fixed; those registered from now on are re-estimated as their balls shrink.
    return MainServer(plan, stats, knn_index, new_cost=info.new_cost)


@dataclass
class RoutedBatch:
    payload: BatchPayload
    counts: dict[int, tuple[int, int, int]]
    rejected: list[tuple[int, int, str]] = field(default_factory=list)  # (t, sub id, reason)


def route(
    server: MainServer, info: PlanInfo, timestamps: list[int], objects: Objects, events: SubscriptionEvents,
    vocab: Vocabulary,
) -> RoutedBatch:
    """Main server work for the pending timestamps: route deletions, assign insertions."""
    words = vocab.words
    del_t, del_ids, del_w, ins_rows, ins_w, ins_weight = [], [], [], [], [], []
    rejected: list[tuple[int, int, str]] = []
    counts: dict[int, tuple[int, int, int]] = {}
    for t in timestamps:
        rows = np.flatnonzero(events.t == t)
        dels = rows[events.op[rows] == Op.DELETE]
        workers = server.delete(events.ids[dels], missing="ignore") if dels.shape[0] else np.zeros(0, np.int32)
        for r, w in zip(dels.tolist(), workers.tolist(), strict=True):
            if w < 0:
                rejected.append((t, int(events.ids[r]), f"delete of subscription {int(events.ids[r])}, which is not live at t={t}"))
            else:
                del_t.append(t)
                del_ids.append(int(events.ids[r]))
                del_w.append(w)
        ins = rows[events.op[rows] == Op.INSERT]
        if ins.shape[0]:
            live, _ = server.lookup_weights(events.ids[ins])
            for r in ins[live >= 0].tolist():
                rejected.append((t, int(events.ids[r]), f"insert of subscription {int(events.ids[r])}, which is already live"))
            ins = ins[live < 0]
        if ins.shape[0]:
            e = events.take(ins)
            subs = Subscriptions(e.ids, e.x, e.y, e.keywords, e.k, e.t)
            workers = server.assign(subs)
            _, weights = server.lookup_weights(e.ids)
            ins_rows.extend(ins.tolist())
            ins_w.extend(workers.tolist())
            ins_weight.extend(weights.tolist())
        n_obj = int(np.count_nonzero(objects.t == t))
        counts[t] = (n_obj, int(ins.shape[0]), int(sum(1 for x in del_t if x == t)))

    ins_idx = np.asarray(ins_rows, dtype=np.int64)
    ins_ev = events.take(ins_idx)
    payload = BatchPayload(
        method=info.method, space=info.space.as_tuple(), timestamps=list(timestamps),
        obj_ids=objects.ids, obj_x=objects.x, obj_y=objects.y, obj_t=objects.t,
        obj_keywords=KeywordColumn.from_lists([[words[k] for k in objects.keywords.row(i)] for i in range(len(objects))]),
        del_t=np.asarray(del_t, dtype=np.int64), del_ids=np.asarray(del_ids, dtype=np.int64),
        del_worker=np.asarray(del_w, dtype=np.int32),
        ins_t=ins_ev.t, ins_ids=ins_ev.ids, ins_worker=np.asarray(ins_w, dtype=np.int32),
        ins_x=ins_ev.x, ins_y=ins_ev.y, ins_k=ins_ev.k, ins_weight=np.asarray(ins_weight, dtype=np.int64),
        ins_keywords=KeywordColumn.from_lists([[words[k] for k in ins_ev.keywords.row(i)] for i in range(len(ins_ev))]),
        grid=info.grid,
    )
    return RoutedBatch(payload, counts, rejected)


def run_workers(spark: SparkSession, info: PlanInfo, payload: BatchPayload, state_version: int | None) -> DataFrame:
    """One Spark task per worker over its state rows; returns the (persisted) output records."""
    m = info.workers
    bc = spark.sparkContext.broadcast(payload)
    state_rdd = state_frame(spark, state_version).rdd.map(lambda r: (int(r["worker"]), r.asDict()))

    def task(index, items):
        yield from run_worker(index, (row for _, row in items), bc.value)

    out = state_rdd.partitionBy(m, lambda w: int(w)).mapPartitionsWithIndex(task)
    df = spark.createDataFrame(out, schema=WORKER_OUTPUT).persist()
    df.count()
    return df


def _refreshed_weights(spark: SparkSession, server: MainServer, finals: DataFrame) -> DataFrame:
    """Re-estimate the costs of new subscriptions whose ball changed (``new_cost="live"``) on
    the main server, and carry the new weights into the rows merged into ``knn_state``."""
    if server.new_cost != "live" or server.method is Method.KOP:
        return finals
    full = F.size("object_ids") >= F.col("k")
    balls = finals.where("change = 'upsert'").select(
        "sub_id", F.when(full, F.element_at("d2", F.col("k"))).otherwise(float("inf")).alias("r2")).toArrow()
    if balls.num_rows == 0:
        return finals
    ids = np.asarray(balls.column("sub_id").to_numpy(), dtype=np.int64)
    server.refresh(ids, np.asarray(balls.column("r2").to_numpy(), dtype=np.float64))
    workers, weights = server.lookup_weights(ids)
    keep = workers >= 0
    fresh = spark.createDataFrame(
        list(zip(ids[keep].tolist(), weights[keep].tolist(), strict=True)), "sub_id long, fresh_weight long")
    return (finals.join(F.broadcast(fresh), "sub_id", "left")
            .withColumn("weight", F.coalesce("fresh_weight", "weight")).drop("fresh_weight"))


def commit_run(
    spark: SparkSession, out: DataFrame, *, info: PlanInfo, routed: RoutedBatch, timestamps: list[int],
    from_t: int, run_id: str, committed_version: int | None = None, server: MainServer | None = None,
) -> int:
    """The commit protocol of the module doc for the worker records ``out`` of one run.

    ``committed_version`` is given when recovering: the state commit already happened.
    Returns the ``knn_state`` version that holds the results of ``timestamps``.
    """
    to_t = timestamps[-1]
    if committed_version is None:
        finals = out.where("record = 'final'").select(
            "sub_id", "worker", "x", "y", "keywords", "k", "registered_t", "weight", "subset",
            "object_ids", "d2", "t", "change")
        if server is not None:
            finals = _refreshed_weights(spark, server, finals)
        new_version = _commit_state(spark, finals, info.plan_version, from_t, to_t)
    else:
        new_version = committed_version
    changes = out.where("record = 'change'").select("t", "worker", "sub_id", "change", "object_ids", "d2")
    insert(spark, changes, tables.CHANGES, app_id="dkmsks-changes", version=to_t)
    metrics = out.where("record = 'metric'").select(
        "t", F.lit(info.plan_version).cast("bigint").alias("plan_version"), "worker", "subscriptions",
        "pairs_tested", "pairs_in_ball", "results_changed", "knn_ms", "insert_ms", "delete_ms",
        F.lit(run_id).alias("run_id"))
    insert(spark, metrics, tables.WORKER_METRICS, app_id="dkmsks-metrics", version=to_t)
    if routed.rejected:
        rows = [("subscription_events", "microbatch", int(t), reason, str(sid), run_id)
                for t, sid, reason in routed.rejected]
        rej = spark.createDataFrame(rows, "target string, source string, line long, reason string, text string, run_id string")
        view = "_dkmsks_rejected"
        rej.createOrReplaceTempView(view)
        try:
            run_sql(spark, "dml/merge_quarantine.sql", target=tables.QUARANTINE, source=view)
        finally:
            spark.catalog.dropTempView(view)
    write_ledger(spark, timestamps, plan_version=info.plan_version, state_version=new_version, run_from_t=from_t,
                 counts=routed.counts, run_id=run_id)
    return new_version


@dataclass
class MicrobatchReport:
    run_id: str
    timestamps: list[int]
    from_t: int | None
    objects: int = 0
    insertions: int = 0
    deletions: int = 0
    rejected: int = 0
    recovered: bool = False
    phases_ms: dict[str, float] = field(default_factory=dict)


def _commit_state(spark: SparkSession, finals: DataFrame, plan_version: int, from_t: int, to_t: int) -> int:
    order = Window.partitionBy("sub_id").orderBy(F.col("t").desc(), F.when(F.col("change") == "upsert", 1).otherwise(0).desc())
    src = (
        finals.withColumn("_n", F.row_number().over(order)).where("_n = 1").drop("_n")
        .withColumn("plan_version", F.lit(plan_version).cast("bigint"))
    )
    view = "_dkmsks_state_src"
    src.createOrReplaceTempView(view)
    try:
        with delta_txn(spark, "dkmsks-state", to_t,
                       {"job": "microbatch", "plan_version": plan_version, "from_t": from_t, "through_t": to_t}):
            run_sql(spark, "dml/merge_state.sql", target=tables.STATE, source=view)
    finally:
        spark.catalog.dropTempView(view)
    return _state_commit(spark)[0]


def run_microbatch(
    spark: SparkSession, *, run_id: str, until: int | None = None, max_timestamps: int | None = None,
) -> MicrobatchReport:
    """Process every pending timestamp (up to ``until``) exactly once; see the module doc."""
    tables.ensure_tables(spark)
    phases: dict[str, float] = {}
    started = time.perf_counter()
    info = current_plan(spark)
    if info is None:
        raise ValueError("no partition plan yet: run the partition job after ingesting O_init")
    last = last_processed(spark)
    assert last is not None, "a plan exists but the ledger is empty"
    state_version, meta = _state_commit(spark)
    recovering = int(meta.get("through_t", last)) > last
    base_version: int | None = None
    if recovering:
        # The previous run committed the state but not the rest: redo exactly its timestamps
        # from the state before that commit, without committing the state again.
        last, until = int(meta["from_t"]), int(meta["through_t"])
        base_version = state_version - 1
    ts = pending_timestamps(spark, last, until)
    if max_timestamps is not None:
        ts = ts[:max_timestamps]
    report = MicrobatchReport(run_id, ts, last, recovered=recovering, phases_ms=phases)
    if not ts:
        return report
    to_t = ts[-1]

    vocab = Vocabulary()
    server = build_main_server(spark, info, vocab, base_version)
    objects = read_objects_between(spark, vocab, after=last, upto=to_t)
    events = read_events_between(spark, vocab, after=last, upto=to_t)
    phases["read"] = (time.perf_counter() - started) * 1e3

    started = time.perf_counter()
    routed = route(server, info, ts, objects, events, vocab)
    phases["assign"] = (time.perf_counter() - started) * 1e3

    started = time.perf_counter()
    out = run_workers(spark, info, routed.payload, base_version)
    phases["workers"] = (time.perf_counter() - started) * 1e3

    started = time.perf_counter()
    commit_run(spark, out, info=info, routed=routed, timestamps=ts, from_t=last, run_id=run_id,
               committed_version=state_version if recovering else None, server=server)
    out.unpersist()
    phases["commit"] = (time.perf_counter() - started) * 1e3
    report.objects = sum(c[0] for c in routed.counts.values())
    report.insertions = sum(c[1] for c in routed.counts.values())
    report.deletions = sum(c[2] for c in routed.counts.values())
    report.rejected = len(routed.rejected)
    run_rows = [(run_id, "microbatch", int(last), int(to_t), phase, float(ms)) for phase, ms in phases.items()]
    insert(spark, spark.createDataFrame(run_rows, schema=spark.table(tables.RUN_METRICS).schema), tables.RUN_METRICS)
    return report
