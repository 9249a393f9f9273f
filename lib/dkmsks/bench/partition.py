"""Benchmark of the partitioners at paper scale (not a test).

1M objects of the real Place data as ``O_init``, 1M subscriptions generated the paper's way
(location of a random object, 1–5 of its keywords, ``k`` uniform in [1, 10], seeded), ``m = 20``,
``θ = 20``, ``γ1 = 100,000``, ``γ2 = 20``. Prints the median of ``--runs`` runs per step:

- building ``ObjectStatistics`` and ``StaticKnnIndex``;
- the initial kNN of all subscriptions in ``O_init`` (needed by SOP and DkM-SKS);
- ``partition()`` per method (``--methods``, any of ``kop,sop,dkm,ps2``), given the kNN
  matrices (PS²Stream's ``θ_ps`` is ``--theta``);
- ``MainServer`` construction and assigning 100 new subscriptions.

Usage: ``dkm bench partition [--objects N] [--subscriptions N] [--runs R]``
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from functools import partial

import numpy as np

from dkmsks.bench.common import dataset_path, describe_machine, git_commit, load_objects, machine
from dkmsks.bench.stats import timed
from dkmsks.core.knn_init import StaticKnnIndex
from dkmsks.core.model import data_space
from dkmsks.core.partition import MainServer, partition
from dkmsks.core.stats import ObjectStatistics
from dkmsks.core.workload import WorkloadSpec, generate_workload
from dkmsks.cores import usable_cores


def main(argv: Sequence[str] | None = None) -> int:
    """``dkm bench partition``: time the initial phase of each method; the exit status."""
    ap = argparse.ArgumentParser(prog="dkm bench partition", description=__doc__.splitlines()[0])
    ap.add_argument("--objects", type=int, default=1_000_000)
    ap.add_argument("--subscriptions", type=int, default=1_000_000)
    ap.add_argument("--workers", type=int, default=20)
    ap.add_argument("--theta", type=int, default=20)
    ap.add_argument("--gamma1", type=int, default=100_000)
    ap.add_argument("--gamma2", type=int, default=20)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--methods", default="kop,sop,dkm")
    a = ap.parse_args(argv)

    print(f"commit {git_commit()}; {describe_machine(machine())}", flush=True)
    t0 = time.perf_counter()
    source, vocab = load_objects(dataset_path("place", must_exist=True), a.objects)
    o_init, events = generate_workload(
        source, WorkloadSpec(o_init=a.objects, subscriptions=a.subscriptions, timestamps=0,
                             k_max=10, seed=a.seed))
    subs = events.insertions()
    space = data_space(o_init, subs)
    print(f"loaded {len(o_init):,} objects, {len(subs):,} subscriptions, "
          f"{len(vocab):,} keywords in {time.perf_counter() - t0:.1f}s", flush=True)

    t_stats, stats = timed(lambda: ObjectStatistics.build(o_init, len(vocab), workers=usable_cores()), 1)
    t_knn_build, knn = timed(lambda: StaticKnnIndex.build(o_init, len(vocab), workers=usable_cores()), 1)
    print(f"ObjectStatistics.build {t_stats:.2f}   StaticKnnIndex.build {t_knn_build:.2f}", flush=True)
    t_query, mats = timed(lambda: knn.query(subs, width=10), a.runs)
    print(f"initial kNN of {len(subs):,} subscriptions: {t_query:.2f} (median of {a.runs})", flush=True)

    for method in a.methods.split(","):
        t_part, plan = timed(partial(partition, method, stats, mats, subs, space, m=a.workers,
                                     theta=a.theta, gamma1=a.gamma1, gamma2=a.gamma2,
                                     objects=o_init, ps2_theta=a.theta),
                             a.runs)
        loads = plan.loads
        extra = "" if method == "kop" else f" + kNN {t_query.wall:.2f}s = {t_part.wall + t_query.wall:.2f}s"
        print(f"{method}: partition {t_part:.2f} (median of {a.runs}){extra}; "
              f"subsets {len(plan.subsets):,}; load max/mean {loads.max() / loads.mean():.4f}; "
              f"params {plan.params}", flush=True)
        t_srv, server = timed(partial(MainServer, plan, stats, knn), 1)
        new = subs.take(np.arange(100))
        new = type(new)(new.ids + 10**12, new.x, new.y, new.keywords, new.k, new.t)
        t_assign, _ = timed(partial(server.assign, new), 1)
        print(f"   MainServer build {t_srv:.2f}, assign 100 new {t_assign.wall * 1000:.1f}ms", flush=True)
    return 0

