"""Benchmark of the DkM-SKS grid's layouts (which pyramid levels, how many cells a ball), side by side.

The setting of issue 18 at |S| = 1M: real Place data, ``|O_init| = 1M``, ``|S| = 1M``
generated the paper's way, ``m = 20``, DkM-SKS, ``k_max = 10``, then per timestamp 1,000
objects, 100 insertions and 100 deletions. One in-memory engine per layout is built from the
same initial phase (the plan and the main server are the same; only the workers' grid index
differs) and, after ``--warmup`` timestamps each, the timestamps run alternately (every layout
the same timestamp before the next), so that load changes hit all alike.

A layout is ``STEP:CELLS:WIDE:SIDE`` (:class:`~dkmsks.core.worker_index.GridIndex`'s
``level_step``, ``max_cells``, ``wide_cells``, ``wide_side``), optionally followed by
``/unbounded``: that engine's lookups then skip the radius bound (every entry met is tested
against its result, as before the bound). The first layout is the baseline of the ratios.
Reported per layout, as medians over the timed timestamps (and over the first and the last 20
of them, since new subscriptions' wide balls make later timestamps dearer): the whole timestamp
in one process, the paper's update time and its kNN part, the pairs tested, and the index
entries at the end. The layouts' results must be byte-identical at the end; the benchmark
fails otherwise.

Usage: ``dkm bench grid [--layouts 1:9:9:64,3:25:64:64] [--timestamps T] [--quick] [--doc docs/benchmarks.md]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dkmsks.bench.common import REPO, ResultFile, dataset_path, load_average, load_objects, say, write_doc_section
from dkmsks.bench.prose import Prose
from dkmsks.bench.stats import median, ratio
from dkmsks.core.config import Method, PartitionConfig
from dkmsks.core.engine import Engine, TimestampMetrics, build_engine
from dkmsks.core.kernel import NO_BOUND
from dkmsks.core.model import results_equal
from dkmsks.core.workload import WorkloadSpec, generate_workload
from dkmsks.cores import usable_cores

prose = Prose.load("grid")
#: The layouts compared by default: every level with 9 cells a ball (the grid's first layout),
#: every third level with 25, that with 64 cells at coarse levels (the default since), and the
#: default without the lookup's radius bound.
LAYOUTS = "1:9:9:64/unbounded,3:25:9:64/unbounded,3:25:64:64/unbounded,3:25:64:64"
FIELDS = ("level_step", "max_cells", "wide_cells", "wide_side")
#: The first and last timestamps whose medians are reported beside the whole run's.
EDGE = 20


#: The suffix of a layout whose lookups skip the radius bound.
UNBOUNDED = "/unbounded"


def parse_layouts(text: str) -> list[dict[str, int]]:
    """``STEP:CELLS:WIDE:SIDE[/unbounded]`` layouts, comma-separated, as GridIndex options
    (``unbounded``: 1 when the suffix is there)."""
    out = []
    for part in text.split(","):
        spec = part.strip()
        unbounded = spec.endswith(UNBOUNDED)
        values = spec.removesuffix(UNBOUNDED).split(":")
        if len(values) != len(FIELDS) or not all(v.isdigit() and int(v) >= 1 for v in values):
            raise ValueError(f"a layout is STEP:CELLS:WIDE:SIDE of positive integers, optionally followed by "
                             f"{UNBOUNDED}, got {part!r}")
        out.append({**dict(zip(FIELDS, (int(v) for v in values), strict=True)), "unbounded": int(unbounded)})
    return out


def label(layout: dict[str, int]) -> str:
    """A layout as the command line writes it."""
    return ":".join(str(layout[f]) for f in FIELDS) + (UNBOUNDED if layout.get("unbounded") else "")


def run_side_by_side(objects: object, events: object, config: PartitionConfig, layouts: list[dict[str, int]],
                     warmup: int, timestamps: int) -> tuple[list[list[TimestampMetrics]], list[Engine]]:
    """One engine per layout, each warmed up, then the timed timestamps alternately."""
    engines = []
    for layout in layouts:
        say(f"grid {label(layout)}: initial phase, plan and workers ...")
        engine, _ = build_engine(config, objects, events, threads=usable_cores(),  # type: ignore[arg-type]
                                 clock=time.perf_counter, kernel="numba", **{f: layout[f] for f in FIELDS})
        if layout.get("unbounded"):
            for worker in engine.workers:
                worker.index.radius_bound = lambda: NO_BOUND  # type: ignore[method-assign]
        list(engine.run(objects, events, until=config.t0 + warmup))  # type: ignore[arg-type]
        engines.append(engine)
    timed: list[list[TimestampMetrics]] = [[] for _ in layouts]
    for t in range(config.t0 + warmup + 1, config.t0 + warmup + timestamps + 1):
        for i, engine in enumerate(engines):
            timed[i].extend(engine.run(objects, events, until=t))  # type: ignore[arg-type]
        if (t - config.t0 - warmup) % 10 == 0:
            say(f"t={t}: " + ", ".join(f"{label(lay)} {timed[i][-1].wall * 1e3:.1f} ms"
                                       for i, lay in enumerate(layouts)))
    return timed, engines


def main(argv: Sequence[str] | None = None) -> int:
    """``dkm bench grid``: measure, save ``results.json``, print (and with ``--doc`` write) the section."""
    p = argparse.ArgumentParser(prog="dkm bench grid", description=__doc__.splitlines()[0])
    p.add_argument("--layouts", default=LAYOUTS, help="STEP:CELLS:WIDE:SIDE,... the first is the baseline "
                                                        "(%(default)s)")
    p.add_argument("--objects", type=int, default=1_000_000, help="|O_init| (%(default)s)")
    p.add_argument("--subscriptions", type=int, default=1_000_000, help="|S| (%(default)s)")
    p.add_argument("--workers", type=int, default=20, help="m (%(default)s)")
    p.add_argument("--timestamps", type=int, default=80, help="timed timestamps per layout (%(default)s)")
    p.add_argument("--warmup", type=int, default=5, help="untimed timestamps per layout first (%(default)s)")
    p.add_argument("--seed", type=int, default=7, help="workload seed (%(default)s)")
    p.add_argument("--quick", action="store_true", help="100k objects, 100k subscriptions, 10 timestamps")
    p.add_argument("--workdir", type=Path, default=REPO / ".cache" / "bench" / "grid",
                   help="results.json goes here (%(default)s)")
    p.add_argument("--doc", type=Path, default=None, help="write the report section into this Markdown file")
    a = p.parse_args(argv)
    if a.quick:
        a.objects, a.subscriptions, a.timestamps = 100_000, 100_000, 10
    try:
        layouts = parse_layouts(a.layouts)
    except ValueError as err:
        p.error(str(err))
    if min(a.objects, a.subscriptions, a.workers, a.timestamps) < 1 or a.warmup < 0:
        p.error("sizes, --workers and --timestamps must be at least 1, --warmup at least 0")
    params = {k: getattr(a, k) for k in ("layouts", "objects", "subscriptions", "workers", "timestamps", "warmup",
                                         "seed")}
    rec = ResultFile(a.workdir / "results.json", params)
    rec.put("load_before", load_average())
    spec = WorkloadSpec(o_init=a.objects, subscriptions=a.subscriptions, timestamps=a.warmup + a.timestamps,
                        objects_per_ts=1_000, inserts_per_ts=100, deletes_per_ts=100, k_max=10, seed=a.seed)
    source, _ = load_objects(dataset_path("place", must_exist=True), spec.objects_needed)
    objects, events = generate_workload(source, spec)
    config = PartitionConfig(method=Method.DKM, workers=a.workers)
    timed, engines = run_side_by_side(objects, events, config, layouts, a.warmup, a.timestamps)
    load_after = load_average()
    final = [e.results() for e in engines]
    equal = all(results_equal(final[0], other) for other in final[1:])
    rows: list[dict[str, Any]] = []
    for layout, metrics, engine in zip(layouts, timed, engines, strict=True):
        wall = [m.wall * 1e3 for m in metrics]
        rows.append({
            "layout": label(layout), "wall_ms": median(wall), "wall_first_ms": median(wall[:EDGE]),
            "wall_last_ms": median(wall[-EDGE:]), "update_ms": median([m.update_time * 1e3 for m in metrics]),
            "knn_ms": median([m.time_knn * 1e3 for m in metrics]), "work": median([m.work for m in metrics]),
            "entries": sum(w.index.size()["entries"] for w in engine.workers),
        })
    rec.put("layouts", rows)
    rec.put("checks", {"results_equal": equal})
    if not equal:
        say("grid: the layouts' results differ")
        return 1
    base = rows[0]
    lines = "\n".join(
        prose("row", layout=r["layout"], wall=f"{r['wall_ms']:.2f}", first=f"{r['wall_first_ms']:.2f}",
              last=f"{r['wall_last_ms']:.2f}", update=f"{r['update_ms']:.2f}", knn=f"{r['knn_ms']:.2f}",
              work=f"{r['work']:,.0f}", entries=f"{r['entries']:,}",
              ratio=f"{ratio(base['wall_ms'], r['wall_ms']):.2f}")
        for r in rows)
    d = rec.data
    head = prose("head", commit=d["commit"], date=d["date"], machine=d["machine"].get("cpu", ""),
                 nproc=d["machine"]["nproc"], load=f"{d['steps']['load_before']:.1f}", load_after=f"{load_after:.1f}",
                 objects=f"{a.objects:,}", subscriptions=f"{a.subscriptions:,}", workers=a.workers,
                 warmup=a.warmup, timestamps=a.timestamps, edge=min(EDGE, a.timestamps))
    text = f"{head}\n{lines}\n\n{prose('tail', baseline=base['layout'])}"
    print(text)
    if a.doc:
        write_doc_section(a.doc, "grid", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
