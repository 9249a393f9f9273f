"""Micro-batch job: every pending timestamp exactly once, one Spark task per worker.

The driver is the main server (DESIGN §4): it reads the pending objects and subscription
events, routes deletions to the workers holding them and assigns insertions with the plan's
cost model and ``C(w)``. One Spark task per worker reads that worker's current state,
rebuilds the core worker and applies the pending timestamps in order (DESIGN §3 fact 2:
many timestamps in one job equal one job per timestamp), returning its records as Arrow.

Commit protocol (one run = the timestamps ``(from_t, to_t]``, under the writer lock):

1. one append to the ``journal`` — ledger, change, final and metric records of every
   timestamp of the run — tagged with ``txnAppId = dkmsks-journal``, ``txnVersion = to_t``:
   the commit point. All or nothing; a replay of committed timestamps is skipped;
2. afterwards, and only as maintenance, a *compaction* MERGEs the journal's final records
   into ``knn_state`` (readers overlay the uncompacted ones, :mod:`dkmsks.spark.state_io`).

A run that dies before step 1 committed nothing: the next run starts from the same ledger.
A run that dies after it is complete. Nothing is lost or applied twice.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession

from dkmsks.core.knn_init import StaticKnnIndex
from dkmsks.core.model import Objects, Op, Rect, Subscriptions, SubscriptionEvents, Vocabulary
from dkmsks.core.partition import MainServer, Method, PartitionPlan
from dkmsks.spark import tables
from dkmsks.spark.bridge import BatchPayload, KeywordColumn, run_worker
from dkmsks.spark import driver_data
from dkmsks.spark.driver_data import read_events_between, read_objects_between
from dkmsks.spark.lake import Lake, where
from dkmsks.spark.plan_cache import cache_dir, oinit_statistics
from dkmsks.spark.sql_files import run_sql
from dkmsks.spark.state_io import StateView
from dkmsks.spark.writer_lock import writer_lock

JOURNAL_APP = "dkmsks-journal"
#: Tables a job reads or appends through delta-rs.
LAKE_TABLES = (tables.OBJECTS, tables.EVENTS, tables.PLANS, tables.SUBSETS, tables.STATE, tables.JOURNAL,
               tables.RUN_METRICS)


def open_lake(spark: SparkSession) -> Lake:
    return Lake.of(spark, LAKE_TABLES)


def _lake(source: SparkSession | Lake) -> Lake:
    return source if isinstance(source, Lake) else open_lake(source)


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


def current_plan(source: SparkSession | Lake) -> PlanInfo | None:
    """The plan the state belongs to (``knn_state.plan_version``), else the newest plan."""
    lake = _lake(source)
    plans = lake.read(tables.PLANS)
    if plans.num_rows == 0:
        return None
    in_state = lake.read(tables.STATE, columns=["plan_version"]).column("plan_version")
    versions = np.asarray(plans.column("plan_version").to_numpy(), dtype=np.int64)
    wanted = int(pc.max(in_state).as_py()) if len(in_state) else int(versions.max())
    p = plans.filter(pc.equal(plans.column("plan_version"), wanted)).to_pylist()[0]
    meta = json.loads(p["meta_json"])
    params = json.loads(p["params"])
    return PlanInfo(int(p["plan_version"]), p["method"], int(p["workers"]), int(params["t0"]), int(params["grid"]),
                    Rect(*(float(v) for v in meta["space"])), meta, params.get("new_cost", "paper"))


def last_processed(source: SparkSession | Lake) -> int | None:
    """The newest timestamp in the ledger (journal ledger records)."""
    t = _lake(source).read(tables.JOURNAL, columns=["t"], predicate=where(record__eq="ledger")).column("t")
    return None if len(t) == 0 else int(pc.max(t).as_py())


def pending_timestamps(source: SparkSession | Lake, after: int, until: int | None = None) -> list[int]:
    """Distinct timestamps after ``after`` (and up to ``until``) with objects or events."""
    return driver_data.pending_timestamps(_lake(source), after, until)


def build_main_server(lake: Lake, info: PlanInfo, vocab: Vocabulary, view: StateView,
                      cache: Path | None = None) -> MainServer:
    """The main server of the current plan with ``C(w)`` of the live subscriptions.

    ``cache``: the folder of :mod:`dkmsks.spark.plan_cache` (None: build from ``O_init``).
    """
    # With live costs a new subscription is costed over its actual (infinite) ball: no O_init
    # kNN is needed, so the index (and O_init itself) only for the paper's estimate.
    needs_knn = info.method != Method.KOP.value and info.new_cost == "paper"
    stats, objects = oinit_statistics(lake, info.t0, vocab, cache, need_objects=needs_knn)
    knn_index = StaticKnnIndex.build(objects, len(vocab)) if needs_knn and objects is not None else None
    state = view.read(columns=["sub_id", "worker", "weight", "subset"])
    subsets = lake.read(tables.SUBSETS, predicate=where(plan_version__eq=info.plan_version)).drop(["plan_version"])
    subsets = subsets.sort_by("subset")
    subset_cols = {name: subsets.column(name).to_numpy() for name in subsets.column_names}
    worker = np.asarray(state.column("worker").to_numpy(), dtype=np.int32)
    weight = np.asarray(state.column("weight").to_numpy(), dtype=np.int64)
    meta = dict(info.meta)
    meta["load_weight"] = np.bincount(worker, weights=weight, minlength=info.workers).astype(np.int64).tolist()
    order = np.argsort(np.asarray(state.column("sub_id").to_numpy(), dtype=np.int64), kind="stable")
    plan = PartitionPlan.from_tables(
        meta,
        {"sub_id": np.asarray(state.column("sub_id").to_numpy(), dtype=np.int64)[order], "worker": worker[order],
         "weight": weight[order], "subset": np.asarray(state.column("subset").to_numpy(), dtype=np.int64)[order]},
        subset_cols,
    )
    # Subscriptions restored from the state count as the plan's: their stored (last refreshed)
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
        n_del = 0
        for r, w in zip(dels.tolist(), workers.tolist(), strict=True):
            if w < 0:
                rejected.append((t, int(events.ids[r]), f"delete of subscription {int(events.ids[r])}, which is not live at t={t}"))
            else:
                del_t.append(t)
                del_ids.append(int(events.ids[r]))
                del_w.append(w)
                n_del += 1
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
        counts[t] = (n_obj, int(ins.shape[0]), n_del)

    ins_idx = np.asarray(ins_rows, dtype=np.int64)
    ins_ev = events.take(ins_idx)
    payload = BatchPayload(
        method=info.method, space=info.space.as_tuple(), timestamps=list(timestamps),
        obj_ids=objects.ids, obj_x=objects.x, obj_y=objects.y, obj_t=objects.t,
        obj_keywords=KeywordColumn.from_sets(objects.keywords, words),
        del_t=np.asarray(del_t, dtype=np.int64), del_ids=np.asarray(del_ids, dtype=np.int64),
        del_worker=np.asarray(del_w, dtype=np.int32),
        ins_t=ins_ev.t, ins_ids=ins_ev.ids, ins_worker=np.asarray(ins_w, dtype=np.int32),
        ins_x=ins_ev.x, ins_y=ins_ev.y, ins_k=ins_ev.k, ins_weight=np.asarray(ins_weight, dtype=np.int64),
        ins_keywords=KeywordColumn.from_sets(ins_ev.keywords, words),
        grid=info.grid,
    )
    return RoutedBatch(payload, counts, rejected)


def _to_ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def from_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def run_workers(spark: SparkSession, info: PlanInfo, payload: BatchPayload, view: StateView) -> pa.Table:
    """One Spark task per worker: read its state, apply ``payload``; all records, as Arrow."""
    m = info.workers
    bc = spark.sparkContext.broadcast(payload)

    def task(index: int, _: Any) -> Any:
        yield _to_ipc(run_worker(index, view, bc.value))

    try:
        parts = spark.sparkContext.parallelize(range(m), m).mapPartitionsWithIndex(task).collect()
    finally:
        bc.destroy()
    return pa.concat_tables([from_ipc(p) for p in parts])


def refresh_weights(server: MainServer, finals: pa.Table) -> pa.Table:
    """Re-estimate the costs of new subscriptions whose ball changed (``new_cost="live"``)
    on the main server, and carry the new weights into their final records."""
    if server.new_cost != "live" or server.method is Method.KOP or finals.num_rows == 0:
        return finals
    rows = np.flatnonzero(np.asarray(pc.equal(finals.column("change"), "upsert").to_numpy(zero_copy_only=False)))
    if rows.shape[0] == 0:
        return finals
    d2 = finals.column("d2").combine_chunks().take(pa.array(rows))
    k = np.asarray(pc.fill_null(finals.column("k"), 0).to_numpy(), dtype=np.int64)[rows]
    offsets = np.asarray(d2.offsets, dtype=np.int64)
    lengths = np.diff(offsets)
    flat = np.asarray(d2.flatten().to_numpy(), dtype=np.float64)
    full = lengths >= k
    r2 = np.full(rows.shape[0], np.inf)
    r2[full] = flat[offsets[:-1][full] - offsets[0] + k[full] - 1]
    ids = np.asarray(finals.column("sub_id").to_numpy(), dtype=np.int64)[rows]
    server.refresh(ids, r2)
    workers, weights = server.lookup_weights(ids)
    column = finals.column("weight").combine_chunks()
    weight = np.array(pc.fill_null(column, 0).to_numpy(), dtype=np.int64)
    weight[rows[workers >= 0]] = weights[workers >= 0]
    fresh = pa.array(weight, mask=np.asarray(column.is_null().to_numpy(zero_copy_only=False), dtype=bool))
    return finals.set_column(finals.schema.get_field_index("weight"), "weight", fresh)


def journal_records(
    out: pa.Table, *, info: PlanInfo, routed: RoutedBatch, timestamps: list[int], from_t: int, run_id: str,
    server: MainServer | None,
) -> pa.Table:
    """The one journal append of a run: its workers' records plus a ledger record per timestamp."""
    kind = out.column("record")
    finals = out.filter(pc.equal(kind, "final"))
    if server is not None:
        finals = refresh_weights(server, finals)
    body = pa.concat_tables([out.filter(pc.equal(kind, "change")), finals, out.filter(pc.equal(kind, "metric"))])
    body = body.drop(["seq"])
    ledger = pa.table({
        "record": pa.array(["ledger"] * len(timestamps)),
        "t": pa.array(timestamps, type=pa.int64()),
        "run_from_t": pa.array([from_t] * len(timestamps), type=pa.int64()),
        "run_through_t": pa.array([timestamps[-1]] * len(timestamps), type=pa.int64()),
        "objects": pa.array([routed.counts[t][0] for t in timestamps], type=pa.int64()),
        "insertions": pa.array([routed.counts[t][1] for t in timestamps], type=pa.int64()),
        "deletions": pa.array([routed.counts[t][2] for t in timestamps], type=pa.int64()),
    })
    records = pa.concat_tables([body, ledger], promote_options="default")
    n = records.num_rows
    records = records.append_column("plan_version", pa.array(np.full(n, info.plan_version, dtype=np.int64)))
    return records.append_column("run_id", pa.array([run_id] * n, type=pa.string()))


def quarantine_rejected(spark: SparkSession, rejected: list[tuple[int, int, str]], run_id: str) -> None:
    """Refused subscription events into ``quarantine`` (an idempotent MERGE; before the
    journal commit, so a crash between the two only repeats a no-op)."""
    if not rejected:
        return
    rows = [("subscription_events", "microbatch", int(t), reason, str(sid), run_id) for t, sid, reason in rejected]
    rej = spark.createDataFrame(rows, "target string, source string, line long, reason string, text string, run_id string")
    view = "_dkmsks_rejected"
    rej.createOrReplaceTempView(view)
    try:
        run_sql(spark, "dml/merge_quarantine.sql", target=tables.QUARANTINE, source=view)
    finally:
        spark.catalog.dropTempView(view)


def commit(lake: Lake, records: pa.Table, to_t: int) -> bool:
    """The commit point of a run; False when these timestamps were committed before (a replay)."""
    return lake.append(tables.JOURNAL, records, app_id=JOURNAL_APP, version=to_t)


def record_run_metrics(lake: Lake, run_id: str, job: str, from_t: int, to_t: int, phases: dict[str, float]) -> None:
    lake.append(tables.RUN_METRICS, pa.table({
        "run_id": [run_id] * len(phases), "job": [job] * len(phases), "from_t": [int(from_t)] * len(phases),
        "to_t": [int(to_t)] * len(phases), "phase": list(phases), "ms": [float(v) for v in phases.values()],
    }))


@dataclass
class MicrobatchReport:
    run_id: str
    timestamps: list[int]
    from_t: int | None
    objects: int = 0
    insertions: int = 0
    deletions: int = 0
    rejected: int = 0
    replayed: bool = False
    compacted: bool = False
    phases_ms: dict[str, float] = field(default_factory=dict)

    def add_counts(self, routed: RoutedBatch) -> None:
        self.objects += sum(c[0] for c in routed.counts.values())
        self.insertions += sum(c[1] for c in routed.counts.values())
        self.deletions += sum(c[2] for c in routed.counts.values())
        self.rejected += len(routed.rejected)


#: Compact when the journal holds at least this many uncompacted final records...
COMPACT_MIN_ROWS = 100_000
#: ...or more than this fraction of the state.
COMPACT_FRACTION = 0.25


def uncompacted_rows(view: StateView) -> int:
    return view.lake.read(
        tables.JOURNAL, columns=["sub_id"], version=view.journal_version,
        predicate=where(record__eq="final", plan_version__eq=view.plan_version, t__gt=view.through_t),
    ).num_rows


def compact(spark: SparkSession, *, force: bool = False, lake: Lake | None = None) -> int | None:
    """MERGE the journal's uncompacted final records into ``knn_state`` (one commit).

    Without ``force`` only when the tail is large (:data:`COMPACT_MIN_ROWS`,
    :data:`COMPACT_FRACTION`). Returns the new ``knn_state`` version, or None.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from dkmsks.spark.delta_io import delta_txn

    lake = lake or open_lake(spark)
    with writer_lock(spark, "compaction"):
        info = current_plan(lake)
        if info is None:
            return None
        view = StateView.open(lake, fallback_plan=info.plan_version)
        tail = uncompacted_rows(view)
        state_rows = lake.read(tables.STATE, columns=["sub_id"], version=view.state_version).num_rows
        if tail == 0 or (not force and tail < max(COMPACT_MIN_ROWS, COMPACT_FRACTION * state_rows)):
            return None
        through = last_processed(lake)
        # Equal t: the upsert wins, as in state_io.overlay and knn_current.
        newest = Window.partitionBy("sub_id").orderBy(F.col("t").desc(), F.col("change").desc())
        src = (
            spark.read.option("versionAsOf", view.journal_version).table(tables.JOURNAL)
            .where((F.col("record") == "final") & (F.col("plan_version") == view.plan_version)
                   & (F.col("t") > view.through_t))
            .withColumn("_n", F.row_number().over(newest)).where("_n = 1").drop("_n")
        )
        temp = "_dkmsks_compaction_src"
        src.createOrReplaceTempView(temp)
        try:
            with delta_txn(spark, "dkmsks-compact", int(through),
                           {"job": "compact", "plan_version": view.plan_version, "through_t": int(through)}):
                run_sql(spark, "dml/merge_state.sql", target=tables.STATE, source=temp)
        finally:
            spark.catalog.dropTempView(temp)
        return lake.version(tables.STATE)


def run_microbatch(
    spark: SparkSession, *, run_id: str, until: int | None = None, max_timestamps: int | None = None,
    compaction: str = "auto", lock_timeout: float | None = None,
) -> MicrobatchReport:
    """Process every pending timestamp (up to ``until``) exactly once; see the module doc.

    ``compaction``: ``auto`` (when the journal tail is large), ``always`` or ``never``.
    """
    tables.ensure_tables(spark)
    lake = open_lake(spark)
    phases: dict[str, float] = {}
    with writer_lock(spark, f"micro-batch {run_id}", timeout=lock_timeout):
        started = time.perf_counter()
        info = current_plan(lake)
        if info is None:
            raise ValueError("no partition plan yet: run the partition job after ingesting O_init")
        last = last_processed(lake)
        if last is None:
            raise ValueError("a partition plan exists but the ledger is empty: re-run the partition job "
                             "(it completes an interrupted first run)")
        ts = pending_timestamps(lake, last, until)
        if max_timestamps is not None:
            ts = ts[:max_timestamps]
        report = MicrobatchReport(run_id, ts, last, phases_ms=phases)
        if ts:
            to_t = ts[-1]
            view = StateView.open(lake, fallback_plan=info.plan_version)
            vocab = Vocabulary()
            server = build_main_server(lake, info, vocab, view, cache_dir(spark))
            objects = read_objects_between(lake, vocab, after=last, upto=to_t)
            events = read_events_between(lake, vocab, after=last, upto=to_t)
            phases["read"] = (time.perf_counter() - started) * 1e3

            started = time.perf_counter()
            routed = route(server, info, ts, objects, events, vocab)
            phases["assign"] = (time.perf_counter() - started) * 1e3

            started = time.perf_counter()
            out = run_workers(spark, info, routed.payload, view)
            phases["workers"] = (time.perf_counter() - started) * 1e3

            started = time.perf_counter()
            records = journal_records(out, info=info, routed=routed, timestamps=ts, from_t=last, run_id=run_id,
                                      server=server)
            quarantine_rejected(spark, routed.rejected, run_id)
            report.replayed = not commit(lake, records, to_t)
            phases["commit"] = (time.perf_counter() - started) * 1e3
            report.add_counts(routed)
        if compaction != "never":
            started = time.perf_counter()
            report.compacted = compact(spark, force=compaction == "always", lake=lake) is not None
            if report.compacted:
                phases["compact"] = (time.perf_counter() - started) * 1e3
        if ts and not report.replayed:
            record_run_metrics(lake, run_id, "microbatch", last, ts[-1], phases)
    return report
