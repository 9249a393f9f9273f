"""Which round channel follow mode uses (docs/design.md §10, "The round channel"): the spool,
Arrow Flight, or an object store, measured side by side.

The driver (this process) puts a round; ``--tasks`` worker tasks, each a separate interpreter
fed the channel as Spark ships it (pickled), get their round, decode it (with its checks), and
put the records of each of the workers they host; the driver collects every worker's records.
Per channel, the time from put to the last record collected, per round, for rounds of one
timestamp and of ``--burst`` timestamps at the 1M/1M protocol's rates (1,000 objects, 100
registrations, 100 deletions a timestamp; objects and words from the real data), each task's
round the whole payload (a broadcast: the bytes a routed round saves are measured by
bench/routing.py), and records of ``--records-one`` and ``--records-burst`` rows per worker (a
worker's changes and finals at 1M/1M, measured by bench/routing.py). The tasks do no work
besides decoding and encoding, so what is timed is the channel.

The object store channel (bench/store_channel.py) needs the store's settings in the
environment (``scripts/objectstore.sh start``, then ``set -a; . .cache/objectstore/env``); it
is left out without them.

Usage: ``.venv/bin/python bench/channels.py [--rounds 30] [--burst-rounds 5] [--tasks 2]
[--workers 20] [--doc docs/benchmarks.md]``.
"""

from __future__ import annotations

import argparse
import os
import pickle
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from dkmsks.bench.common import (
    REPO,
    Report,
    add_doc_flags,
    bench_main,
    describe_machine,
    git_commit,
    load_average,
    machine,
    paper_workload,
    say,
)
from dkmsks.bench.stats import median, percentile
from dkmsks.core.model import Op
from dkmsks.core.workload import WorkloadSpec
from dkmsks.jobs.follow.channel import Round
from dkmsks.spark.bridge import BatchPayload, KeywordColumn

HERE = Path(__file__).resolve().parent
SECTION = "bench/channels.py"

TASK = """
import pickle, sys
sys.path.insert(0, sys.argv[1])
import pyarrow as pa
channel, task, hosted, records = pickle.loads(sys.stdin.buffer.read())
for w in hosted:
    channel.say_ready(w)
n = 0
while (round_ := channel.get_round(n, task)) is not None:
    rows = records[round_.payload.timestamps.__len__() > 1]
    for w in hosted:
        channel.put_records(n, w, rows)
    n += 1
"""


def round_payload(timestamps: int, workers: int, seed: int) -> BatchPayload:
    """A routed round of ``timestamps`` timestamps at the protocol's rates, from the real data."""
    spec = WorkloadSpec(o_init=2_000, subscriptions=2_000, timestamps=timestamps, seed=seed)
    objects, events, vocab = paper_workload(spec)
    words = vocab.words
    later = np.flatnonzero(objects.t > 0)
    obj = objects.take(later)
    ev = events.take(np.flatnonzero(events.t > 0))
    rng = np.random.default_rng(seed)
    dels, ins = np.flatnonzero(ev.op == Op.DELETE), np.flatnonzero(ev.op == Op.INSERT)
    e = ev.take(ins)
    return BatchPayload(
        method="dkm", space=(-180.0, -90.0, 180.0, 90.0), timestamps=list(range(1, timestamps + 1)),
        obj_ids=obj.ids, obj_x=obj.x, obj_y=obj.y, obj_t=obj.t,
        obj_keywords=KeywordColumn.from_sets(obj.keywords, words),
        del_t=ev.t[dels], del_ids=ev.ids[dels], del_worker=rng.integers(0, workers, dels.shape[0]).astype(np.int32),
        ins_t=e.t, ins_ids=e.ids, ins_worker=rng.integers(0, workers, len(e)).astype(np.int32), ins_x=e.x, ins_y=e.y,
        ins_k=e.k, ins_weight=rng.integers(1, 10**6, len(e)), ins_keywords=KeywordColumn.from_sets(e.keywords, words),
        grid=16384,
    )


def records(rows: int, seed: int) -> pa.Table:
    """A worker's records of ``rows`` rows shaped as the journal's change and final records."""
    rng = np.random.default_rng(seed)
    k = rng.integers(1, 11, rows)
    offsets = np.concatenate([[0], np.cumsum(k)])
    return pa.table({
        "record": pa.array(rng.choice(["change", "final"], rows)), "t": rng.integers(1, 100, rows),
        "seq": np.arange(rows), "sub_id": rng.integers(0, 10**7, rows),
        "change": pa.array(rng.choice(["update", "upsert"], rows)),
        "object_ids": pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)),
                                               pa.array(rng.integers(0, 10**7, int(offsets[-1])))),
        "d2": pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(rng.random(int(offsets[-1])))),
        "k": k.astype(np.int32), "weight": rng.integers(0, 10**6, rows),
    })


def make_channel(kind: str, folder: Path) -> Any:
    """A driver's channel of ``kind``, open."""
    if kind == "spool":
        from dkmsks.jobs.follow.spool import SpoolChannel

        channel: Any = SpoolChannel(folder / f"spool-{uuid.uuid4().hex[:8]}", poll=0.005, build_slots=1)
    elif kind == "flight":
        from dkmsks.jobs.follow.flight import FlightChannel

        channel = FlightChannel(poll=0.005, build_slots=1, bind="127.0.0.1", host="127.0.0.1")
    else:
        sys.path.insert(0, str(HERE))
        from store_channel import ObjectStoreChannel

        channel = ObjectStoreChannel(f"{os.environ['DKMSKS_WAREHOUSE'].rstrip('/')}-channels/{uuid.uuid4().hex[:8]}",
                                     poll=0.005)
    channel.open()
    return channel


def measure(kind: str, args: argparse.Namespace, one: BatchPayload, burst: BatchPayload,
            tables: tuple[pa.Table, pa.Table], folder: Path) -> dict[str, Any]:
    """Rounds of one timestamp, then of ``--burst``, through a channel of ``kind``: per round
    the milliseconds from put to the last record collected, and the bytes each way."""
    channel = make_channel(kind, folder)
    hosted = [list(range(t, args.workers, args.tasks)) for t in range(args.tasks)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "lib"), os.environ.get("PYTHONPATH", "")]))
    procs = []
    for task in range(args.tasks):
        proc = subprocess.Popen([sys.executable, "-c", TASK, str(HERE)], stdin=subprocess.PIPE, env=env)
        assert proc.stdin is not None
        proc.stdin.write(pickle.dumps((channel, task, hosted[task], {False: tables[0], True: tables[1]})))
        proc.stdin.close()
        procs.append(proc)
    out: dict[str, Any] = {"one": [], "burst": []}
    try:
        n = 0
        for label, payload, rounds in (("one", one, args.rounds), ("burst", burst, args.burst_rounds)):
            for i in range(rounds + 1):  # the first round of each size warms up and is not counted
                started = time.perf_counter()
                put = (channel.put_round(n, Round(payload), args.tasks) if kind == "store"
                       else channel.put_round(n, Round(payload)))
                got = channel.collect(n, workers=args.workers, tasks=0, alive=lambda: None)
                if i:
                    out[label].append((time.perf_counter() - started) * 1e3)
                out[f"{label}_bytes_out"] = put[0]
                out[f"{label}_bytes_back"] = sum(len(_ipc(t)) for t in got.records) // args.workers
                n += 1
    finally:
        channel.stop(args.tasks) if kind == "store" else channel.stop()
        for proc in procs:
            proc.wait(timeout=120)
        channel.close()
    return out


def _ipc(table: pa.Table) -> bytes:
    from dkmsks.jobs.follow.wire import encode_records

    return encode_records(table)


def main(argv: Sequence[str] | None = None) -> int:
    """``bench/channels.py``: the three channels side by side; the exit status."""
    p = argparse.ArgumentParser(prog="bench/channels.py", description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=30, help="rounds of one timestamp per channel (%(default)s)")
    p.add_argument("--burst", type=int, default=100, help="timestamps of a burst round (%(default)s)")
    p.add_argument("--burst-rounds", type=int, default=5, help="burst rounds per channel (%(default)s)")
    p.add_argument("--tasks", type=int, default=2, help="worker tasks (%(default)s)")
    p.add_argument("--workers", type=int, default=20, help="workers the tasks host (%(default)s)")
    p.add_argument("--records-one", type=int, default=200, help="record rows per worker, one-timestamp round")
    p.add_argument("--records-burst", type=int, default=15_000, help="record rows per worker, burst round")
    p.add_argument("--channels", default="spool,flight,store", help="which channels (%(default)s)")
    add_doc_flags(p)
    return bench_main(p, argv, run)


def run(args: argparse.Namespace) -> Report:
    """Measure each channel; the report."""
    one, burst = round_payload(1, args.workers, 1), round_payload(args.burst, args.workers, 2)
    tables = records(args.records_one, 3), records(args.records_burst, 4)
    kinds = [k for k in args.channels.split(",") if k != "store" or os.environ.get("DKMSKS_WAREHOUSE", "")
             .startswith("s3://")]
    rows = {}
    with tempfile.TemporaryDirectory(prefix="dkmsks-channels-") as folder:
        for kind in kinds:
            say(f"channel {kind} ...")
            rows[kind] = measure(kind, args, one, burst, tables, Path(folder))
    lines = [f"Measured at `{git_commit()}` on {describe_machine(machine())}, load average {load_average():.1f}. "
             f"{args.tasks} worker tasks (separate interpreters) host "
             f"{args.workers} workers; a one-timestamp round carries {len(one.obj_ids):,} objects, a burst "
             f"{len(burst.obj_ids):,}; each worker sends back {args.records_one:,} / {args.records_burst:,} "
             f"record rows. Milliseconds from putting a round to its last worker's records collected "
             f"(median, p90; {args.rounds} and {args.burst_rounds} rounds after one warm-up round each).",
             "",
             "| channel | 1 timestamp p50 | p90 | burst p50 | p90 | bytes to a task (1 ts / burst) "
             "| bytes back per worker (1 ts / burst) |",
             "|---|---|---|---|---|---|---|"]
    for kind, r in rows.items():
        lines.append(f"| {kind} | {median(r['one']):.1f} | {percentile(r['one'], 90):.1f} | "
                     f"{median(r['burst']):.0f} | {percentile(r['burst'], 90):.0f} | "
                     f"{r['one_bytes_out']:,} / {r['burst_bytes_out']:,} | "
                     f"{r['one_bytes_back']:,} / {r['burst_bytes_back']:,} |")
    return Report(SECTION, "\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
