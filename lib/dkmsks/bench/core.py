"""Benchmark of the in-memory core (the issue's protocol), written to ``docs/benchmarks.md``.

Real Place data as ``O_init`` (``|O_init| = 1M``), ``|S| = 1M`` subscriptions generated the
paper's way (DESIGN §5), ``m = 20``, ``θ = 20``, ``γ1 = 100,000``, ``γ2 = 20``, ``k_max = 10``;
then per timestamp 1,000 new objects, 100 insertions and 100 deletions, ``T = 20`` timestamps.

Per run (median of ``--runs`` runs; the partition phase ``--partition-runs`` times):

- initial kNN: :class:`StaticKnnIndex` build + the exact kNN of every initial subscription;
- ``O_init`` statistics, then ``partition()`` + :class:`MainServer` per method (KOP, SOP,
  DkM-SKS), then the workers' indexes (``Engine.load_initial``);
- the stream per method with the in-memory engine: per timestamp the update time (kNN update
  = slowest of the ``m`` simulated workers, insertion, deletion, cost refresh) and the
  sequential single-process time of the whole timestamp, the work (pairs tested, max/mean over
  workers) and the minimum possible work (pairs whose object lies in the ball).

Per-timestamp numbers are the median over the timestamps of a run, then the median over runs.
Work counters are deterministic (DESIGN §3 fact 4), so runs repeat them exactly.

Every method runs with the main server's new-subscription estimate ``--new-cost`` (default
``live``, the ``dkm simulate`` default); ``--extras`` (default on) adds, for one run, DkM-SKS and
SOP with the paper's estimate (``new_cost="paper"``), to show why, and DkM-SKS on the stream
without insertions, to show what imbalance the initial partition alone leaves.

Usage: ``dkm bench core [--quick] [--runs R] [--no-docs]``. ``--quick`` runs small sizes
(50k objects, 50k subscriptions, 5 timestamps, one run) and writes docs only when ``--docs PATH``
is given.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dkmsks.bench.common import REPO, dataset_path, describe_machine, git_commit, load_objects, machine, utc_now, \
    write_doc_section
from dkmsks.bench.stats import median
from dkmsks.core.engine import Engine, TimestampMetrics, initial_phase
from dkmsks.core.knn_init import StaticKnnIndex
from dkmsks.core.model import Op, data_space
from dkmsks.core.partition import MainServer, partition
from dkmsks.core.stats import ObjectStatistics
from dkmsks.core.worker_index import DEFAULT_GRID
from dkmsks.core.workload import WorkloadSpec, generate_workload

DOCS = REPO / "docs" / "benchmarks.md"
NAMES = {"kop": "KOP", "sop": "SOP", "dkm": "DkM-SKS"}

# Issue targets.
TARGET_PARTITION_S = 120.0
TARGET_UPDATE_S = 0.5
TARGET_WORK_RATIO = 1 / 100
TARGET_IMBALANCE = 1.2


@dataclass
class StreamRun:
    """One method's stream in one run."""

    label: str
    load_s: float
    metrics: list[TimestampMetrics] = field(default_factory=list)

    def per_ts(self, key: str) -> list[float]:
        return [float(m.as_dict()[key]) for m in self.metrics]


@dataclass
class Variant:
    """A (method, new-cost) pair and everything measured for it over the runs."""

    method: str
    new_cost: str
    inserts: bool = True
    partition_s: list[float] = field(default_factory=list)
    runs: list[StreamRun] = field(default_factory=list)

    @property
    def label(self) -> str:
        name = NAMES[self.method] + ("" if self.new_cost == "live" else f" ({self.new_cost} est.)")
        return name if self.inserts else name + " (no insertions)"

    def ts_median(self, key: str) -> float:
        """Median over runs of the median over timestamps."""
        return median([median(r.per_ts(key)) for r in self.runs])

    def work(self) -> list[int]:
        return [m.work for m in self.runs[0].metrics]

    def imbalance(self) -> list[float]:
        return [m.work_imbalance for m in self.runs[0].metrics]

    def cumulative_imbalance(self) -> float:
        """Max / mean over workers of the work summed over all timestamps (first run)."""
        tot = np.sum([m.worker_work for m in self.runs[0].metrics], axis=0)
        return float(tot.max() / tot.mean()) if tot.size and tot.mean() > 0 else 1.0

    def min_work(self) -> list[int]:
        return [m.min_work for m in self.runs[0].metrics]


def run_stream(method: str, new_cost: str, space, workers: int, plan, stats, knn_index,
               subs, knn, objects, events, grid: int) -> StreamRun:
    server = MainServer(plan, stats, knn_index, new_cost=new_cost)
    engine = Engine(method, space, workers, server, clock=time.perf_counter, grid=grid)
    c0 = time.perf_counter()
    groups = plan.subset if method == "sop" else None
    engine.load_initial(subs, knn, plan.worker, groups=groups)
    run = StreamRun(f"{method}/{new_cost}", time.perf_counter() - c0)
    run.metrics = list(engine.run(objects, events))
    return run


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="dkm bench core", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, one run (< 2 min)")
    ap.add_argument("--objects", type=int, default=None, help="|O_init| (1,000,000; quick 50,000)")
    ap.add_argument("--subscriptions", type=int, default=None, help="|S| (1,000,000; quick 50,000)")
    ap.add_argument("--timestamps", type=int, default=None, help="T (20; quick 5)")
    ap.add_argument("--runs", type=int, default=None, help="runs of the stream (3; quick 1)")
    ap.add_argument("--partition-runs", type=int, default=None,
                    help="runs of the initial phase (default: --runs)")
    ap.add_argument("--workers", type=int, default=20)
    ap.add_argument("--theta", type=int, default=20)
    ap.add_argument("--gamma1", type=int, default=100_000)
    ap.add_argument("--gamma2", type=int, default=20)
    ap.add_argument("--k-max", type=int, default=10)
    ap.add_argument("--grid", type=int, default=DEFAULT_GRID)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--new-cost", choices=("paper", "live"), default="live")
    ap.add_argument("--extras", action=argparse.BooleanOptionalAction, default=True,
                    help="also run, once: DkM-SKS and SOP with the other estimate, and DkM-SKS "
                         "without insertions (the imbalance left by the initial partition alone)")
    ap.add_argument("--docs", type=Path, default=None,
                    help=f"markdown file to write the section into (default {DOCS.relative_to(REPO)}; "
                         "quick: none)")
    ap.add_argument("--no-docs", action="store_true")
    a = ap.parse_args(argv)
    n_obj = a.objects or (50_000 if a.quick else 1_000_000)
    n_sub = a.subscriptions or (50_000 if a.quick else 1_000_000)
    T = a.timestamps or (5 if a.quick else 20)
    runs = a.runs or (1 if a.quick else 3)
    p_runs = a.partition_runs or runs
    docs = None if a.no_docs else (a.docs or (None if a.quick else DOCS))
    methods = ["kop", "sop", "dkm"]
    other = "paper" if a.new_cost == "live" else "live"

    t_start = time.perf_counter()
    source, vocab = load_objects(dataset_path("place", must_exist=True), n_obj + T * 1000)
    objects, events = generate_workload(source, WorkloadSpec(
        o_init=n_obj, subscriptions=n_sub, timestamps=T, k_max=a.k_max, seed=a.seed))
    o_init, subs = initial_phase(objects, events)
    space = data_space(o_init, subs)
    n_kw = len(vocab)
    print(f"loaded {len(o_init):,} objects, {len(subs):,} subscriptions, {T} timestamps, "
          f"{n_kw:,} keywords in {time.perf_counter() - t_start:.1f}s", flush=True)

    variants = [Variant(m, a.new_cost) for m in methods]
    extra = ([Variant(m, other) for m in ("dkm", "sop")] + [Variant("dkm", a.new_cost, inserts=False)]
             if a.extras else [])
    # The same stream without insertions (and without deletions of never-inserted ids).
    no_ins = events.take(np.flatnonzero((events.t <= 0) | ((events.op == Op.DELETE)
                                                            & np.isin(events.ids, subs.ids))))
    knn_s: list[float] = []
    stats_s: list[float] = []
    for r in range(max(runs, p_runs)):
        do_part = r < p_runs
        c0 = time.perf_counter()
        knn_index = StaticKnnIndex.build(o_init, n_kw)
        knn = knn_index.query(subs, width=max(int(subs.k.max()), 1))
        c1 = time.perf_counter()
        stats = ObjectStatistics.build(o_init, n_kw)
        c2 = time.perf_counter()
        if do_part:
            knn_s.append(c1 - c0)
            stats_s.append(c2 - c1)
        print(f"run {r + 1}: initial kNN {c1 - c0:.2f}s, statistics {c2 - c1:.2f}s", flush=True)
        for v in variants + (extra if r == 0 else []):
            c0 = time.perf_counter()
            plan = partition(v.method, stats, knn, subs, space, m=a.workers, theta=a.theta,
                             gamma1=a.gamma1, gamma2=a.gamma2)
            MainServer(plan, stats, knn_index, new_cost=v.new_cost)
            tp = time.perf_counter() - c0
            if do_part and v in variants:
                v.partition_s.append(tp)
            if r < runs:
                sr = run_stream(v.method, v.new_cost, space, a.workers, plan, stats, knn_index,
                                subs, knn, objects, events if v.inserts else no_ins, a.grid)
                v.runs.append(sr)
                print(f"  {v.label}: partition {tp:.2f}s, worker indexes {sr.load_s:.2f}s, "
                      f"update median {1e3 * median(sr.per_ts('update_time')):.1f} ms, "
                      f"work median {median(sr.per_ts('work')):,.0f}, "
                      f"max/mean median {median(sr.per_ts('work_imbalance')):.2f}", flush=True)
            del plan
        del knn_index, knn, stats

    params = {"|O_init|": n_obj, "|S|": n_sub, "timestamps": T, "m": a.workers, "θ": a.theta,
              "γ1": a.gamma1, "γ2": a.gamma2, "k_max": a.k_max, "grid G": a.grid, "seed": a.seed,
              "objects/ts": 1000, "inserts/ts": 100, "deletes/ts": 100,
              "new-subscription cost": a.new_cost, "runs": runs, "partition runs": p_runs}
    text = report(variants, extra, median(knn_s), median(stats_s), params, a.quick,
                  time.perf_counter() - t_start)
    print(text)
    if docs is not None:
        write_doc_section(docs, "core", text)
        print(f"wrote {docs}")
    return 0


def fmt_ms(s: float) -> str:
    return f"{1e3 * s:.1f}"


def report(variants: list[Variant], extra: list[Variant], knn_s: float, stats_s: float,
           params: dict, quick: bool, elapsed: float) -> str:
    by = {v.method: v for v in variants}
    out: list[str] = []
    out.append("## Core (in-memory engine)")
    out.append("")
    out.append("Generated by `dkm bench core" + (" --quick" if quick else "")
               + f"` at commit `{git_commit()}` on {utc_now()} (took {elapsed / 60:.1f} min).")
    out.append("")
    out.append(f"Machine: {describe_machine(machine())}. Shared with other work, so "
               "wall times carry some noise; work counters do not.")
    out.append("")
    out.append("Parameters: " + ", ".join(f"{k} = {v:,}" if isinstance(v, int) else f"{k} = {v}"
                                          for k, v in params.items()) + ".")
    out.append("Real Place data (first |O_init| objects in stream order), subscriptions by the "
               "paper's protocol (DESIGN §5). Times are medians over runs; per-timestamp "
               "values are first the median over the timestamps of a run.")
    out.append("")
    out.append("### Initial phase (seconds)")
    out.append("")
    out.append("| step | KOP | SOP | DkM-SKS |")
    out.append("|---|---:|---:|---:|")
    out.append(f"| initial kNN in O_init (index build + query; KOP needs none) | – | {knn_s:.2f} | {knn_s:.2f} |")
    out.append(f"| O_init statistics | {stats_s:.2f} | {stats_s:.2f} | {stats_s:.2f} |")
    part = {m: median(by[m].partition_s) for m in by}
    out.append("| partition (Alg. 1 / quadtree + Alg. 1 / Alg. 2 + 3) + main server | "
               + " | ".join(f"{part[m]:.2f}" for m in ("kop", "sop", "dkm")) + " |")
    load = {m: median([r.load_s for r in by[m].runs]) for m in by}
    out.append("| worker indexes (m workers) | " + " | ".join(f"{load[m]:.2f}" for m in ("kop", "sop", "dkm")) + " |")
    total = {"kop": stats_s + part["kop"], "sop": knn_s + stats_s + part["sop"],
             "dkm": knn_s + stats_s + part["dkm"]}
    out.append("| **partition phase total** (kNN + statistics + partition) | "
               + " | ".join(f"**{total[m]:.2f}**" for m in ("kop", "sop", "dkm")) + " |")
    out.append("")
    out.append("### Per timestamp (milliseconds; work in object–subscription pairs)")
    out.append("")
    out.append("`update` = kNN update (slowest of the m simulated workers, as if parallel) + "
               "insertion + deletion + cost refresh; `1 process` = the whole timestamp with the "
               "m workers one after another in one process. `work` = pairs tested by all workers; "
               "`min work` = pairs whose object lies in the ball (every index must test them); "
               "`max/mean` = worker work imbalance (median over timestamps, worst in brackets); "
               "`Σ max/mean` = the same for each worker's work summed over all timestamps "
               "(per-timestamp noise of where the new objects fall averages out there, a "
               "systematic load error does not).")
    out.append("")
    out.append("| method | update | kNN update | insertion | deletion | refresh | 1 process | "
               "work | min work | work / min | max/mean | Σ max/mean |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for v in variants + extra:
        w = median([float(x) for x in v.work()])
        mw = median([float(x) for x in v.min_work()])
        imb = v.imbalance()
        out.append(
            f"| {v.label} | {fmt_ms(v.ts_median('update_time'))} | {fmt_ms(v.ts_median('time_knn'))} | "
            f"{fmt_ms(v.ts_median('time_insert'))} | {fmt_ms(v.ts_median('time_delete'))} | "
            f"{fmt_ms(v.ts_median('time_refresh'))} | {fmt_ms(v.ts_median('wall'))} | {w:,.0f} | "
            f"{mw:,.0f} | {w / mw if mw else float('nan'):.1f} | {median(imb):.2f} ({max(imb):.2f}) | "
            f"{v.cumulative_imbalance():.3f} |")
    out.append("")
    if extra:
        out.append(f"Rows marked \"paper est.\" ran once with `new_cost=\"paper\"`; the others with "
                   f"`new_cost=\"{params['new-subscription cost']}\"`. \"No insertions\" ran once on the "
                   "same stream without the 100 insertions per timestamp: the imbalance that the "
                   "initial partition (Algorithm 3 balancing estimated cost, not work) leaves.")
        out.append("")
    # Ratios, measured in the same runs.
    d = by["dkm"]
    dw = float(sum(d.work()))
    out.append("### DkM-SKS relative to KOP and SOP (same runs)")
    out.append("")
    out.append("| ratio | vs KOP | vs SOP |")
    out.append("|---|---:|---:|")
    ratios = {}
    for m in ("kop", "sop"):
        ratios[m] = (
            dw / float(sum(by[m].work())),
            d.ts_median("update_time") / by[m].ts_median("update_time"),
            d.ts_median("wall") / by[m].ts_median("wall"),
            median(d.imbalance()) / median(by[m].imbalance()),
        )
    names = ["total work", "update time", "1-process time", "work max/mean"]
    for i, nm in enumerate(names):
        out.append(f"| {nm} | {ratios['kop'][i]:.4g} | {ratios['sop'][i]:.4g} |")
    out.append("")
    out.append("Per timestamp (first run): work and max/mean per method.")
    out.append("")
    ts = [m.t for m in d.runs[0].metrics]
    out.append("| t | " + " | ".join(f"{v.label} work | max/mean" for v in variants + extra) + " | min work |")
    out.append("|---:|" + "---:|---:|" * len(variants + extra) + "---:|")
    for i, t in enumerate(ts):
        cells = []
        for v in variants + extra:
            mt = v.runs[0].metrics[i]
            cells.append(f"{mt.work:,} | {mt.work_imbalance:.2f}")
        out.append(f"| {t} | " + " | ".join(cells) + f" | {d.runs[0].metrics[i].min_work:,} |")
    out.append("")
    # Targets.
    out.append("### Issue targets")
    out.append("")
    upd_wall = d.ts_median("wall")
    imb = d.imbalance()
    rows = [
        ("DkM-SKS partition phase (initial kNN included) ≤ 2 min", total["dkm"] <= TARGET_PARTITION_S,
         f"{total['dkm']:.1f} s (kNN {knn_s:.1f} + statistics {stats_s:.1f} + partition {part['dkm']:.1f}); "
         f"worker indexes another {load['dkm']:.1f} s"),
        ("DkM-SKS per-timestamp update ≤ 0.5 s single-process", upd_wall <= TARGET_UPDATE_S,
         f"{1e3 * upd_wall:.0f} ms for the whole timestamp with all {params['m']} workers in one "
         f"process (median; worst {1e3 * max(max(r.per_ts('wall')) for r in d.runs):.0f} ms)"),
        ("DkM-SKS work ≤ 1/100 of KOP's", ratios["kop"][0] <= TARGET_WORK_RATIO,
         f"{ratios['kop'][0]:.2e} of KOP's total work over the {len(ts)} timestamps "
         f"(1/{1 / ratios['kop'][0]:,.0f})"),
        ("DkM-SKS max/mean worker work ≤ 1.2", median(imb) <= TARGET_IMBALANCE,
         f"median {median(imb):.2f} over timestamps, worst {max(imb):.2f}, "
         f"{sum(x <= TARGET_IMBALANCE for x in imb)}/{len(imb)} timestamps ≤ 1.2"),
    ]
    out.append("| target | status | measured |")
    out.append("|---|---|---|")
    for name, ok, msg in rows:
        out.append(f"| {name} | {'met' if ok else '**not met**'} | {msg} |")
    out.append("")
    return "\n".join(out)
