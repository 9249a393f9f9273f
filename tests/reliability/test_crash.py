"""Crash at any point: ``kill -9`` the micro-batch driver at random instants, rerun, compare.

Black box: the real entry point (``python spark_apps/microbatch.py``) runs in a process group
of its own; the kill takes the driver, its JVM and its Python workers at once. The phase each
kill hit is read from the outside (:func:`rel_harness.phase_of_kill`).

Design (to fit 20+ kills into minutes, each run pays a ~15 s JVM start):

1. Reference: on the prepared warehouse, an uninterrupted ``--until 1`` run (its duration and
   phase timeline set the kill window), then an uninterrupted run of the rest; ``dkm export``
   at every timestamp.
2. Trials on the restored warehouse, one after the other: trial ``i`` runs
   ``microbatch.py --until u`` (u moves to the next timestamp once a run made its first
   commit or ended, or after two kills, so every run has work) and is killed at a random
   instant. Three in five kills
   come at a wall-clock delay drawn from a stratum of the reference run's duration
   (stratified uniform draws, shuffled); the others 0–0.3 s after the run's k-th Delta commit
   (k drawn over the reference run's commits), so that every commit boundary is hit even
   when the machine's load shifts the timeline. On the object store, with fewer kills, half
   of the timed ones come instead at a delay after the run took the writer lease (its object
   rewritten), drawn over the reference's span from there to its first commit: the run's
   reads and workers, whatever its start-up took. The next trial is the rerun of the previous
   one: it must recover whatever the kill left (an uncommitted run, a commit without its
   bookkeeping, a held lock) — and is itself killed somewhere.
3. A chain ends when every timestamp is committed (later runs would have nothing to do and end
   before their kill): a final uninterrupted run; then ``dkm export`` at every timestamp must
   equal the reference run's and ``dkm oracle``'s byte for byte, and the ledger,
   ``timestamp_metrics`` and ``worker_metrics`` must hold every timestamp exactly once. The
   next chain starts from the restored warehouse; the last one is checked when the kills are done.

The record (seed, reference timeline, chains, every trial with its events) is printed and
written to ``crash-trials.json`` in the test's tmp folder.

The test runs on a warehouse folder and on the object store (``prepared_on``; there its jobs'
commits and writer lease are read from the store's backing folder, the lease's fence commits
apart, :class:`rel_harness.Place`). ``DKMSKS_CRASH_TRIALS`` (default 20; on the object store
``DKMSKS_CRASH_TRIALS_S3``, default 8) and ``DKMSKS_CRASH_SEED`` (default: :data:`CI_SEED`
under ``CI=true``, else random; printed) control the trials.
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter

import pytest

from . import rel_harness as h
from .conftest import assert_bookkeeping, assert_exports_equal, inspect

pytestmark = [pytest.mark.reliability, pytest.mark.realdata]

TRIALS = int(os.environ.get("DKMSKS_CRASH_TRIALS", "20"))
#: Kills on a warehouse on object storage (``DKMSKS_CRASH_TRIALS_S3``): its jobs are the same
#: code, and test_crash_points.py kills them at every commit point besides.
TRIALS_S3 = int(os.environ.get("DKMSKS_CRASH_TRIALS_S3", "8"))


#: The crash trials' seed under CI=true.
CI_SEED = 20261126


def test_kill_9_at_random_points_then_rerun_loses_and_duplicates_nothing(prepared_on, tmp_path):
    prepared = prepared_on
    T, m = prepared.timestamps, prepared.workers
    wh = prepared.restore()
    wanted = TRIALS_S3 if wh.on_object_store else TRIALS
    # CI runs a fixed seed (a failure there can be replayed); longer runs draw one (printed).
    default_seed = CI_SEED if os.environ.get("CI", "").lower() == "true" else random.SystemRandom().randrange(1 << 30)
    seed = int(os.environ.get("DKMSKS_CRASH_SEED", default_seed))
    rng = random.Random(seed)
    # Before any run: a failure can be replayed.
    print(f"crash trials on {wh.arg}: seed {seed}, {wanted} kills", flush=True)
    mb = lambda *a: h.app_cmd("microbatch.py", "--warehouse", wh.arg, *a)  # noqa: E731

    # 1. The uninterrupted reference.
    first = h.run(mb("--until", "1", "--run-id", "ref-1"), wh)
    ref = h.Timeline.of(first)
    assert ref.commit_tables, f"the reference run committed nothing:\n{first.tail()}"
    h.run(mb("--run-id", "ref"), wh)
    ref_summary = inspect(wh, tmp_path / "reference", range(T + 1))
    assert_bookkeeping(ref_summary, T, m)
    assert_exports_equal(tmp_path / "reference", prepared.oracle, range(T + 1), "uninterrupted run vs dkm oracle")

    # 2. Kills: stratified delays over the reference run, from half its start-up on; on the
    # object store, where the kills are few, half of those after the run took the writer lease,
    # over the reference's span from there to its first commit (its reads and workers).
    wh = prepared.restore()
    low = 0.5 * (ref.lock_at or 0.0)
    n_timed = wanted - (2 * wanted) // 5
    n_lock = (n_timed + 1) // 2 if wh.on_object_store and ref.lock_at and ref.first_commit_at else 0
    width = (ref.duration - low) / (n_timed - n_lock)
    plan: list[tuple[float, int | str | None]] = [(low + (i + rng.random()) * width, None)
                                                  for i in range(n_timed - n_lock)]
    if n_lock:
        work = (ref.first_commit_at - ref.lock_at) / n_lock
        plan += [((i + rng.random()) * work, "lock") for i in range(n_lock)]
    plan += [(0.3 * rng.random(), 1 + i % len(ref.commit_tables)) for i in range(wanted - n_timed)]
    rng.shuffle(plan)
    trials: list[dict] = []
    chains: list[dict] = []
    attempts, until, kills_here, chain = 0, 1, 0, 1

    def phases() -> Counter:
        return Counter(t["phase"].split(" (")[0] for t in trials if t["killed"])

    def save() -> dict:
        record = {"warehouse": wh.arg, "seed": seed, "reference_seconds": round(ref.duration, 1),
                  "reference_commits": ref.commit_tables,
                  "reference_timeline": {"writer_lock": ref.lock_at, "python_workers": ref.workers_at,
                                         "first_commit": ref.first_commit_at, "workers_seconds": ref.workers_seconds},
                  "kills": sum(phases().values()), "phases": dict(phases()), "chains": chains, "trials": trials}
        (tmp_path / "crash-trials.json").write_text(json.dumps(record, indent=1))
        return record

    def finish_chain() -> None:
        # 3. Recovery, then the comparison: a final uninterrupted run, exports at every timestamp.
        final = h.run(mb("--run-id", f"final-{chain}"), wh)
        out = tmp_path / f"after-kills-{chain}"
        summary = inspect(wh, out, range(T + 1))
        mine = [t for t in trials if t["chain"] == chain]
        chains.append({"chain": chain, "attempts": len(mine), "kills": sum(1 for t in mine if t["killed"]),
                       "final_run": final.tail(300), "leftover_files": h.leftover_files(wh)})
        record = save()
        print(json.dumps({k: v for k, v in record.items() if k != "trials"}, indent=1))
        assert_bookkeeping(summary, T, m)
        assert_exports_equal(out, prepared.oracle, range(T + 1),
                             f"chain {chain}, after {chains[-1]['kills']} kills (seed {seed}) vs dkm oracle")
        assert_exports_equal(out, {t: tmp_path / "reference" / f"export-{t}.jsonl" for t in range(T + 1)},
                             range(T + 1), f"chain {chain} (seed {seed}) vs the uninterrupted run")

    while sum(1 for t in trials if t["killed"]) < wanted:
        attempts += 1
        assert attempts <= 2 * wanted, "too many runs ended before their kill: the window is too wide"
        delay, anchor = plan[(attempts - 1) % wanted]
        rec = h.run_and_kill(mb("--until", str(until), "--run-id", f"trial-{attempts}"), wh, delay,
                             after_commits=anchor if isinstance(anchor, int) else None,
                             after_lock=anchor == "lock")
        trial = {"attempt": attempts, "chain": chain, "until": until, "delay": round(delay, 2),
                 "after": anchor or "start",
                 "killed_at": None if rec.killed_at is None else round(rec.killed_at, 2),
                 "killed": rec.killed_at is not None,
                 "commits": [c.detail for c in rec.commits()],
                 "phase": h.phase_of_kill(rec, ref) if rec.killed_at is not None else "ended before the kill",
                 "returncode": rec.returncode,
                 "events": [[round(e.at, 2), e.kind, e.detail[:40]] for e in rec.events if e.kind != "out"]}
        trials.append(trial)
        print(json.dumps(trial))
        if rec.killed_at is None:
            # A run that ended before its kill must have ended well (it recovered what came before).
            assert rec.returncode == 0, f"trial {attempts} failed on its own:\n{rec.tail()}"
        # Move to the next timestamp once this one is committed (the run made the reference's
        # first commit, or ended on its own), or after two kills: every run then has work.
        committed = rec.killed_at is None or any(c.detail.startswith(ref.commit_tables[0] + "@")
                                                 for c in rec.commits())
        kills_here += 1
        if committed and until == T:
            # Every timestamp is committed: runs would have nothing left to do (and end before
            # their kill). Check this chain, then start the next one from the prepared warehouse.
            finish_chain()
            wh = prepared.restore()
            until, kills_here, chain = 1, 0, chain + 1
        elif committed or kills_here >= 2:
            until, kills_here = min(T, until + 1), 0

    if not chains or chains[-1]["chain"] != chain:
        finish_chain()
    assert sum(phases().values()) >= wanted
