"""Bytes per timestamp from the main server to the workers and back, with and without routing
the objects, against the minimum (issue 63; docs/design.md §2.6).

The in-memory engine at the 1M/1M protocol (real Place data, ``|O_init| = |S| = 1M``, m = 20,
DkM-SKS; per timestamp 1,000 objects, 100 registrations, 100 deletions); its main server keeps
the routing summary while every worker still gets every object (``routing="count"``), so the
objects each worker needs — those one of its subscriptions' exact test accepts — are counted
exactly, as the minimum. Per timestamp, with one worker per task (a catch-up run's tasks):

- objects to the workers: every object to every worker (the paper's broadcast), the objects the
  summary routes to each, and the minimum: each object once to each worker that needs it;
- bytes to the workers: each worker's round as follow's tasks read it (``wire.encode_round``
  of its payload): every object and event (broadcast), its routed objects and its own events,
  its needed objects and its own events (minimum);
- bytes back: each worker's records (its result changes, finals and metric, as Arrow IPC), the
  same whether routed or not.

Then one round of ``--burst`` timestamps routed as follow routes a round (the summary as it
stood at the round's start, each registration of the round from its timestamp on) against the
minimum (each timestamp's needed objects). The counts and bytes do not depend on the machine;
the summary's build and lookup times do.

Usage: ``.venv/bin/python bench/routing.py [--objects 1000000] [--subscriptions 1000000]
[--timestamps 20] [--burst 100] [--workers 20] [--quick] [--doc docs/benchmarks.md]``.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dkmsks.bench.common import (
    Report,
    add_doc_flags,
    bench_main,
    describe_machine,
    git_commit,
    load_average,
    machine,
    paper_workload,
    say,
)
from dkmsks.bench.stats import median
from dkmsks.core.config import PartitionConfig
from dkmsks.core.engine import build_engine
from dkmsks.core.model import Objects, Op, Vocabulary
from dkmsks.core.routing import NewBalls
from dkmsks.core.workload import WorkloadSpec
from dkmsks.cores import usable_cores
from dkmsks.jobs.follow.channel import Round
from dkmsks.jobs.follow.wire import encode_records, encode_round
from dkmsks.spark.bridge import BatchPayload, KeywordColumn
from dkmsks.spark.worker_records import METRIC_COLUMNS, WorkerRecords, no_results

SECTION = "bench/routing.py"


@dataclass
class Step:
    """One timestamp's numbers, summed over the workers."""

    t: int
    objects: int
    routed: int
    needed: int
    bytes_broadcast: int
    bytes_routed: int
    bytes_minimum: int
    bytes_back: int
    route_ms: float
    per_worker_needed: list[int] = field(default_factory=list)


class Recorder:
    """The engine's router, watched: the registrations it is told of (ids, workers, keywords)
    and the time its calls take."""

    def __init__(self, router: Any) -> None:
        self.router = router
        self.registered: list[tuple[np.ndarray, np.ndarray]] = []
        self.route_s = 0.0
        self.update_s = 0.0
        self.last: np.ndarray | None = None

    def route(self, objects: Objects, new: NewBalls | None = None) -> np.ndarray:
        """The router's routing of ``objects``, timed and kept."""
        started = time.perf_counter()
        self.last = self.router.route(objects, new)
        self.route_s += time.perf_counter() - started
        return self.last

    def forget(self, ids: np.ndarray) -> int:
        """The router forgets ``ids`` (deletions), timed."""
        started = time.perf_counter()
        try:
            return int(self.router.forget(ids))
        finally:
            self.update_s += time.perf_counter() - started

    def register(self, ids: np.ndarray, workers: np.ndarray, *rest: Any) -> None:
        """The router posts new balls, timed; their ids and workers kept."""
        started = time.perf_counter()
        self.registered.append((np.asarray(ids), np.asarray(workers)))
        self.router.register(ids, workers, *rest)
        self.update_s += time.perf_counter() - started

    def shrink(self, ids: np.ndarray, radius2: np.ndarray) -> int:
        """The router re-posts shrunk balls, timed."""
        started = time.perf_counter()
        try:
            return int(self.router.shrink(ids, radius2))
        finally:
            self.update_s += time.perf_counter() - started


def payload_bytes(objects: Objects, words: list[str], ts: list[int], dels: tuple[np.ndarray, np.ndarray, np.ndarray],
                  ins: tuple[Any, np.ndarray]) -> int:
    """The bytes of a round of ``objects`` and events as a task reads it (wire.encode_round)."""
    del_t, del_ids, del_worker = dels
    subs, ins_worker = ins
    payload = BatchPayload(
        method="dkm", space=(0.0, 0.0, 1.0, 1.0), timestamps=ts, obj_ids=objects.ids, obj_x=objects.x,
        obj_y=objects.y, obj_t=objects.t, obj_keywords=KeywordColumn.from_sets(objects.keywords, words),
        del_t=del_t, del_ids=del_ids, del_worker=del_worker.astype(np.int32), ins_t=subs.t, ins_ids=subs.ids,
        ins_worker=ins_worker.astype(np.int32), ins_x=subs.x, ins_y=subs.y, ins_k=subs.k,
        ins_weight=np.zeros(len(subs), dtype=np.int64), ins_keywords=KeywordColumn.from_sets(subs.keywords, words),
    )
    return len(encode_round(Round(payload)))


def records_bytes(worker: Any, w: int, t: int, deleted: np.ndarray, inserted: np.ndarray, updated: np.ndarray,
                  vocab: Vocabulary) -> int:
    """The bytes of worker ``w``'s records of timestamp ``t`` as a task sends them (its
    deletions, registrations and changed results, one metric, the finals)."""
    state = worker.state
    out = WorkerRecords(w)
    rows = updated[np.argsort(state.sub_id[updated], kind="stable")]
    out.changes_of([(t, "delete", deleted, None), (t, "insert", inserted, no_results(inserted.shape[0])),
                    (t, "update", state.sub_id[rows], (state.k[rows], state.ids[rows], state.d2[rows]))])
    out.metrics(np.array([t]), **{name: np.zeros(1) for name in METRIC_COLUMNS})
    sub, t_last, seq_last, was_delete = out.last_changes()
    upserts = np.flatnonzero(~was_delete)
    if upserts.shape[0]:
        final = state.to_arrays(state.rows_of(sub[upserts]))
        n = upserts.shape[0]
        out.finals_upsert(final, t_last[upserts], seq_last[upserts], np.zeros(n, np.int64), np.zeros(n, np.int64),
                          vocab)
    gone = np.flatnonzero(was_delete)
    out.finals_delete(sub[gone], t_last[gone], seq_last[gone])
    return len(encode_records(out.table()))


def main(argv: Sequence[str] | None = None) -> int:
    """``bench/routing.py``: bytes with and without routing against the minimum; the exit status."""
    p = argparse.ArgumentParser(prog="bench/routing.py", description=__doc__.splitlines()[0])
    p.add_argument("--objects", type=int, default=1_000_000, help="|O_init| (%(default)s)")
    p.add_argument("--subscriptions", type=int, default=1_000_000, help="|S| (%(default)s)")
    p.add_argument("--timestamps", type=int, default=20, help="one-timestamp rounds measured (%(default)s)")
    p.add_argument("--burst", type=int, default=100, help="timestamps of the burst round after them (%(default)s)")
    p.add_argument("--workers", type=int, default=20, help="m (%(default)s)")
    p.add_argument("--method", default="dkm", help="partitioning method (%(default)s)")
    p.add_argument("--quick", action="store_true", help="50k/50k, 5 timestamps and a burst of 10")
    add_doc_flags(p)
    return bench_main(p, argv, run)


def run(args: argparse.Namespace) -> Report:
    """Run the engine with the routing summary counting; the report."""
    if args.quick:
        args.objects, args.subscriptions, args.timestamps, args.burst = 50_000, 50_000, 5, 10
    m = args.workers
    spec = WorkloadSpec(o_init=args.objects, subscriptions=args.subscriptions, timestamps=args.timestamps + args.burst)
    say(f"workload {spec} ...")
    objects, events, vocab = paper_workload(spec)
    words = vocab.words
    started = time.perf_counter()
    engine, setup = build_engine(PartitionConfig(method=args.method, workers=m), objects, events,
                                 threads=usable_cores(), routing="count")
    build_s = time.perf_counter() - started
    assert engine.router is not None
    router_bytes, router_keys = engine.router.nbytes, len(engine.router.counts)
    # The summary's own build, timed apart (build_engine's includes the kNN and the plan).
    started = time.perf_counter()
    again = type(engine.router)(engine.space, m)
    for w, worker in enumerate(engine.workers):
        st = worker.state
        rows = st.live_rows()
        again.register(st.sub_id[rows], np.full(rows.shape[0], w), st.x[rows], st.y[rows], st.keywords_of(rows),
                       st.radius2(rows))
    summary_s = time.perf_counter() - started
    del again
    say(f"engine built in {build_s:.0f} s (summary {summary_s:.1f} s, {router_keys:,} keys, "
        f"{router_bytes / 2**20:.0f} MiB)")
    recorder = Recorder(engine.router)
    engine.router = recorder  # type: ignore[assignment]
    captured: dict[int, Any] = {}
    for w, worker in enumerate(engine.workers):
        def process(objs: Objects, probe: Any = None, _w: int = w, _orig: Any = worker.process) -> Any:
            captured[_w] = _orig(objs, probe)
            return captured[_w]
        worker.process = process  # type: ignore[method-assign]

    def step(t: int) -> tuple[Objects, dict[str, Any]]:
        """Run timestamp ``t``; its objects and what each worker got, needed and did."""
        rows = np.flatnonzero(events.t == t)
        e = events.take(rows)
        dels = e.ids[e.op == Op.DELETE]
        del_worker = engine.where(dels)
        ins = e.take(np.flatnonzero(e.op == Op.INSERT)).insertions()
        objs = objects.take(np.flatnonzero(objects.t == t))
        recorder.registered.clear()
        captured.clear()
        route_before = recorder.route_s
        held_before = {w: worker.state.contains(dels) for w, worker in enumerate(engine.workers)}
        engine.step(t, dels, ins, objs)
        ins_ids, ins_worker = recorder.registered[-1] if recorder.registered else (np.zeros(0, np.int64),
                                                                                    np.zeros(0, np.int32))
        order = np.argsort(ins_ids)
        pos = np.searchsorted(ins_ids[order], ins.ids)
        worker_of_ins = ins_worker[order][pos] if ins_ids.shape[0] else np.zeros(0, np.int32)
        return objs, {"dels": dels, "del_worker": del_worker, "ins": ins, "ins_worker": worker_of_ins,
                      "held": held_before, "routed": recorder.last,
                      "needed": {w: captured[w].accepted_ids for w in range(m)},
                      "updated": {w: captured[w].updated_rows for w in range(m)},
                      "route_ms": (recorder.route_s - route_before) * 1e3}

    steps: list[Step] = []
    first = int(objects.t[objects.t > 0].min())
    for t in range(first, first + args.timestamps):
        objs, got = step(t)
        dels, ins = got["dels"], got["ins"]
        all_dels = (np.full(dels.shape[0], t, np.int64), dels, got["del_worker"])
        all_ins = (ins, got["ins_worker"])
        broadcast = payload_bytes(objs, words, [t], all_dels, all_ins) * m
        routed_b = minimum_b = back = 0
        for w in range(m):
            mine_d = got["del_worker"] == w
            own_dels = (all_dels[0][mine_d], dels[mine_d], all_dels[2][mine_d])
            mine_i = np.flatnonzero(got["ins_worker"] == w)
            own_ins = (ins.take(mine_i), got["ins_worker"][mine_i])
            routed_b += payload_bytes(objs.take(np.flatnonzero(got["routed"][:, w])), words, [t], own_dels, own_ins)
            need = np.flatnonzero(np.isin(objs.ids, got["needed"][w]))
            minimum_b += payload_bytes(objs.take(need), words, [t], own_dels, own_ins)
            back += records_bytes(engine.workers[w], w, t, dels[got["held"][w]], ins.ids[mine_i],
                                  got["updated"][w], vocab)
        steps.append(Step(t, len(objs), int(got["routed"].sum()), sum(int(v.shape[0]) for v in got["needed"].values()),
                          broadcast, routed_b, minimum_b, back, got["route_ms"]))
        s = steps[-1]
        say(f"t={t}: objects x m {s.objects * m:,}, routed {s.routed:,}, needed {s.needed:,}; bytes "
            f"{s.bytes_broadcast:,} / {s.bytes_routed:,} / {s.bytes_minimum:,}, back {s.bytes_back:,}")

    # The burst: routed against the summary as it stood at its start, its registrations from
    # their timestamp on, as follow routes a round.
    snapshot = copy.deepcopy(recorder.router)
    b_objs, b_needed, b_ins_t, b_ins_w, b_ins_kw, b_dels = [], [], [], [], [], []
    burst_ts = list(range(first + args.timestamps, first + args.timestamps + args.burst))
    for t in burst_ts:
        objs, got = step(t)
        b_objs.append(objs)
        b_needed.append(got["needed"])
        ins = got["ins"]
        b_ins_t.append(ins.t)
        b_ins_w.append(got["ins_worker"])
        b_ins_kw.append(ins)
        b_dels.append((np.full(got["dels"].shape[0], t, np.int64), got["dels"], got["del_worker"]))
    from dkmsks.core.model import Subscriptions

    burst_objects = Objects.concat(b_objs)
    burst_ins = Subscriptions.concat(b_ins_kw)
    burst_ins_w = np.concatenate(b_ins_w)
    started = time.perf_counter()
    burst_routed = snapshot.route(burst_objects, NewBalls(burst_ins.t, burst_ins_w, burst_ins.keywords))
    burst_route_s = time.perf_counter() - started
    del_all = tuple(np.concatenate([d[i] for d in b_dels]) for i in range(3))
    needed_ids = {w: np.concatenate([n[w] for n in b_needed]) for w in range(m)}
    b_broadcast = payload_bytes(burst_objects, words, burst_ts, del_all, (burst_ins, burst_ins_w)) * m  # type: ignore[arg-type]
    b_routed = b_min = 0
    for w in range(m):
        mine_d = del_all[2] == w
        own_dels = (del_all[0][mine_d], del_all[1][mine_d], del_all[2][mine_d])
        mine_i = np.flatnonzero(burst_ins_w == w)
        own_ins = (burst_ins.take(mine_i), burst_ins_w[mine_i])
        b_routed += payload_bytes(burst_objects.take(np.flatnonzero(burst_routed[:, w])), words, burst_ts, own_dels,
                                  own_ins)
        b_min += payload_bytes(burst_objects.take(np.flatnonzero(np.isin(burst_objects.ids, needed_ids[w]))), words,
                               burst_ts, own_dels, own_ins)
    b_count = {"objects": len(burst_objects) * m, "routed": int(burst_routed.sum()),
               "needed": sum(int(v.shape[0]) for v in needed_ids.values())}
    return Report(SECTION, report(args, steps, setup, build_s, summary_s, router_keys, router_bytes, recorder,
                                  b_count, (b_broadcast, b_routed, b_min), burst_route_s))


def report(args: argparse.Namespace, steps: list[Step], setup: Any, build_s: float, summary_s: float, keys: int,
           nbytes: int, recorder: Recorder, burst: dict[str, int], burst_bytes: tuple[int, int, int],
           burst_route_s: float) -> str:
    """The Markdown section."""
    m = args.workers
    med = {name: median([getattr(s, name) for s in steps]) for name in
           ("objects", "routed", "needed", "bytes_broadcast", "bytes_routed", "bytes_minimum", "bytes_back",
            "route_ms")}
    n_ts = len(steps) + args.burst
    lines = [
        f"Measured at `{git_commit()}` on {describe_machine(machine())}, load average {load_average():.1f}. "
        f"Real Place data, |O_init| = {args.objects:,}, |S| = {args.subscriptions:,}, m = {m}, {args.method}; "
        f"per timestamp 1,000 objects, 100 registrations, 100 deletions. Medians over {len(steps)} "
        f"one-timestamp rounds (one worker per task), then one round of {args.burst} timestamps. Objects and "
        f"bytes do not depend on the machine.",
        "",
        "| per timestamp (median) | broadcast | routed | minimum | routed / minimum | broadcast / minimum |",
        "|---|---|---|---|---|---|",
        f"| objects to the workers | {med['objects'] * m:,.0f} | {med['routed']:,.0f} | {med['needed']:,.0f} | "
        f"{med['routed'] / med['needed']:.2f} | {med['objects'] * m / med['needed']:.2f} |",
        f"| bytes to the workers | {med['bytes_broadcast']:,.0f} | {med['bytes_routed']:,.0f} | "
        f"{med['bytes_minimum']:,.0f} | {med['bytes_routed'] / med['bytes_minimum']:.2f} | "
        f"{med['bytes_broadcast'] / med['bytes_minimum']:.2f} |",
        f"| bytes back (records) | {med['bytes_back']:,.0f} | {med['bytes_back']:,.0f} | — | | |",
        "",
        f"| burst of {args.burst} timestamps (one round) | broadcast | routed | minimum | routed / minimum "
        f"| broadcast / minimum |",
        "|---|---|---|---|---|---|",
        f"| objects to the workers | {burst['objects']:,} | {burst['routed']:,} | {burst['needed']:,} | "
        f"{burst['routed'] / burst['needed']:.2f} | {burst['objects'] / burst['needed']:.2f} |",
        f"| bytes to the workers | {burst_bytes[0]:,} | {burst_bytes[1]:,} | {burst_bytes[2]:,} | "
        f"{burst_bytes[1] / burst_bytes[2]:.2f} | {burst_bytes[0] / burst_bytes[2]:.2f} |",
        "",
        f"The summary: {keys:,} counted keys, {nbytes / 2**20:.0f} MiB; built from the {setup.n_subscriptions:,} "
        f"initial balls in {summary_s:.1f} s; routing a timestamp's objects {med['route_ms']:.1f} ms (median), "
        f"the burst's in {burst_route_s:.2f} s; keeping it current (deletions, registrations, reported balls) "
        f"{recorder.update_s / n_ts * 1e3:.1f} ms a timestamp on average.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
