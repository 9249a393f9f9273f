"""Benchmark of the in-memory core (the issue's protocol), written to ``docs/benchmarks.md``.

Real Place data as ``O_init`` (``|O_init| = 1M``), ``|S| = 1M`` subscriptions generated the
paper's way (docs/design.md §5), ``m = 20``, ``θ = 20``, ``γ1 = 100,000``, ``γ2 = 20``, ``k_max = 10``;
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
Work counters are deterministic (docs/design.md §3 fact 4), so runs repeat them exactly.

Every method runs with the main server's new-subscription estimate ``--new-cost`` (default
``live``, the ``dkm simulate`` default); ``--extras`` (default on) adds, for one run, DkM-SKS and
SOP with the paper's estimate (``new_cost="paper"``), to show why, and DkM-SKS on the stream
without insertions, to show what imbalance the initial partition alone leaves.

Usage: ``dkm bench core [--quick] [--runs R] [--no-docs]``. ``--quick`` runs small sizes
(50k objects, 50k subscriptions, 5 timestamps, one run) and writes docs only when ``--doc PATH``
is given.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from dkmsks.bench.common import (
    REPO,
    Report,
    add_doc_flags,
    add_quick_flag,
    add_workload_flags,
    bench_main,
    describe_machine,
    git_commit,
    load_average,
    machine,
    paper_workload,
    utc_now,
    workload_spec,
)
from dkmsks.bench.prose import Prose
from dkmsks.bench.stats import median, ratio
from dkmsks.core.engine import Engine, TimestampMetrics, initial_phase
from dkmsks.core.knn_init import StaticKnnIndex
from dkmsks.core.model import Op, data_space
from dkmsks.core.partition import MainServer, partition
from dkmsks.core.stats import ObjectStatistics
from dkmsks.core.worker_index import DEFAULT_GRID
from dkmsks.cores import usable_cores

DOCS = REPO / "docs" / "benchmarks.md"
prose = Prose.load("core")
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
        """The metric ``key`` of every timestamp of the run."""
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
        """The variant's name in the report."""
        name = NAMES[self.method] + ("" if self.new_cost == "live" else f" ({self.new_cost} est.)")
        return name if self.inserts else name + " (no insertions)"

    def ts_median(self, key: str) -> float:
        """Median over runs of the median over timestamps."""
        return median([median(r.per_ts(key)) for r in self.runs])

    def work(self) -> list[int]:
        """The work (pairs tested) of every timestamp of the first run."""
        return [m.work for m in self.runs[0].metrics]

    def imbalance(self) -> list[float]:
        """The work imbalance (max / mean over workers) of every timestamp of the first run."""
        return [m.work_imbalance for m in self.runs[0].metrics]

    def cumulative_imbalance(self) -> float:
        """Max / mean over workers of the work summed over all timestamps (first run)."""
        tot = np.sum([m.worker_work for m in self.runs[0].metrics], axis=0)
        return float(tot.max() / tot.mean()) if tot.size and tot.mean() > 0 else 1.0

    def min_work(self) -> list[int]:
        """The minimum possible work of every timestamp of the first run."""
        return [m.min_work for m in self.runs[0].metrics]


def run_stream(method: str, new_cost: str, space, workers: int, plan, stats, knn_index,
               subs, knn, objects, events, grid: int) -> StreamRun:
    """Load the initial state into an engine with ``method``'s main server and run the stream through it."""
    server = MainServer(plan, stats, knn_index, new_cost=new_cost)
    engine = Engine(method, space, workers, server, clock=time.perf_counter, grid=grid)
    c0 = time.perf_counter()
    groups = plan.subset if method == "sop" else None
    engine.load_initial(subs, knn, plan.worker, groups=groups)
    run = StreamRun(f"{method}/{new_cost}", time.perf_counter() - c0)
    run.metrics = list(engine.run(objects, events))
    return run


def main(argv: Sequence[str] | None = None) -> int:
    """``dkm bench core``: run the benchmark and write its report; the exit status."""
    ap = argparse.ArgumentParser(prog="dkm bench core", description=__doc__.splitlines()[0])
    add_workload_flags(ap, o_init=1_000_000, subscriptions=1_000_000, timestamps=20, k_max=10, seed=7, workers=20,
                       theta=20, gamma1=100_000, gamma2=20, grid=DEFAULT_GRID, new_cost="live")
    ap.add_argument("--runs", type=int, default=3, help="runs of the stream (%(default)s)")
    ap.add_argument("--partition-runs", type=int, default=None,
                    help="runs of the initial phase (default: --runs)")
    ap.add_argument("--extras", action=argparse.BooleanOptionalAction, default=True,
                    help="also run, once: DkM-SKS and SOP with the other estimate, and DkM-SKS "
                         "without insertions (the imbalance left by the initial partition alone)")
    add_quick_flag(ap, "small sizes, one run", o_init=50_000, subscriptions=50_000, timestamps=5, runs=1)
    add_doc_flags(ap, default=DOCS)
    return bench_main(ap, argv, run)


def run(a: argparse.Namespace) -> Report:
    """Measure every variant's initial phase and stream; the report."""
    runs = a.runs
    p_runs = a.partition_runs or runs
    methods = ["kop", "sop", "dkm"]
    other = "paper" if a.new_cost == "live" else "live"

    t_start, load_start = time.perf_counter(), load_average()
    spec = workload_spec(a)
    objects, events, vocab = paper_workload(spec)
    o_init, subs = initial_phase(objects, events)
    space = data_space(o_init, subs)
    n_kw = len(vocab)
    print(f"loaded {len(o_init):,} objects, {len(subs):,} subscriptions, {spec.timestamps} timestamps, "
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
        knn_index = StaticKnnIndex.build(o_init, n_kw, workers=usable_cores())
        knn = knn_index.query(subs, width=max(int(subs.k.max()), 1))
        c1 = time.perf_counter()
        stats = ObjectStatistics.build(o_init, n_kw, workers=usable_cores())
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

    params = {"|O_init|": spec.o_init, "|S|": spec.subscriptions, "timestamps": spec.timestamps, "m": a.workers,
              "θ": a.theta, "γ1": a.gamma1, "γ2": a.gamma2, "k_max": a.k_max, "grid G": a.grid, "seed": a.seed,
              "objects/ts": spec.objects_per_ts, "inserts/ts": spec.inserts_per_ts,
              "deletes/ts": spec.deletes_per_ts, "new-subscription cost": a.new_cost, "runs": runs,
              "partition runs": p_runs}
    text = report(variants, extra, median(knn_s), median(stats_s), params,
                  "dkm bench core" + (" --quick" if a.quick else ""), time.perf_counter() - t_start,
                  (load_start, load_average()))
    return Report("dkm bench core", text)


def fmt_ms(s: float) -> str:
    """Seconds as milliseconds with one decimal."""
    return f"{1e3 * s:.1f}"


def _row(*cells: object) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def report(variants: list[Variant], extra: list[Variant], knn_s: float, stats_s: float, params: dict,
           command: str, elapsed: float, loads: tuple[float, float]) -> str:
    """The markdown report of the measured variants."""
    mach = machine()
    by = {v.method: v for v in variants}
    methods = ("kop", "sop", "dkm")
    out = [prose("head", command=command, commit=git_commit(), date=utc_now(), minutes=f"{elapsed / 60:.1f}",
                 machine=describe_machine(mach), cores=mach["nproc"], load_start=f"{loads[0]:.1f}",
                 load_end=f"{loads[1]:.1f}",
                 parameters=", ".join(f"{k} = {v:,}" if isinstance(v, int) else f"{k} = {v}"
                                      for k, v in params.items()))]
    part = {m: median(by[m].partition_s) for m in methods}
    load = {m: median([r.load_s for r in by[m].runs]) for m in methods}
    total = {"kop": stats_s + part["kop"], "sop": knn_s + stats_s + part["sop"], "dkm": knn_s + stats_s + part["dkm"]}
    out.append("\n".join([
        "| step | KOP | SOP | DkM-SKS |", "|---|---:|---:|---:|",
        _row("initial kNN in O_init (index build + query; KOP needs none)", "–", f"{knn_s:.2f}", f"{knn_s:.2f}"),
        _row("O_init statistics", *[f"{stats_s:.2f}"] * 3),
        _row("partition (Alg. 1 / quadtree + Alg. 1 / Alg. 2 + 3) + main server", *[f"{part[m]:.2f}" for m in methods]),
        _row("worker indexes (m workers)", *[f"{load[m]:.2f}" for m in methods]),
        _row("**partition phase total** (kNN + statistics + partition)", *[f"**{total[m]:.2f}**" for m in methods])]))
    out.append(prose("per_timestamp"))
    rows = ["| method | update | kNN update | insertion | deletion | refresh | 1 process | "
            "work | min work | work / min | max/mean | Σ max/mean |", "|---|" + "---:|" * 11]
    for v in variants + extra:
        w = median([float(x) for x in v.work()])
        mw = median([float(x) for x in v.min_work()])
        imb = v.imbalance()
        rows.append(_row(v.label, fmt_ms(v.ts_median("update_time")), fmt_ms(v.ts_median("time_knn")),
                         fmt_ms(v.ts_median("time_insert")), fmt_ms(v.ts_median("time_delete")),
                         fmt_ms(v.ts_median("time_refresh")), fmt_ms(v.ts_median("wall")), f"{w:,.0f}",
                         f"{mw:,.0f}", f"{ratio(w, mw):.1f}", f"{median(imb):.2f} ({max(imb):.2f})",
                         f"{v.cumulative_imbalance():.3f}"))
    out.append("\n".join(rows))
    if extra:
        other = "paper" if params["new-subscription cost"] == "live" else "live"
        out.append(prose("extras", other=other, new_cost=params["new-subscription cost"],
                         inserts_per_ts=params["inserts/ts"]))
    d = by["dkm"]
    ratios = {m: (ratio(sum(d.work()), sum(by[m].work())),
                  ratio(d.ts_median("update_time"), by[m].ts_median("update_time")),
                  ratio(d.ts_median("wall"), by[m].ts_median("wall")),
                  ratio(median(d.imbalance()), median(by[m].imbalance())))
              for m in ("kop", "sop")}
    out.append(prose("ratios") + "\n\n" + "\n".join(
        ["| ratio | vs KOP | vs SOP |", "|---|---:|---:|"]
        + [_row(name, f"{ratios['kop'][i]:.4g}", f"{ratios['sop'][i]:.4g}")
           for i, name in enumerate(("total work", "update time", "1-process time", "work max/mean"))]))
    ts = [m.t for m in d.runs[0].metrics]
    rows = ["| t | " + " | ".join(f"{v.label} work | max/mean" for v in variants + extra) + " | min work |",
            "|---:|" + "---:|---:|" * len(variants + extra) + "---:|"]
    for i, t in enumerate(ts):
        cells = [c for v in variants + extra for c in (f"{v.runs[0].metrics[i].work:,}",
                                                       f"{v.runs[0].metrics[i].work_imbalance:.2f}")]
        rows.append(_row(t, *cells, f"{d.runs[0].metrics[i].min_work:,}"))
    out.append(prose("per_timestamp_work") + "\n\n" + "\n".join(rows))
    upd_wall = d.ts_median("wall")
    imb = d.imbalance()
    work_ratio = ratios["kop"][0]
    out.append("\n".join([
        prose("targets"),
        prose("target.partition", status=prose.status(total["dkm"] <= TARGET_PARTITION_S),
              limit=f"{TARGET_PARTITION_S / 60:g} min", total=f"{total['dkm']:.1f}", knn=f"{knn_s:.1f}",
              stats=f"{stats_s:.1f}", partition=f"{part['dkm']:.1f}", indexes=f"{load['dkm']:.1f}"),
        prose("target.update", status=prose.status(upd_wall <= TARGET_UPDATE_S), limit=f"{TARGET_UPDATE_S:g} s",
              median=f"{1e3 * upd_wall:.0f}", m=params["m"],
              worst=f"{1e3 * max(max(r.per_ts('wall')) for r in d.runs):.0f}"),
        prose("target.work", status=prose.status(work_ratio <= TARGET_WORK_RATIO),
              inverse_limit=f"{1 / TARGET_WORK_RATIO:,.0f}", ratio=f"{work_ratio:.2e}", T=len(ts),
              inverse=f"{1 / work_ratio:,.0f}"),
        prose("target.imbalance", status=prose.status(median(imb) <= TARGET_IMBALANCE), limit=f"{TARGET_IMBALANCE:g}",
              median=f"{median(imb):.2f}", worst=f"{max(imb):.2f}", within=sum(x <= TARGET_IMBALANCE for x in imb),
              T=len(imb))]))
    return "\n\n".join(out)
