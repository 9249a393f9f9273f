"""Timing of the O_init structures: ObjectStatistics (Eq. 1, 2, 4) and StaticKnnIndex.

Not a test. Loads the first ``--objects`` rows of the real Place data, generates
``--subscriptions`` subscriptions the paper's way (DESIGN §5: the location of a random object,
1-5 of its keywords, ``k`` uniform in ``[1, 10]``) and prints the median of ``--runs`` runs of

- building the statistics, ``--rects`` rectangle counts (Eq. 2), as many keyword-rectangle
  counts (Eq. 4);
- building the kNN index, the exact kNN of every subscription (DESIGN §3 fact 5).

Rectangles are centred on random objects with a log-uniform half-size from 1e-3 to 1 degree
(city block to region); each keyword-rectangle query uses one keyword of the centre object.
The machine may be shared: the load average is printed next to the timings.

Usage: ``.venv/bin/python bench/bench_core_init.py [--objects N] [--subscriptions N] [--runs R]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np
import pandas as pd

from dkmsks.core.knn_init import StaticKnnIndex
from dkmsks.core.model import KeywordSets, Objects
from dkmsks.core.stats import ObjectStatistics
from dkmsks.core.workload import WorkloadSpec, generate_workload

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("DKMSKS_DATA_DIR", REPO.parent / "shared" / "data"))
PLACE = DATA / "wof_simplegeo_us" / "objects.tsv.gz"

T = TypeVar("T")


def load(n: int) -> tuple[Objects, int]:
    """First ``n`` rows as core columns (vectorised: keyword ids by first appearance)."""
    df = pd.read_csv(PLACE, sep="\t", nrows=n, dtype={"id": np.int64, "keywords": str})
    tokens = df["keywords"].str.split(" ")
    lengths = tokens.str.len().to_numpy(np.int64)
    codes, uniques = pd.factorize(np.concatenate(tokens.to_numpy()))
    owner = np.repeat(np.arange(len(df), dtype=np.int64), lengths)
    # Rows must hold distinct, ascending keyword ids (KeywordSets contract).
    key = np.unique(owner * len(uniques) + codes)
    owner, kw = key // len(uniques), (key % len(uniques)).astype(np.int32)
    ptr = np.zeros(len(df) + 1, dtype=np.int64)
    np.cumsum(np.bincount(owner, minlength=len(df)), out=ptr[1:])
    objects = Objects(
        df["id"].to_numpy(np.int64),
        df["x"].to_numpy(np.float64),
        df["y"].to_numpy(np.float64),
        KeywordSets(ptr, kw),
        df["t"].to_numpy(np.int64),
    )
    return objects, len(uniques)


class Timing(float):
    """Median wall seconds (the float value) with the median CPU seconds alongside."""

    cpu: float

    def __format__(self, spec: str) -> str:
        return f"{float(self):{spec}}s (cpu {self.cpu:.2f}s)"


def timed(fn: Callable[[], T], runs: int) -> tuple[Timing, T]:
    """Median over ``runs`` of wall and of CPU time (all threads); CPU time is the steadier
    figure on a shared machine, wall time is what a user waits."""
    walls, cpus, out = [], [], None
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    t = Timing(statistics.median(walls))
    t.cpu = statistics.median(cpus)
    return t, out  # type: ignore[return-value]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--objects", type=int, default=1_000_000)
    ap.add_argument("--subscriptions", type=int, default=1_000_000)
    ap.add_argument("--rects", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args(argv)

    t0 = time.perf_counter()
    source, n_keywords = load(a.objects)
    o_init, events = generate_workload(
        source,
        WorkloadSpec(
            o_init=a.objects, subscriptions=a.subscriptions, timestamps=0, k_max=10, seed=a.seed
        ),
    )
    subs = events.insertions()
    rng = np.random.default_rng(a.seed)
    centre = rng.integers(0, len(o_init), a.rects)
    half = 10.0 ** rng.uniform(-3.0, 0.0, a.rects)
    xmin, xmax = o_init.x[centre] - half, o_init.x[centre] + half
    ymin, ymax = o_init.y[centre] - half, o_init.y[centre] + half
    pick = rng.integers(0, o_init.keywords.lengths()[centre])
    kw = o_init.keywords.ids[o_init.keywords.ptr[centre] + pick]
    print(
        f"loaded {len(o_init):,} objects ({n_keywords:,} keywords), {len(subs):,} subscriptions "
        f"({len(subs.keywords.ids):,} subscription keywords) in {time.perf_counter() - t0:.1f}s; "
        f"cores {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )

    r = a.runs
    t_sb, stats = timed(lambda: ObjectStatistics.build(o_init, n_keywords), r)
    print(f"{'ObjectStatistics.build':36} {t_sb:6.2f}", flush=True)
    t_rc, counts = timed(lambda: stats.count_in_rects(xmin, ymin, xmax, ymax), r)
    label = f"count_in_rects x{a.rects:,}"
    print(f"{label:36} {t_rc:6.2f}  (mean |O_R| {counts.mean():,.0f})", flush=True)
    t_kc, kcounts = timed(lambda: stats.count_keyword_in_rects(kw, xmin, ymin, xmax, ymax), r)
    label = f"count_keyword_in_rects x{a.rects:,}"
    print(f"{label:36} {t_kc:6.2f}  (mean |O_R,λ| {kcounts.mean():,.0f})", flush=True)
    t_kb, index = timed(lambda: StaticKnnIndex.build(o_init, n_keywords), r)
    print(f"{'StaticKnnIndex.build':36} {t_kb:6.2f}", flush=True)
    t_kq, (ids, d2) = timed(lambda: index.query(subs, width=10), r)
    full = np.isfinite(d2[np.arange(len(subs)), subs.k.astype(np.int64) - 1]).mean()
    print(
        f"{f'kNN query x{len(subs):,}':36} {t_kq:6.2f}  "
        f"({full:.1%} of subscriptions have k results)",
        flush=True,
    )
    print(f"load average at the end {os.getloadavg()[0]:.2f} (median of {r} runs each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
