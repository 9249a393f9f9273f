"""Benchmark of the in-memory engine's memory per subscription (issue 18, item 2).

The setting of issue 18: real Place data, ``|O_init| = 1M``, ``m = 20``, DkM-SKS, ``k_max = 10``,
``|S|`` generated the paper's way at each of ``--sizes``, then per timestamp 1,000 new objects,
100 insertions and 100 deletions. Each size runs in a fresh subprocess, so that its resident set
holds nothing of another size: the subprocess loads the data, generates the workload, builds the
engine (initial kNN, plan, workers) and runs ``--timestamps`` timestamps.

Reported per size: the growth of the resident set (RSS) over the build and after the timestamps,
the bytes of the numpy arrays of the workers' kNN states, of the workers' indexes and of the main
server (found by walking the engine's attributes, each buffer counted once), the peak RSS of the
subprocess, and per subscription: bytes and GiB per million. Part of the RSS growth does not
depend on ``|S|`` (the structures over ``O_init``); the slope between two sizes removes it.

Usage: ``dkm bench memory [--sizes 1000000,5000000,10000000] [--timestamps T] [--quick]
[--doc docs/benchmarks.md]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dkmsks.bench.common import REPO, ResultFile, dataset_path, load_objects, say, write_doc_section
from dkmsks.bench.prose import Prose
from dkmsks.core.config import Method, PartitionConfig
from dkmsks.core.engine import build_engine
from dkmsks.core.workload import WorkloadSpec, generate_workload
from dkmsks.cores import usable_cores

prose = Prose.load("memory")
GIB = float(1 << 30)
#: Issue 18's target: GiB of engine memory per million subscriptions.
TARGET_GIB_PER_MILLION = 0.5


def array_bytes(root: object, seen: set[int], depth: int = 6) -> int:
    """Bytes of the numpy buffers reachable from ``root`` through attributes, lists, tuples and
    dicts (each buffer once: a view counts as the array it views; ``seen`` holds their ids)."""
    if isinstance(root, np.ndarray):
        owner = root
        while isinstance(owner.base, np.ndarray):
            owner = owner.base
        if id(owner) in seen:
            return 0
        seen.add(id(owner))
        return int(owner.nbytes)
    if depth == 0 or isinstance(root, (str, bytes, int, float, bool, type(None))):
        return 0
    if isinstance(root, (list, tuple)):
        children: list[Any] = list(root)
    elif isinstance(root, dict):
        children = list(root.values())
    elif hasattr(root, "__dict__"):
        children = list(vars(root).values())
    else:
        return 0
    return sum(array_bytes(c, seen, depth - 1) for c in children)


def rss_bytes() -> int:
    """The resident set of this process now (``/proc/self/statm``)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * resource.getpagesize()


def measure(n_subs: int, objects: int, workers: int, timestamps: int, seed: int) -> dict[str, Any]:
    """One size, in this process: build the engine, run ``timestamps`` timestamps, measure."""
    spec = WorkloadSpec(o_init=objects, subscriptions=n_subs, timestamps=timestamps, objects_per_ts=1_000,
                        inserts_per_ts=100, deletes_per_ts=100, k_max=10, seed=seed)
    source, _ = load_objects(dataset_path("place", must_exist=True), spec.objects_needed)
    stream, events = generate_workload(source, spec)
    del source
    config = PartitionConfig(method=Method.DKM, workers=workers)
    gc.collect()
    rss0 = rss_bytes()
    engine, _ = build_engine(config, stream, events, threads=usable_cores())
    gc.collect()
    rss_built = rss_bytes()
    list(engine.run(stream, events, until=config.t0 + timestamps))
    gc.collect()
    rss_run = rss_bytes()
    seen: set[int] = set()
    parts = {"state": sum(array_bytes(w.state, seen) for w in engine.workers),
             "index": sum(array_bytes(w.index, seen) for w in engine.workers),
             "main": array_bytes(engine.assigner, seen)}
    live = sum(len(w.state) for w in engine.workers)
    return {"subscriptions": n_subs, "live": live, "rss_before": rss0, "rss_built": rss_built, "rss_run": rss_run,
            # The kernel updates the high-water mark lazily: it may lag the last reading a little.
            "peak_rss": max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, rss_run), "parts": parts}


def measure_in_subprocess(n_subs: int, a: argparse.Namespace) -> dict[str, Any]:
    """:func:`measure` in a fresh interpreter (same ``PYTHONPATH``); its result from the last line of stdout."""
    cmd = [sys.executable, "-m", "dkmsks.bench.memory", "--child", str(n_subs), "--objects", str(a.objects),
           "--workers", str(a.workers), "--timestamps", str(a.timestamps), "--seed", str(a.seed)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"memory benchmark at |S| = {n_subs:,} failed:\n{proc.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def per_million(nbytes: float, n: int) -> float:
    """GiB per million of ``n``."""
    return nbytes / GIB / (n / 1e6)


def report_rows(runs: list[dict[str, Any]]) -> tuple[list[str], list[str], float]:
    """The per-size table rows, the slope rows between consecutive sizes and the largest
    per-million figure that the target is judged on (the slope of the RSS, else per size)."""
    rows = []
    for r in runs:
        n = r["live"]
        arrays = sum(r["parts"].values())
        rows.append(prose(
            "row", subscriptions=f"{r['subscriptions']:,}",
            build=f"{(r['rss_built'] - r['rss_before']) / GIB:.2f}",
            run=f"{(r['rss_run'] - r['rss_before']) / GIB:.2f}",
            peak=f"{r['peak_rss'] / GIB:.2f}", state=f"{r['parts']['state'] / GIB:.2f}",
            index=f"{r['parts']['index'] / GIB:.2f}", main=f"{r['parts']['main'] / GIB:.2f}",
            per_sub=f"{arrays / n:.0f}", arrays_per_million=f"{per_million(arrays, n):.2f}",
            rss_per_million=f"{per_million(r['rss_run'] - r['rss_before'], n):.2f}"))
    slopes = []
    worst = 0.0
    for lo, hi in zip(runs, runs[1:], strict=False):
        dn = hi["live"] - lo["live"]
        d_rss = (hi["rss_run"] - hi["rss_before"]) - (lo["rss_run"] - lo["rss_before"])
        d_arr = sum(hi["parts"].values()) - sum(lo["parts"].values())
        worst = max(worst, per_million(d_rss, dn))
        slopes.append(prose("slope", lo=f"{lo['subscriptions']:,}", hi=f"{hi['subscriptions']:,}",
                            rss=f"{per_million(d_rss, dn):.2f}", arrays=f"{per_million(d_arr, dn):.2f}",
                            per_sub=f"{d_arr / dn:.0f}"))
    if len(runs) == 1:
        r = runs[0]
        worst = per_million(r["rss_run"] - r["rss_before"], r["live"])
    return rows, slopes, worst


def main(argv: Sequence[str] | None = None) -> int:
    """``dkm bench memory``: measure each size in a subprocess, save ``results.json``, print (and with
    ``--doc`` write) the section."""
    p = argparse.ArgumentParser(prog="dkm bench memory", description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1000000,5000000,10000000", help="|S| values, comma-separated (%(default)s)")
    p.add_argument("--objects", type=int, default=1_000_000, help="|O_init| (%(default)s)")
    p.add_argument("--workers", type=int, default=20, help="m (%(default)s)")
    p.add_argument("--timestamps", type=int, default=5, help="timestamps run after the build (%(default)s)")
    p.add_argument("--seed", type=int, default=7, help="workload seed (%(default)s)")
    p.add_argument("--quick", action="store_true", help="|O_init| = 20k, |S| = 10k and 40k, 2 timestamps")
    p.add_argument("--workdir", type=Path, default=REPO / ".cache" / "bench" / "memory",
                   help="results.json goes here (%(default)s)")
    p.add_argument("--doc", type=Path, default=None, help="write the report section into this Markdown file")
    p.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)  # one size, in this process
    a = p.parse_args(argv)
    if a.child is not None:
        print(json.dumps(measure(a.child, a.objects, a.workers, a.timestamps, a.seed)))
        return 0
    if a.quick:
        a.objects, a.sizes, a.timestamps = 20_000, "10000,40000", 2
    sizes = sorted({int(s) for s in a.sizes.split(",") if s.strip()})
    if not sizes or min(sizes) < 1 or min(a.objects, a.workers) < 1 or a.timestamps < 0:
        p.error("--sizes, --objects and --workers must be at least 1, --timestamps at least 0")
    params = {k: getattr(a, k) for k in ("objects", "workers", "timestamps", "seed")} | {"sizes": sizes}
    rec = ResultFile(a.workdir / "results.json", params)
    runs = []
    for n in sizes:
        say(f"memory: |S| = {n:,} in a fresh process ...")
        runs.append(measure_in_subprocess(n, a))
        rec.put("runs", runs)
    rows, slopes, worst = report_rows(runs)
    d = rec.data
    head = prose("head", commit=d["commit"], date=d["date"], machine=d["machine"].get("cpu", ""),
                 nproc=d["machine"]["nproc"], objects=f"{a.objects:,}", workers=a.workers, timestamps=a.timestamps)
    parts = [head + "\n" + "\n".join(rows)]
    if slopes:
        parts.append(prose("slopes_head") + "\n" + "\n".join(slopes))
    parts.append(prose("verdict_slope" if slopes else "verdict_single", worst=f"{worst:.2f}",
                       target=f"{TARGET_GIB_PER_MILLION:.1f}",
                       verdict="met" if worst <= TARGET_GIB_PER_MILLION else "not met"))
    text = "\n\n".join(parts)
    print(text)
    if a.doc:
        write_doc_section(a.doc, "memory", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
