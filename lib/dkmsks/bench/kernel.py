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

Usage: ``dkm bench kernel [--timestamps T] [--warmup W] [--quick] [--doc docs/benchmarks.md]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dkmsks.bench.common import REPO, ResultFile, dataset_path, load_average, load_objects, say, write_doc_section
from dkmsks.bench.prose import Prose
from dkmsks.bench.stats import median, percentile, ratio
from dkmsks.core.config import Method, PartitionConfig
from dkmsks.core.engine import Engine, TimestampMetrics, build_engine
from dkmsks.core.model import SubscriptionEvents, results_equal
from dkmsks.core.workload import WorkloadSpec, generate_workload
from dkmsks.cores import usable_cores

prose = Prose.load("kernel")
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
    """``dkm bench kernel``: measure, save ``results.json``, print (and with ``--doc`` write) the section."""
    p = argparse.ArgumentParser(prog="dkm bench kernel", description=__doc__.splitlines()[0])
    p.add_argument("--objects", type=int, default=1_000_000, help="|O_init| (%(default)s)")
    p.add_argument("--subscriptions", type=int, default=1_000_000, help="|S| (%(default)s)")
    p.add_argument("--workers", type=int, default=20, help="m (%(default)s)")
    p.add_argument("--timestamps", type=int, default=40, help="timed timestamps per kernel (%(default)s)")
    p.add_argument("--warmup", type=int, default=5, help="untimed timestamps per kernel first (%(default)s)")
    p.add_argument("--seed", type=int, default=7, help="workload seed (%(default)s)")
    p.add_argument("--quick", action="store_true", help="100k objects, 100k subscriptions, 10 timestamps")
    p.add_argument("--workdir", type=Path, default=REPO / ".cache" / "bench" / "kernel",
                   help="results.json goes here (%(default)s)")
    p.add_argument("--doc", type=Path, default=None, help="write the report section into this Markdown file")
    a = p.parse_args(argv)
    if a.quick:
        a.objects, a.subscriptions, a.timestamps = 100_000, 100_000, 10
    if min(a.objects, a.subscriptions, a.workers, a.timestamps) < 1 or a.warmup < 0:
        p.error("sizes, --workers and --timestamps must be at least 1, --warmup at least 0")
    params = {k: getattr(a, k) for k in ("objects", "subscriptions", "workers", "timestamps", "warmup", "seed")}
    rec = ResultFile(a.workdir / "results.json", params)
    rec.put("load_before", load_average())
    spec = WorkloadSpec(o_init=a.objects, subscriptions=a.subscriptions, timestamps=a.warmup + a.timestamps,
                        objects_per_ts=1_000, inserts_per_ts=100, deletes_per_ts=100, k_max=10, seed=a.seed)
    source, _ = load_objects(dataset_path("place", must_exist=True), spec.objects_needed)
    objects, events = generate_workload(source, spec)
    config = PartitionConfig(method=Method.DKM, workers=a.workers)
    timed, build_s, counters_equal, equal = run_side_by_side(objects, events, config, a.warmup, a.timestamps)
    load_after = load_average()
    ms = {k: {f: [getattr(m, f) * 1e3 for m in timed[k]] for f in TIMES} for k in KERNELS}
    work = {k: [int(m.work) for m in timed[k]] for k in KERNELS}
    rec.put("per_timestamp_ms", ms)
    rec.put("build_s", build_s)
    rec.put("work", work)
    rec.put("checks", {"counters_equal": counters_equal, "results_equal": equal})
    if not (counters_equal and equal):
        say(f"kernel: the kernels disagree (counters equal: {counters_equal}, results equal: {equal})")
        return 1
    rows = "\n".join(
        prose("row", label=label,
              numpy_median=f"{median(ms['numpy'][f]):.2f}", numpy_p95=f"{percentile(ms['numpy'][f], 0.95):.2f}",
              numba_median=f"{median(ms['numba'][f]):.2f}", numba_p95=f"{percentile(ms['numba'][f], 0.95):.2f}",
              ratio=f"{ratio(median(ms['numpy'][f]), median(ms['numba'][f])):.2f}")
        for f, label in TIMES.items())
    d = rec.data
    wall, upd = median(ms["numba"]["wall"]), median(ms["numba"]["update_time"])
    head = prose("head", commit=d["commit"], date=d["date"], machine=d["machine"].get("cpu", ""),
                 nproc=d["machine"]["nproc"], load=f"{d['steps']['load_before']:.1f}", load_after=f"{load_after:.1f}",
                 objects=f"{a.objects:,}", subscriptions=f"{a.subscriptions:,}", workers=a.workers,
                 warmup=a.warmup, timestamps=a.timestamps,
                 build_numpy=f"{build_s['numpy']:.0f}", build_numba=f"{build_s['numba']:.0f}")
    tail = prose("tail", work=f"{median(work['numba']):,.0f}",
                 wall=f"{wall:.1f}", wall_target=f"{TARGET_WALL_MS:.0f}",
                 wall_verdict="met" if wall <= TARGET_WALL_MS else "not met",
                 update=f"{upd:.2f}", update_target=f"{TARGET_UPDATE_MS:.0f}",
                 update_verdict="met" if upd <= TARGET_UPDATE_MS else "not met")
    text = f"{head}\n{rows}\n\n{tail}"
    print(text)
    if a.doc:
        write_doc_section(a.doc, "kernel", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
