"""Benchmark of the worker kernels: the numba kernels against the numpy reference, side by side.

The setting of issue 18 (the paper's defaults at |S| = 1M): real Place data, ``|O_init| = 1M``,
``|S| = 1M`` generated the paper's way, ``m = 20``, DkM-SKS, ``k_max = 10``, then per timestamp
1,000 new objects, 100 insertions and 100 deletions. One in-memory engine per kernel is built
from the same initial phase; after ``--warmup`` timestamps each, the timestamps are run
alternately (numpy, then numba, the same timestamp) so that load changes hit both alike.

Reported per kernel, as medians (and p95) over the timed timestamps: the whole timestamp in one
process (every worker one after another, the main server's parts included), the paper's update
time (slowest worker's kNN update + insertion + deletion + the main server's cost refresh) and
its parts, and the work. The two engines' results must be byte-identical at the end and their
work counters equal at every timestamp; the benchmark fails otherwise.

Usage: ``.venv/bin/python bench/kernel.py [--timestamps T] [--warmup W] [--quick] [--doc docs/benchmarks.md]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dkmsks.bench.common import (
    REPO,
    Refused,
    Report,
    ResultFile,
    add_doc_flags,
    add_quick_flag,
    add_workload_flags,
    bench_main,
    load_average,
    paper_workload,
    say,
    workload_spec,
)
from dkmsks.bench.prose import Prose
from dkmsks.bench.stats import median, percentile, ratio
from dkmsks.core.config import Method, PartitionConfig
from dkmsks.core.engine import Engine, TimestampMetrics, build_engine
from dkmsks.core.model import SubscriptionEvents, results_equal
from dkmsks.cores import usable_cores

HERE = Path(__file__).resolve().parent
prose = Prose.read(HERE / "templates" / "kernel.md")
SECTION = "bench/kernel.py"
KERNELS = ("numpy", "numba")
#: What is reported per timestamp, in milliseconds: the metric's field and its label.
TIMES = {"wall": "whole timestamp, one process", "update_time": "update time (paper's metric)",
         "time_knn": "kNN update (slowest worker)", "time_insert": "insertion",
         "time_delete": "deletion", "time_refresh": "cost refresh (main server)"}
TARGET_WALL_MS = 20.0
TARGET_UPDATE_MS = 3.0


def run_side_by_side(
    objects: object, events: SubscriptionEvents, config: PartitionConfig, warmup: int, timestamps: int
) -> tuple[dict[str, list[TimestampMetrics]], dict[str, float], bool, bool]:
    """Build one engine per kernel, warm both up, then run the timed timestamps alternately.

    Returns the timed metrics per kernel, each engine's build time, whether the work counters
    agreed at every timestamp and whether the final results are byte-identical."""
    engines: dict[str, Engine] = {}
    build_s: dict[str, float] = {}
    for k in KERNELS:
        say(f"kernel {k}: initial phase, plan and workers ...")
        c0 = time.perf_counter()
        engines[k], _ = build_engine(config, objects, events, threads=usable_cores(), clock=time.perf_counter, kernel=k)  # type: ignore[arg-type]
        build_s[k] = time.perf_counter() - c0
        list(engines[k].run(objects, events, until=config.t0 + warmup))  # type: ignore[arg-type]
    timed: dict[str, list[TimestampMetrics]] = {k: [] for k in KERNELS}
    counters_equal = True
    for t in range(config.t0 + warmup + 1, config.t0 + warmup + timestamps + 1):
        for k in KERNELS:
            timed[k].extend(engines[k].run(objects, events, until=t))  # type: ignore[arg-type]
        a, b = (timed[k][-1] for k in KERNELS)
        counters_equal &= bool(np.array_equal(a.worker_work, b.worker_work)
                               and np.array_equal(a.worker_accepted, b.worker_accepted))
        if (t - config.t0 - warmup) % 10 == 0:
            say(f"t={t}: " + ", ".join(f"{k} {timed[k][-1].wall * 1e3:.1f} ms" for k in KERNELS))
    return timed, build_s, counters_equal, results_equal(*(e.results() for e in engines.values()))


def main(argv: Sequence[str] | None = None) -> int:
    """``bench/kernel.py``: measure, save ``results.json``, print (and with ``--doc`` write) the section."""
    p = argparse.ArgumentParser(prog="bench/kernel.py", description=__doc__.splitlines()[0])
    add_workload_flags(p, o_init=1_000_000, subscriptions=1_000_000, timestamps=40, seed=7, workers=20,
                       helps={"timestamps": "timed timestamps per kernel"})
    p.add_argument("--warmup", type=int, default=5, help="untimed timestamps per kernel first (%(default)s)")
    p.add_argument("--workdir", type=Path, default=REPO / ".cache" / "bench" / "kernel",
                   help="results.json goes here (%(default)s)")
    add_quick_flag(p, "100k objects, 100k subscriptions, 10 timestamps", o_init=100_000, subscriptions=100_000,
                   timestamps=10)
    add_doc_flags(p)
    return bench_main(p, argv, run)


def run(a: argparse.Namespace) -> Report:
    """Both kernels side by side on the same workload; the report, or why they disagree."""
    if min(a.o_init, a.subscriptions, a.workers, a.timestamps) < 1 or a.warmup < 0:
        raise Refused("sizes, --workers and --timestamps must be at least 1, --warmup at least 0")
    params = {k: getattr(a, k) for k in ("o_init", "subscriptions", "workers", "timestamps", "warmup", "seed")}
    rec = ResultFile(a.workdir / "results.json", params)
    rec.put("load_before", load_average())
    objects, events, _ = paper_workload(workload_spec(a, timestamps=a.warmup + a.timestamps))
    config = PartitionConfig(method=Method.DKM, workers=a.workers)
    timed, build_s, counters_equal, equal = run_side_by_side(objects, events, config, a.warmup, a.timestamps)
    rec.put("load_after", load_average())
    ms = {k: {f: [getattr(m, f) * 1e3 for m in timed[k]] for f in TIMES} for k in KERNELS}
    work = {k: [int(m.work) for m in timed[k]] for k in KERNELS}
    rec.put("per_timestamp_ms", ms)
    rec.put("build_s", build_s)
    rec.put("work", work)
    rec.put("checks", {"counters_equal": counters_equal, "results_equal": equal})
    if not (counters_equal and equal):
        return Report(SECTION, "", f"the kernels disagree (counters equal: {counters_equal}, results equal: {equal})")
    rows = "\n".join(
        prose("row", label=label,
              numpy_median=f"{median(ms['numpy'][f]):.2f}", numpy_p95=f"{percentile(ms['numpy'][f], 0.95):.2f}",
              numba_median=f"{median(ms['numba'][f]):.2f}", numba_p95=f"{percentile(ms['numba'][f], 0.95):.2f}",
              ratio=f"{ratio(median(ms['numpy'][f]), median(ms['numba'][f])):.2f}")
        for f, label in TIMES.items())
    wall, upd = median(ms["numba"]["wall"]), median(ms["numba"]["update_time"])
    head = prose("head", **rec.head(), objects=f"{a.o_init:,}", subscriptions=f"{a.subscriptions:,}",
                 workers=a.workers, warmup=a.warmup, timestamps=a.timestamps,
                 build_numpy=f"{build_s['numpy']:.0f}", build_numba=f"{build_s['numba']:.0f}")
    tail = prose("tail", work=f"{median(work['numba']):,.0f}", wall=f"{wall:.1f}",
                 wall_target=f"{TARGET_WALL_MS:.0f}", wall_verdict=prose.status(wall <= TARGET_WALL_MS),
                 update=f"{upd:.2f}", update_target=f"{TARGET_UPDATE_MS:.0f}",
                 update_verdict=prose.status(upd <= TARGET_UPDATE_MS))
    return Report(SECTION, f"{head}\n{rows}\n\n{tail}")


if __name__ == "__main__":
    sys.exit(main())
