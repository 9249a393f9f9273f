"""Timing of the O_init structures: ObjectStatistics (Eq. 1, 2, 4) and StaticKnnIndex.

Not a test. Loads the first ``--objects`` rows of the real Place data, generates
``--subscriptions`` subscriptions the paper's way (docs/design.md §5: the location of a random object,
1-5 of its keywords, ``k`` uniform in ``[1, 10]``) and prints the median of ``--runs`` runs of

- building the statistics, ``--rects`` rectangle counts (Eq. 2), as many keyword-rectangle
  counts (Eq. 4);
- building the kNN index, the exact kNN of every subscription (docs/design.md §3 fact 5).

Rectangles are centred on random objects with a log-uniform half-size from 1e-3 to 1 degree
(city block to region); each keyword-rectangle query uses one keyword of the centre object.
The machine may be shared: the load average is printed next to the timings.

Usage: ``dkm bench core-init [--objects N] [--subscriptions N] [--runs R]``
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import numpy as np

from dkmsks.bench.common import dataset_path, describe_machine, git_commit, load_average, load_objects, machine
from dkmsks.bench.stats import timed
from dkmsks.core.knn_init import StaticKnnIndex
from dkmsks.core.stats import ObjectStatistics
from dkmsks.core.workload import WorkloadSpec, generate_workload
from dkmsks.cores import usable_cores


def main(argv: Sequence[str] | None = None) -> int:
    """``dkm bench core-init``: time the initial phase's building blocks; the exit status."""
    ap = argparse.ArgumentParser(prog="dkm bench core-init", description=__doc__.splitlines()[0])
    ap.add_argument("--objects", type=int, default=1_000_000)
    ap.add_argument("--subscriptions", type=int, default=1_000_000)
    ap.add_argument("--rects", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args(argv)

    print(f"commit {git_commit()}; {describe_machine(machine())}", flush=True)
    t0 = time.perf_counter()
    source, vocab = load_objects(dataset_path("place", must_exist=True), a.objects)
    n_keywords = len(vocab)
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
        f"load average {load_average():.2f}",
        flush=True,
    )

    r = a.runs
    t_sb, stats = timed(lambda: ObjectStatistics.build(o_init, n_keywords, workers=usable_cores()), r)
    print(f"{'ObjectStatistics.build':36} {t_sb:6.2f}", flush=True)
    t_rc, counts = timed(lambda: stats.count_in_rects(xmin, ymin, xmax, ymax), r)
    label = f"count_in_rects x{a.rects:,}"
    print(f"{label:36} {t_rc:6.2f}  (mean |O_R| {counts.mean():,.0f})", flush=True)
    t_kc, kcounts = timed(lambda: stats.count_keyword_in_rects(kw, xmin, ymin, xmax, ymax), r)
    label = f"count_keyword_in_rects x{a.rects:,}"
    print(f"{label:36} {t_kc:6.2f}  (mean |O_R,λ| {kcounts.mean():,.0f})", flush=True)
    t_kb, index = timed(lambda: StaticKnnIndex.build(o_init, n_keywords, workers=usable_cores()), r)
    print(f"{'StaticKnnIndex.build':36} {t_kb:6.2f}", flush=True)
    t_kq, (ids, d2) = timed(lambda: index.query(subs, width=10), r)
    full = np.isfinite(d2[np.arange(len(subs)), subs.k.astype(np.int64) - 1]).mean()
    print(
        f"{f'kNN query x{len(subs):,}':36} {t_kq:6.2f}  "
        f"({full:.1%} of subscriptions have k results)",
        flush=True,
    )
    print(f"load average at the end {load_average():.2f} (median of {r} runs each)")
    return 0

