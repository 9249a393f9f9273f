"""A live pipeline in miniature without Spark, for the service's tests: a warehouse partitioned
from a real-data workload, and rounds that take the landed timestamps, apply them with the
in-memory engine and commit their result changes to the journal the way a run does (§8: one
append per round, ledger, change and final records).

The engine is a fast path of its own (KOP workers, the main server), so results the service
serves from these journals are checked against :mod:`dkmsks.core.oracle` over what was landed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from conftest import real_objects
from dkmsks.core.config import PartitionConfig
from dkmsks.core.engine import build_engine
from dkmsks.core.model import KnnResult, Objects, Op, SubscriptionEvents, Vocabulary
from dkmsks.core.oracle import oracle_results
from dkmsks.core.workload import WorkloadSpec, generate_workload
from dkmsks.storage import tables
from dkmsks.storage.driver_data import read_events_between, read_objects_between
from dkmsks.storage.journal import commit, commit_first_ledger, last_processed
from dkmsks.storage.lake import Lake
from dkmsks.storage.landing import take_pending
from dkmsks.warehouse import Warehouse
from lake_tables import create_tables

SMALL = WorkloadSpec(o_init=600, subscriptions=60, timestamps=6, objects_per_ts=40, inserts_per_ts=4,
                     deletes_per_ts=3, k_max=4, seed=62)


@dataclass
class Workload:
    """A generated workload and the vocabulary of its keyword ids."""

    objects: Objects
    events: SubscriptionEvents
    vocab: Vocabulary

    def words(self, keywords, row: int) -> list[str]:
        return sorted(self.vocab.word(int(k)) for k in keywords.row(row))

    def objects_at(self, t: int) -> list[dict]:
        """The stream's objects of ``t`` as JSON rows (``id, x, y, keywords, t``)."""
        o = self.objects
        return [{"id": int(o.ids[r]), "x": float(o.x[r]), "y": float(o.y[r]), "keywords": self.words(o.keywords, r),
                 "t": int(o.t[r])} for r in np.flatnonzero(o.t == t).tolist()]

    def events_at(self, t: int) -> list[dict]:
        """The stream's subscription events of ``t`` as the client's rows."""
        e = self.events
        out = []
        for r in np.flatnonzero(e.t == t).tolist():
            if e.op[r] == Op.DELETE:
                out.append({"op": "delete", "id": int(e.ids[r]), "t": t})
            else:
                out.append({"op": "insert", "id": int(e.ids[r]), "x": float(e.x[r]), "y": float(e.y[r]),
                            "keywords": self.words(e.keywords, r), "k": int(e.k[r]), "t": t})
        return out


def workload(spec: WorkloadSpec = SMALL) -> Workload:
    source, vocab = real_objects(spec.objects_needed)
    objects, events = generate_workload(source, spec)
    return Workload(objects, events, vocab)


@dataclass
class Pipeline:
    """The warehouse and the engine that processes it (module doc)."""

    warehouse: Warehouse
    work: Workload
    engine: object
    vocab: Vocabulary
    info: dict[int, tuple[float, float, list[str], int, int]] = field(default_factory=dict)  # sub -> x, y, kw, k, t
    workers: dict[int, int] = field(default_factory=dict)  # sub -> the engine's worker holding it (last seen)

    @property
    def lake(self) -> Lake:
        return Lake.of(self.warehouse)

    def round(self) -> list[int]:
        """Process every landed timestamp after the last processed one in one journal commit;
        the timestamps processed."""
        lake = self.lake
        last = last_processed(lake)
        pending = take_pending(self.warehouse, lake, self.vocab, after=last)
        if not pending.timestamps:
            return []
        engine = self.engine
        before = engine.results()
        records: list[dict] = []
        touched: dict[int, tuple[int, str]] = {}  # sub -> (t, upsert | delete)
        o, e = pending.objects, pending.events
        for t in pending.timestamps:
            rows = np.flatnonzero(e.t == t)
            dels = e.ids[rows[e.op[rows] == Op.DELETE]]
            held_by = dict(zip(dels.tolist(), engine.where(dels).tolist(), strict=True))  # before they go
            ins_rows = rows[e.op[rows] == Op.INSERT]
            ins = e.take(ins_rows).insertions()
            for r in ins_rows.tolist():
                self.info[int(e.ids[r])] = (float(e.x[r]), float(e.y[r]),
                                            sorted(self.vocab.word(int(k)) for k in e.keywords.row(r)), int(e.k[r]), t)
            engine.step(t, dels, ins, o.take(np.flatnonzero(o.t == t)))
            after = engine.results()
            worker = dict(zip(after, engine.where(np.fromiter(after, np.int64, len(after))).tolist(), strict=True))
            for sid in sorted(int(s) for s in dels):
                records.append(_change(t, sid, "delete", None, held_by[sid]))
                touched[sid] = (t, "delete")
                self.workers[sid] = held_by[sid]
            for sid in sorted(int(s) for s in ins.ids):
                records.append(_change(t, sid, "insert", KnnResult(np.zeros(0, np.int64), np.zeros(0)), worker[sid]))
                touched[sid] = (t, "upsert")
            for sid in sorted(after):
                old = before.get(sid) if sid not in set(ins.ids.tolist()) else KnnResult(np.zeros(0, np.int64),
                                                                                        np.zeros(0))
                new = after[sid]
                changed = old is None or not (np.array_equal(old.object_ids, new.object_ids)
                                              and np.array_equal(old.d2, new.d2))
                if changed and (len(new.object_ids) or old is None):
                    records.append(_change(t, sid, "update", new, worker[sid]))
                    touched[sid] = (t, "upsert")
            self.workers.update(worker)
            records.append({"record": "ledger", "t": t, "run_from_t": last, "run_through_t": pending.timestamps[-1],
                            "objects": int((o.t == t).sum()), "insertions": len(ins), "deletions": len(dels)})
            before = after
        for sid, (t, kind) in sorted(touched.items()):
            if kind == "delete":
                records.append({"record": "final", "t": t, "sub_id": sid, "change": "delete",
                                "worker": self.workers[sid]})
            else:
                x, y, kw, k, reg = self.info[sid]
                r = before[sid]
                records.append({"record": "final", "t": t, "sub_id": sid, "change": "upsert",
                                "worker": self.workers[sid],
                                "object_ids": r.object_ids.tolist(), "d2": r.d2.tolist(), "x": x, "y": y,
                                "keywords": kw, "k": k, "registered_t": reg, "weight": 1, "subset": -1})
        _commit(lake, records, pending.timestamps[-1])
        return pending.timestamps

    def compact(self) -> int:
        """Rewrite ``knn_state`` as a compaction leaves it: every live subscription's row at the
        last processed timestamp, exact there (``through_t`` in the commit's metadata); that
        timestamp."""
        from deltalake import CommitProperties, write_deltalake

        from dkmsks.storage.lake import conform

        lake = self.lake
        through = last_processed(lake)
        results = self.engine.results()
        ids = sorted(results)
        n = len(ids)
        rows = pa.table({
            "plan_version": [0] * n, "worker": pa.array([self.workers[s] for s in ids], pa.int32()), "sub_id": ids,
            "x": [self.info[s][0] for s in ids], "y": [self.info[s][1] for s in ids],
            "keywords": [self.info[s][2] for s in ids], "k": pa.array([self.info[s][3] for s in ids], pa.int32()),
            "registered_t": [self.info[s][4] for s in ids], "weight": [1] * n, "subset": [0] * n,
            "object_ids": pa.array([results[s].object_ids.tolist() for s in ids], pa.list_(pa.int64())),
            "d2": pa.array([results[s].d2.tolist() for s in ids], pa.list_(pa.float64())), "updated_t": [through] * n,
        })
        table = lake.table(tables.STATE)
        write_deltalake(table, conform(rows, pa.schema(table.schema().to_arrow())), mode="overwrite",
                        commit_properties=CommitProperties(custom_metadata={
                            "userMetadata": json.dumps({"through_t": through})}))
        return through

    def oracle(self, t: int):
        """The oracle's results at ``t`` over everything landed."""
        vocab = Vocabulary()
        objects = read_objects_between(self.lake, vocab, after=None, upto=t)
        events = read_events_between(self.lake, vocab, after=None, upto=t)
        return oracle_results(objects, events, t)


def _change(t: int, sid: int, kind: str, result: KnnResult | None, worker: int) -> dict:
    row = {"record": "change", "t": t, "sub_id": sid, "change": kind, "worker": worker}
    if result is not None:
        row["object_ids"] = result.object_ids.tolist()
        row["d2"] = result.d2.tolist()
    return row


def _commit(lake: Lake, records: list[dict], to_t: int) -> None:
    columns = ["record", "t", "plan_version", "run_id", "worker", "sub_id", "change", "object_ids", "d2", "x", "y",
               "keywords", "k", "registered_t", "weight", "subset", "run_from_t", "run_through_t", "objects",
               "insertions", "deletions"]
    types = {"worker": pa.int32(), "object_ids": pa.list_(pa.int64()), "d2": pa.list_(pa.float64()),
             "keywords": pa.list_(pa.string()), "k": pa.int32(), "x": pa.float64(), "y": pa.float64(),
             "record": pa.string(), "change": pa.string(), "run_id": pa.string()}
    data = {c: pa.array([r.get(c, 0 if c == "plan_version" else "test" if c == "run_id" else None) for r in records],
                        types.get(c, pa.int64())) for c in columns}
    commit(lake, pa.table(data), to_t)


def live_pipeline(root: Path | str, work: Workload, *, workers: int = 2) -> Pipeline:
    """The warehouse as the partition job leaves it for ``work`` (O_init landed, the initial
    subscriptions live with their exact kNN within O_init, a plan, the ledger record of t0 = 0),
    and the engine that continues it."""
    engine, setup = build_engine(PartitionConfig(method="kop", workers=workers), work.objects, work.events, threads=2)
    warehouse = Warehouse(root)
    lake = create_tables(warehouse)
    o = work.objects
    init = np.flatnonzero(o.t <= 0)
    lake.append(tables.OBJECTS, pa.table({
        "id": o.ids[init], "x": o.x[init], "y": o.y[init],
        "keywords": [work.words(o.keywords, r) for r in init.tolist()], "t": o.t[init],
        "source": ["o_init.tsv"] * len(init), "line": np.arange(2, len(init) + 2)}))
    lake.append(tables.PLANS, pa.table({
        "plan_version": [0], "method": ["kop"], "workers": [workers], "params": [json.dumps({"t0": 0})],
        "subsets": [1], "subscriptions": [setup.n_subscriptions], "o_init": [len(init)], "effective_t": [0],
        "meta_json": [json.dumps({"space": [float(o.x.min()), float(o.y.min()), float(o.x.max()), float(o.y.max())],
                                  "n_objects": len(init)})]}))
    e = work.events
    first = np.flatnonzero((e.t <= 0) & (e.op == Op.INSERT))
    results = engine.results()
    pipeline = Pipeline(warehouse, work, engine, work.vocab)
    rows = []
    for r in first.tolist():
        sid = int(e.ids[r])
        if sid not in results:
            continue
        kw = work.words(e.keywords, r)
        pipeline.info[sid] = (float(e.x[r]), float(e.y[r]), kw, int(e.k[r]), 0)
        rows.append((sid, float(e.x[r]), float(e.y[r]), kw, int(e.k[r]), results[sid]))
    lake.append(tables.EVENTS, pa.table({
        "op": ["insert"] * len(rows), "id": [r[0] for r in rows], "x": [r[1] for r in rows], "y": [r[2] for r in rows],
        "keywords": [r[3] for r in rows], "k": pa.array([r[4] for r in rows], pa.int32()), "t": [0] * len(rows),
        "source": ["events.tsv"] * len(rows), "line": list(range(2, len(rows) + 2))}))
    n = len(rows)
    held = engine.where(np.array([r[0] for r in rows], dtype=np.int64)).tolist()
    pipeline.workers.update(zip((r[0] for r in rows), held, strict=True))
    lake.append(tables.STATE, pa.table({
        "plan_version": [0] * n, "worker": pa.array(held, pa.int32()), "sub_id": [r[0] for r in rows],
        "x": [r[1] for r in rows], "y": [r[2] for r in rows], "keywords": [r[3] for r in rows],
        "k": pa.array([r[4] for r in rows], pa.int32()), "registered_t": [0] * n, "weight": [1] * n,
        "subset": [0] * n, "object_ids": pa.array([r[5].object_ids.tolist() for r in rows], pa.list_(pa.int64())),
        "d2": pa.array([r[5].d2.tolist() for r in rows], pa.list_(pa.float64())), "updated_t": [0] * n,
    }), metadata={"userMetadata": json.dumps({"through_t": 0})})
    commit_first_ledger(lake, t0=0, plan_version=0, run_id="test", objects=len(init), insertions=n)
    return pipeline
