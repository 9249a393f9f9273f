"""The paper's experiments (§6 of Tsuruoka et al.; docs/design.md §5) on the in-memory engine.

A run is a list of *points*. A point is one method's stream over one workload: the data set,
``|O_init|``, ``|S|``, ``k_max`` and the seed fix the workload (the paper's protocol,
:func:`~dkmsks.core.workload.generate_workload`); ``m``, the method and the main server's
new-subscription estimate (``new_cost``) fix the engine; ``T`` is how many timestamps it runs.

- Figure 7 and Tables 2–3: the default setting over ``T_series`` (≥ 100) timestamps.
- Figures 8, 9, 10: ``m``, ``|S|`` and ``k_max`` varied one at a time over ``T_sweep``
  timestamps; the default value of each sweep is the Figure 7 run cut to its first
  ``T_sweep`` timestamps (the generator is prefix-stable in ``T``, so that is the same stream).

Every finished point is appended to ``results-<dataset>.jsonl`` as one JSON line (per-timestamp
metrics and work counters, the commit, the machine and the date), so an interrupted run keeps
what it measured and a rerun skips the points already there. Points sharing a workload share
its generation, the exact kNN within ``O_init`` and the statistics; points sharing
``(method, m)`` share the partition plan (it does not depend on ``new_cost``).

Times are wall-clock on this machine (``time.perf_counter``); the work counters (pairs tested
per worker, pairs inside the ball) are deterministic (docs/design.md §3 fact 4).
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dkmsks.bench.common import (
    REPO,
    add_workload_flags,
    available_memory_gib,
    dataset_path,
    load_average,
    load_objects,
    say,
)
from dkmsks.bench.paper_points import FIGURES, PaperConfig, Point, Store, point_record
from dkmsks.core.config import PARAMETERS

PARAMETER_BY_NAME = {par.name: par for par in PARAMETERS}


def _plain(value: Any) -> Any:
    """A checked parameter value as stored in a :class:`Point` (enums as their strings)."""
    return getattr(value, "value", value)


# --------------------------------------------------------------------------- measurement
def _peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _metrics_columns(metrics: Sequence[Any]) -> dict[str, list[float | int]]:
    cols: dict[str, list[float | int]] = {k: [] for k in (
        "t", "update", "knn", "insert", "delete", "refresh", "balance", "wall", "work",
        "work_max", "work_min", "min_work", "imbalance")}
    for mt in metrics:
        cols["t"].append(mt.t)
        cols["update"].append(mt.update_time)
        cols["knn"].append(mt.time_knn)
        cols["insert"].append(mt.time_insert)
        cols["delete"].append(mt.time_delete)
        cols["refresh"].append(mt.time_refresh)
        cols["balance"].append(mt.load_balance)
        cols["wall"].append(mt.wall)
        cols["work"].append(mt.work)
        cols["work_max"].append(int(mt.worker_work.max()))
        cols["work_min"].append(int(mt.worker_work.min()))
        cols["min_work"].append(mt.min_work)
        cols["imbalance"].append(mt.work_imbalance)
    return cols


#: Memory a workload's points may take: a base plus this per million subscriptions. A guard
#: with a margin over the peak RSS the records report (``peak_rss_gib``), not a model.
_BASE_GIB, _GIB_PER_MILLION_SUBS = 1.5, 1.2


#: Memory left to the rest of a shared machine: a workload whose guard (above) would leave less
#: available is not started (``--reserve-gib``).
RESERVE_GIB = 4.0


def _need_gib(subs: int) -> float:
    return _BASE_GIB + _GIB_PER_MILLION_SUBS * subs / 1e6


class Runner:
    """Measures the points of a :class:`PaperConfig` not yet in the store."""

    def __init__(self, cfg: PaperConfig, store: Store, *, progress: bool = True,
                 log: Any = None, reserve_gib: float = RESERVE_GIB) -> None:
        self.cfg = cfg
        self.reserve_gib = reserve_gib
        self.store = store
        self.progress = progress
        self.log = log if log is not None else sys.stderr
        self._sources: dict[str, tuple[Any, Any]] = {}

    def say(self, text: str) -> None:
        """A progress line, on stderr and in the log."""
        say(text, self.log)

    def pending(self) -> list[Point]:
        """The planned points not yet measured successfully."""
        return [p for p in self.cfg.plan() if not self.store.done(p)]

    def run(self, points: Sequence[Point] | None = None) -> int:
        """Measure ``points`` (default: every pending one); returns how many were measured."""
        from tqdm import tqdm

        todo = list(self.pending() if points is None else points)
        if not todo:
            self.say("nothing to measure: every point is in the store")
            return 0
        groups: dict[tuple[str, int, int, int, int], list[Point]] = {}
        for p in todo:
            groups.setdefault(p.workload(), []).append(p)
        total = sum(p.est_seconds() for p in todo)
        # Compile the kernels (or load numba's cache) before any timestamp is timed: a run from
        # a source snapshot (bench/paper_full.sh) has no cache, and its first point's first
        # timestamp took 4.5 s instead of ~7 ms.
        from dkmsks.core.warm import warm_up

        warm_up()
        self.say(f"{len(todo)} point(s) in {len(groups)} workload(s) to measure; "
                 f"rough estimate {total / 60:.0f} min")
        n = 0
        with tqdm(total=round(total), unit="est-s", desc="paper bench", disable=not self.progress,
                  file=self.log, dynamic_ncols=True, smoothing=0.1) as bar:
            for key, pts in groups.items():
                for p, rec in self._measure_group(key, pts):
                    self.store.add(rec)
                    n += rec["status"] == "ok"
                    bar.update(round(p.est_seconds()))
        return n

    # A workload: generation, the exact kNN of S within O_init, statistics; then its points.
    def _measure_group(self, key: tuple[str, int, int, int, int],
                       pts: list[Point]) -> Iterator[tuple[Point, dict[str, Any]]]:
        from dkmsks.core.engine import initial_phase
        from dkmsks.core.knn_init import StaticKnnIndex
        from dkmsks.core.model import data_space
        from dkmsks.core.stats import ObjectStatistics
        from dkmsks.core.workload import WorkloadSpec, generate_workload
        from dkmsks.cores import usable_cores

        dataset, o_init_n, subs_n, k_max, seed = key
        need, avail = _need_gib(subs_n), available_memory_gib()
        if need + self.reserve_gib > avail:
            why = (f"needs about {need:.0f} GiB ({_GIB_PER_MILLION_SUBS} GiB per million subscriptions) and "
                   f"{self.reserve_gib:g} GiB left to the machine, but only {avail:.1f} GiB is available")
            self.say(f"skip {dataset} |S|={subs_n:,}: {why}")
            for p in pts:
                yield p, point_record(p, "failed", error=why)
            return
        T = max(p.T for p in pts)
        c0 = time.perf_counter()
        spec = WorkloadSpec(o_init=o_init_n, subscriptions=subs_n, timestamps=T, k_max=k_max, seed=seed)
        source, vocab = self._source(dataset, spec.objects_needed)
        objects, events = generate_workload(source, spec)
        o_init, subs = initial_phase(objects, events)
        space = data_space(o_init, subs)
        n_kw = len(vocab)
        c1 = time.perf_counter()
        knn_index = StaticKnnIndex.build(o_init, n_kw, workers=usable_cores())
        knn = knn_index.query(subs, width=max(int(subs.k.max()), 1))
        c2 = time.perf_counter()
        stats = ObjectStatistics.build(o_init, n_kw, workers=usable_cores())
        c3 = time.perf_counter()
        # ``group`` names this setup: the points of one workload share it (and its seconds), so the
        # machine time of a run counts it once.
        setup = {"workload_s": c1 - c0, "knn_init_s": c2 - c1, "stats_s": c3 - c2,
                 "keywords": n_kw, "objects_in_stream": len(objects) - len(o_init),
                 "group": f"{os.getpid()}-{time.time():.6f}"}
        self.say(f"{dataset}: |O_init|={len(o_init):,} |S|={len(subs):,} k_max={k_max} T={T} "
                 f"({n_kw:,} keywords): workload {c1 - c0:.1f}s, initial kNN {c2 - c1:.1f}s, "
                 f"statistics {c3 - c2:.1f}s")
        plans: dict[tuple[str, int], tuple[Any, float]] = {}
        # the long series first, then by m; variants in the configured order (cheap DkM-SKS first)
        rank: dict[tuple[str, str], int] = {}
        for v in self.cfg.variants_series + self.cfg.variants_sweep:
            rank.setdefault(v, len(rank))
        order = sorted(pts, key=lambda p: (-p.T, p.m, p.run, rank.get((p.method, p.new_cost), 99)))
        for i, p in enumerate(order):
            try:
                rec = self._measure_point(p, plans, setup, space, stats, knn_index, knn, subs,
                                          o_init, objects, events)
            except MemoryError as err:
                rec = point_record(p, "failed", error=f"MemoryError: {err}")
            yield p, rec
            # drop a plan once no later point of this workload needs it
            if not any((q.method, q.m) == (p.method, p.m) for q in order[i + 1:]):
                plans.pop((p.method, p.m), None)
                gc.collect()
        del knn_index, knn, stats, objects, events, subs, o_init
        gc.collect()

    def _source(self, dataset: str, n: int) -> tuple[Any, Any]:
        have = self._sources.get(dataset)
        if have is None or len(have[0]) < n:
            self._sources.clear()
            gc.collect()
            c0 = time.perf_counter()
            have = load_objects(dataset_path(dataset), n)
            self._sources[dataset] = have
            self.say(f"read {len(have[0]):,} {dataset} objects in {time.perf_counter() - c0:.1f}s")
        return have

    def _measure_point(self, p: Point, plans: dict, setup: dict, space, stats, knn_index, knn,
                       subs, o_init, objects, events) -> dict[str, Any]:
        from tqdm import tqdm

        from dkmsks.core.engine import Engine
        from dkmsks.core.model import Op
        from dkmsks.core.partition import MainServer, partition

        load0 = load_average()
        started = time.perf_counter()
        config = p.config()
        cached = plans.get((p.method, p.m))
        if cached is None:
            c0 = time.perf_counter()
            # PS²Stream counts the objects of O_init itself (docs/design.md §2.5).
            plan = partition(config.method, stats, knn, subs, space, objects=o_init, **config.partition_kwargs())
            cached = plans[(p.method, p.m)] = (plan, time.perf_counter() - c0)
        plan, part_s = cached
        c0 = time.perf_counter()
        server = MainServer(plan, stats, knn_index, new_cost=config.new_cost, ps2_new=config.ps2_new)
        server_s = time.perf_counter() - c0
        engine = Engine(p.method, space, p.m, server, clock=time.perf_counter, grid=p.grid)
        c0 = time.perf_counter()
        # SOP's region subsets and PS²Stream's home leaves are the workers' index parts.
        engine.load_initial(subs, knn, plan.worker, groups=plan.subset if p.method in ("sop", "ps2") else None)
        load_s = time.perf_counter() - c0
        # Per worker and timestamp, outside the timed steps: the main server's estimated load
        # (C(w)·|O_init|; PS²Stream's count L(w)), the work and kNN time, the subscriptions held
        # and where the timestamp's new subscriptions went.
        inserted = events.op == Op.INSERT
        per_worker: dict[str, list[list[Any]]] = {"est": [], "work": [], "time": [], "subs": [], "new": []}
        est0 = server.load_weight.tolist()
        subs0 = [len(w) for w in engine.workers]
        loads: list[float] = []
        metrics = []
        worker_total = np.zeros(p.m, dtype=np.int64)
        label = f"{p.dataset} {p.method}/{p.new_cost} m={p.m} |S|={p.subs:,} k_max={p.k_max}"
        with tqdm(total=p.T, unit="ts", desc=label, leave=False, disable=not self.progress,
                  file=self.log, dynamic_ncols=True) as bar:
            for mt in engine.run(objects, events, until=p.T):
                metrics.append(mt)
                worker_total += mt.worker_work
                where = engine.where(events.ids[inserted & (events.t == mt.t)])
                per_worker["est"].append(server.load_weight.tolist())
                per_worker["work"].append(mt.worker_work.tolist())
                per_worker["time"].append(mt.worker_time.tolist())
                per_worker["subs"].append(mt.worker_subs.tolist())
                per_worker["new"].append(np.bincount(where[where >= 0], minlength=p.m).tolist())
                loads.append(load_average())
                bar.set_postfix(ms=f"{1e3 * mt.update_time:.0f}", refresh=False)
                bar.update(1)
        cols = _metrics_columns(metrics)
        rec = point_record(p, "ok")
        rec["setup"] = dict(setup, partition_s=part_s, server_s=server_s, worker_index_s=load_s,
                            subsets=len(plan.subsets))
        rec["ts"] = cols
        rec["worker_work_total"] = worker_total.tolist()
        rec["worker_subs_end"] = metrics[-1].worker_subs.tolist() if metrics else []
        rec["workers"] = dict(per_worker, est0=est0, subs0=subs0)
        rec["load_avg"] = [load0, load_average()]
        rec["load_ts"] = loads
        rec["peak_rss_gib"] = _peak_rss_gib()
        # the point's own seconds (its partition plan when it built one, its engine, its
        # timestamps), beside the workload's shared setup
        rec["elapsed_s"] = time.perf_counter() - started
        upd = np.mean(cols["update"]) if cols["update"] else float("nan")
        self.say(f"{label} T={p.T}: mean update {1e3 * upd:.1f} ms, mean balance "
                 f"{1e3 * np.mean(cols['balance']):.1f} ms, mean work {np.mean(cols['work']):,.0f} "
                 f"(min {np.mean(cols['min_work']):,.0f}); partition {part_s:.1f}s")
        return rec


# --------------------------------------------------------------------------- command line
def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(float(v)) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def _names(text: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in text.split(",") if v.strip())


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line of ``dkm bench paper``."""
    d = PaperConfig()
    q = argparse.ArgumentParser(
        prog="dkm bench paper",
        description=(
            "Runs the paper's protocol (docs/design.md §5) on the real Place data and the Twitter stand-in "
            "for KOP, SOP, DkM-SKS and PS²Stream with the in-memory engine (m simulated workers): update time "
            "over time (Fig. 7), the impact of m (Fig. 8), |S| (Fig. 9) and k_max (Fig. 10), load "
            "balance (Table 2) and the kNN update / insertion / deletion split (Table 3), each with "
            "the deterministic work counters; and the default setting and the m sweep on the Spark "
            "pipeline (dkm run). Every measured point is appended to DIR/results-*.jsonl, so an "
            "interrupted run keeps its points and a rerun skips them. Then writes PNG plots and a "
            "markdown report. bench/paper_full.sh is the full run behind docs/paper-reproduction.md."
        ),
    )
    quick = PaperConfig.quick_config()
    q.add_argument("--quick", action="store_true",
                   help=f"small sizes ({quick.o_init:,} objects, {quick.subs:,} subscriptions, "
                        f"{quick.t_series} timestamps; no Spark)")
    q.add_argument("--out", type=Path, default=None,
                   help="results folder (default .cache/bench/paper, quick: .cache/bench/paper-quick)")
    q.add_argument("--docs", type=Path, default=None,
                   help="markdown report to write "
                        "(default docs/paper-reproduction.md; quick: OUT/paper-reproduction.md)")
    q.add_argument("--img-dir", type=Path, default=None,
                   help="folder for the PNG plots (default docs/img/paper; quick: OUT/img)")
    q.add_argument("--datasets", type=_names, default=d.datasets, help="place,twitter (%(default)s)")
    q.add_argument("--figures", type=_names, default=FIGURES,
                   help="which experiments to measure: tables (Tables 2-3 and the targets at the default "
                        "setting), fig7, ps2long (PS²Stream alone at the default setting over the Figure 7 "
                        "timestamps), fig8, fig9, fig10 (all)")
    add_workload_flags(q, o_init=None, subscriptions=None, workers=None, k_max=None, seed=None,
                       helps={"o_init": f"|O_init| ({d.o_init:,})", "subscriptions": f"|S| default ({d.subs:,})",
                              "workers": f"m default ({d.m})", "k_max": f"k_max default ({d.k_max})",
                              "seed": f"workload seed ({d.seed})"})
    q.add_argument("--t-series", type=int, default=None, help=f"timestamps of Figure 7 and the tables ({d.t_series})")
    q.add_argument("--t-table", type=int, default=None,
                   help="timestamps of the Tables 2-3 points (default: --t-series, i.e. the Figure 7 run)")
    q.add_argument("--series-subs", type=int, default=None,
                   help="|S| of Figure 7 (default: --subscriptions)")
    q.add_argument("--series-subs-twitter", type=int, default=None,
                   help="|S| of Figure 7 on the Twitter stand-in (default: --series-subs)")
    q.add_argument("--table-subs-twitter", type=int, default=None,
                   help="|S| of Tables 2-3 on the Twitter stand-in (default: --subscriptions)")
    q.add_argument("--sweep-subs", type=int, default=None,
                   help="|S| of the m and k_max sweeps (default: --subscriptions)")
    q.add_argument("--t-sweep", type=int, default=None, help=f"timestamps of each sweep point ({d.t_sweep})")
    q.add_argument("--runs", type=int, default=None, help=f"repeats of every engine point ({d.runs})")
    q.add_argument("--ms", type=_ints, default=None, help=f"Figure 8 values of m ({_csv(d.ms)})")
    q.add_argument("--subs-values", type=_ints, default=None, help=f"Figure 9 values of |S| ({_csv(d.subs_values)})")
    q.add_argument("--subs-values-twitter", type=_ints, default=None,
                   help="Figure 9 values of |S| on the Twitter stand-in (default: --subs-values)")
    q.add_argument("--k-values", type=_ints, default=None, help=f"Figure 10 values of k_max ({_csv(d.k_values)})")
    for name in ("ps2_theta", "ps2_rho", "ps2_alpha", "ps2_beta", "ps2_new"):
        par = PARAMETER_BY_NAME[name]
        q.add_argument(par.flag, default=None, help=f"{par.help} ({getattr(d, name)})")
    q.add_argument("--spark", action=argparse.BooleanOptionalAction, default=None,
                   help="also run the Spark pipeline points (default: on, off with --quick)")
    q.add_argument("--spark-o-init", type=int, default=100_000, help="|O_init| of the Spark points (%(default)s)")
    q.add_argument("--spark-subscriptions", type=int, default=100_000, help="|S| of the Spark points (%(default)s)")
    q.add_argument("--spark-timestamps", type=int, default=20, help="timestamps of the Spark points (%(default)s)")
    q.add_argument("--spark-ms", type=_ints, default=(5, 10, 20, 40), help="m values on Spark (%(default)s)")
    q.add_argument("--spark-datasets", type=_names, default=("place",), help="data sets on Spark (%(default)s)")
    q.add_argument("--spark-master", default=None,
                   help="Spark master of the Spark points (default: dkm run's, $DKMSKS_SPARK_MASTER or local[2])")
    q.add_argument("--spark-code", type=Path, default=None,
                   help="run the Spark CLI of this source tree (e.g. a snapshot of a commit) instead of "
                        "the installed one")
    q.add_argument("--report-only", action="store_true", help="measure nothing; rewrite plots and report")
    q.add_argument("--no-older", action="store_true",
                   help="a report section whose experiment has no point in the store fails the report, instead of "
                        "keeping the last measured version of it from the report's git history (marked as older, "
                        "with its commit and dates)")
    q.add_argument("--no-report", action="store_true", help="measure only")
    q.add_argument("--quiet", action="store_true", help="no progress bars")
    q.add_argument("--reserve-gib", type=float, default=RESERVE_GIB,
                   help="memory to leave available to the rest of the machine: a workload whose expected "
                        "peak would leave less is skipped and recorded as failed (%(default)s)")
    return q.parse_args(argv)


def _csv(values: Sequence[int]) -> str:
    return ",".join(str(v) for v in values)


def config_from_args(args: argparse.Namespace) -> PaperConfig:
    """The :class:`PaperConfig` the command line asks for (the full or quick defaults, then the flags)."""
    cfg = PaperConfig.quick_config() if args.quick else PaperConfig()
    over = {
        "datasets": args.datasets, "figures": args.figures, "o_init": args.o_init,
        "subs": args.subscriptions, "m": args.workers, "k_max": args.k_max,
        "t_series": args.t_series, "t_sweep": args.t_sweep, "runs": args.runs, "ms": args.ms,
        "subs_values": args.subs_values, "k_values": args.k_values, "seed": args.seed,
        "t_table": args.t_table, "sweep_subs": args.sweep_subs,
    }
    for name in ("ps2_theta", "ps2_rho", "ps2_alpha", "ps2_beta", "ps2_new"):
        value = getattr(args, name)
        if value is not None:
            over[name] = _plain(PARAMETER_BY_NAME[name].check(value))
    for name, value in over.items():
        if value is not None:
            setattr(cfg, name, value)
    if args.series_subs is not None:
        cfg.series_subs = {ds: args.series_subs for ds in ("place", "twitter")}
    if args.series_subs_twitter is not None:
        cfg.series_subs["twitter"] = args.series_subs_twitter
    if args.table_subs_twitter is not None:
        cfg.table_subs = {"twitter": args.table_subs_twitter}
    if args.subs_values_twitter is not None:
        cfg.subs_values_by_dataset = {"twitter": args.subs_values_twitter}
    bad = [f for f in cfg.figures if f not in FIGURES]
    if bad:
        raise ValueError(f"unknown experiment(s) {', '.join(bad)}; choose among {', '.join(FIGURES)}")
    if cfg.t_series < 1 or cfg.t_sweep < 1 or cfg.runs < 1:
        raise ValueError("--t-series, --t-sweep and --runs must be >= 1")
    return cfg


def main(argv: Sequence[str] | None = None) -> int:
    """``dkm bench paper``: measure the pending points and write the report; the exit status."""
    from dkmsks.bench.paper_spark import SparkConfig, run_spark_points

    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    started = time.perf_counter()
    cfg = config_from_args(args)
    out = args.out or (REPO / ".cache" / "bench" / ("paper-quick" if args.quick else "paper"))
    docs = args.docs or (out / "paper-reproduction.md" if args.quick else REPO / "docs" / "paper-reproduction.md")
    img = args.img_dir or (out / "img" if args.quick else REPO / "docs" / "img" / "paper")
    for ds in cfg.datasets:
        dataset_path(ds, must_exist=True)
    store = Store(out)
    spark_on = args.spark if args.spark is not None else not args.quick
    scfg = SparkConfig(o_init=args.spark_o_init, subs=args.spark_subscriptions,
                       T=args.spark_timestamps, ms=args.spark_ms, default_m=cfg.m,
                       datasets=args.spark_datasets, seed=cfg.seed, k_max=cfg.k_max,
                       code_root=args.spark_code, **({"master": args.spark_master} if args.spark_master else {}))
    if not args.report_only:
        Runner(cfg, store, progress=not args.quiet, reserve_gib=args.reserve_gib).run()
        if spark_on:
            run_spark_points(scfg, store, out, progress=not args.quiet)
    if not args.no_report:
        from dkmsks.bench.paper_report import write_report

        write_report(cfg, store, docs, img, command=" ".join(["dkm", "bench", "paper", *argv]),
                     spark_points=scfg.points() if spark_on else [], history=not args.no_older)
        print(f"wrote {docs} and plots in {img}")
    print(f"done in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0
