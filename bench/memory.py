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

Usage: ``.venv/bin/python bench/memory.py [--sizes 1000000,5000000,10000000] [--timestamps T] [--quick]
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

from dkmsks.bench.common import (
    REPO,
    Refused,
    Report,
    ResultFile,
    add_doc_flags,
    add_quick_flag,
    add_workload_flags,
    bench_main,
    paper_workload,
    say,
    workload_spec,
)
from dkmsks.bench.prose import Prose
from dkmsks.core.config import Method, PartitionConfig
from dkmsks.core.engine import build_engine
from dkmsks.cores import usable_cores

HERE = Path(__file__).resolve().parent
prose = Prose.read(HERE / "templates" / "memory.md")
SECTION = "bench/memory.py"
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


def measure(n_subs: int, a: argparse.Namespace) -> dict[str, Any]:
    """One size, in this process: build the engine, run ``--timestamps`` timestamps, measure."""
    timestamps = a.timestamps
    stream, events, _ = paper_workload(workload_spec(a, subscriptions=n_subs))
    config = PartitionConfig(method=Method.DKM, workers=a.workers)
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
    """:func:`measure` in a fresh interpreter running this script (same ``PYTHONPATH``); its result
    from the last line of stdout."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(n_subs), "--o-init", str(a.o_init),
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
    """``bench/memory.py``: measure each size in a subprocess, save ``results.json``, print (and with
    ``--doc`` write) the section."""
    p = argparse.ArgumentParser(prog="bench/memory.py", description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1000000,5000000,10000000", help="|S| values, comma-separated (%(default)s)")
    add_workload_flags(p, o_init=1_000_000, timestamps=5, seed=7, workers=20,
                       helps={"timestamps": "timestamps run after the build"})
    p.add_argument("--workdir", type=Path, default=REPO / ".cache" / "bench" / "memory",
                   help="results.json goes here (%(default)s)")
    p.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)  # one size, in this process
    add_quick_flag(p, "|O_init| = 20k, |S| = 10k and 40k, 2 timestamps", o_init=20_000, sizes="10000,40000",
                   timestamps=2)
    add_doc_flags(p)
    return bench_main(p, argv, run)


def run(a: argparse.Namespace) -> Report:
    """Each size in a fresh process, then the report (with ``--child``: one size, here, as a JSON line)."""
    if a.child is not None:
        return Report(SECTION, json.dumps(measure(a.child, a)))
    sizes = sorted({int(s) for s in a.sizes.split(",") if s.strip()})
    if not sizes or min(sizes) < 1 or min(a.o_init, a.workers) < 1 or a.timestamps < 0:
        raise Refused("--sizes, --o-init and --workers must be at least 1, --timestamps at least 0")
    params = {k: getattr(a, k) for k in ("o_init", "workers", "timestamps", "seed")} | {"sizes": sizes}
    rec = ResultFile(a.workdir / "results.json", params)
    runs = []
    for n in sizes:
        say(f"memory: |S| = {n:,} in a fresh process ...")
        runs.append(measure_in_subprocess(n, a))
        rec.put("runs", runs)
    rows, slopes, worst = report_rows(runs)
    head = prose("head", **rec.head(), objects=f"{a.o_init:,}", workers=a.workers, timestamps=a.timestamps)
    parts = [head + "\n" + "\n".join(rows)]
    if slopes:
        parts.append(prose("slopes_head") + "\n" + "\n".join(slopes))
    parts.append(prose("verdict_slope" if slopes else "verdict_single", worst=f"{worst:.2f}",
                       target=f"{TARGET_GIB_PER_MILLION:.1f}", verdict=prose.status(worst <= TARGET_GIB_PER_MILLION)))
    return Report(SECTION, "\n\n".join(parts))


if __name__ == "__main__":
    sys.exit(main())
