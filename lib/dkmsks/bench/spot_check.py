"""Exactness spot check of a large warehouse: N random live subscriptions against the oracle.

The brute-force oracle over every subscription is out of reach at |S| = 10M, but results are
independent per subscription, so the oracle restricted to a random sample of live ids (their
events only, every object) checks the warehouse's current results for those ids exactly. The
warehouse side is read as a job reads it: the ``knn_state`` snapshot with the journal's newer
final records overlaid (:class:`dkmsks.storage.state_io.StateView`), through delta-rs — no JVM.

    dkm bench spot-check --warehouse W --objects O.tsv.gz --events E.tsv.gz --as-of T [--n 2000]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dkmsks.bench.common import Report, bench_main


def main(argv: Sequence[str] | None = None) -> int:
    """``dkm bench spot-check``: compare the warehouse's results with the oracle's; the exit status."""
    p = argparse.ArgumentParser(prog="dkm bench spot-check", description=__doc__.splitlines()[0])
    p.add_argument("--warehouse", type=Path, required=True)
    p.add_argument("--database", default=None)
    p.add_argument("--objects", type=Path, required=True)
    p.add_argument("--events", type=Path, required=True)
    p.add_argument("--as-of", type=int, required=True, help="the warehouse's last processed timestamp")
    p.add_argument("--n", type=int, default=2000, help="subscriptions to check (%(default)s)")
    p.add_argument("--seed", type=int, default=11)
    return bench_main(p, argv, run)


def run(a: argparse.Namespace) -> Report:
    """Draw the sample, read its results from the warehouse and the oracle's; the report (a
    failure when any differs)."""
    from dkmsks.core.model import Vocabulary
    from dkmsks.core.oracle import oracle_results
    from dkmsks.io.formats import read_events, read_objects
    from dkmsks.storage.lake import Lake
    from dkmsks.storage.state_io import StateView

    started = time.perf_counter()
    root = a.warehouse / "tables" / (f"{a.database}.db" if a.database and a.database != "default" else "")
    lake = Lake({d.name: str(d) for d in root.iterdir() if (d / "_delta_log").is_dir()})
    state = StateView.open(lake).read(columns=["sub_id", "object_ids", "d2"])
    ids = np.asarray(state.column("sub_id").to_numpy())
    pick = np.sort(np.random.default_rng(a.seed).choice(ids, min(a.n, ids.shape[0]), replace=False))
    rows = state.filter(pc.is_in(state.column("sub_id"), value_set=pa.array(pick)))
    got = {int(s): (o, d) for s, o, d in zip(rows.column("sub_id").to_pylist(), rows.column("object_ids").to_pylist(),
                                             rows.column("d2").to_pylist(), strict=True)}
    vocab = Vocabulary()
    objects = read_objects(a.objects, vocab).objects
    events = read_events(a.events, vocab).events
    events = events.take(np.flatnonzero(np.isin(events.ids, pick)))
    want = oracle_results(objects, events, a.as_of)
    if set(want) != set(got):
        return Report("dkm bench spot-check", "", f"live sets differ: oracle {len(want)}, warehouse {len(got)} of "
                                                  "the sample")
    bad = [s for s in want if want[s].object_ids.tolist() != got[s][0] or want[s].d2.tolist() != got[s][1]]
    text = (f"{len(want):,} of {ids.shape[0]:,} live subscriptions checked "
            f"({sum(len(w.object_ids) for w in want.values()):,} result rows): {len(bad)} differ "
            f"[{time.perf_counter() - started:.0f} s]")
    return Report("dkm bench spot-check", text, "; ".join(
        f"sub {s}: oracle {want[s].object_ids.tolist()} vs warehouse {got[s][0]}" for s in bad[:5]))

