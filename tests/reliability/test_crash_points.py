"""Crash at the narrow points of the commit path, of micro-batch runs and of follow rounds:
``kill -9`` right before the journal append and right after it, before a compaction's MERGE and
during it, then rerun, compare — on a warehouse folder and on object storage.

The random kills of ``test_crash.py`` rarely land in these windows (the journal commit and the
``run_metrics`` append land within a fraction of a second; auto-compaction never runs on the
small workload). Here the job kills itself there, deterministically: the test-only
``DKMSKS_FAULT_KILL_AT`` (:mod:`dkmsks.spark.faults`) makes it ``SIGKILL`` its own process
group (driver, JVM, Python workers) at the named point. Everything else is black box, as in
``test_crash.py``: the real entry points in a process group of their own, their Delta commits
read from the log (on object storage, from the store's backing folder; the writer lease's
fence commits apart, :class:`rel_harness.Place`), the comparison through ``dkm export``
against ``dkm oracle``.

One chain on the prepared warehouse, each job the rerun of the one killed before it:

1. micro-batch ``--until 2``, killed at ``before-journal``: the timestamps were taken (sealed)
   and applied, nothing committed;
2. micro-batch ``--until 4``, killed at ``after-journal``: the journal commit landed, no
   ``run_metrics`` and no ``knn_state`` commit;
3. micro-batch ``--until 6``, killed at ``compaction``: t = 5, 6 committed to the journal, the
   compaction's MERGE never started;
4. micro-batch ``--until 8``, killed at ``compaction-write``: the MERGE wrote a data file into
   ``knn_state`` and its commit never landed (an orphan file the table must ignore);
5. ``dkm follow --until 10``, one timestamp a round, killed at ``before-journal`` in its first
   round (t = 9);
6. the same follow again, killed at ``after-journal``: t = 9 committed, its ``run_metrics`` not;
7. ``dkm follow --until 12`` killed from outside (``kill -9`` of its group) right after its
   first round's journal commit, while its ``run_metrics`` or the next round is in flight;
8. a micro-batch without a fault: the rest, and the compaction completes.

Every micro-batch runs with ``--compaction always``. Then ``dkm export`` at every timestamp must
equal ``dkm oracle`` byte for byte, and the ledger, ``timestamp_metrics`` and ``worker_metrics``
hold each timestamp exactly once. A summary (``crash-points.json`` in the test's tmp folder) is
printed.
"""

from __future__ import annotations

import json
import signal
import time
from dataclasses import dataclass

import pytest

from . import rel_harness as h
from .conftest import assert_bookkeeping, assert_exports_equal, inspect

pytestmark = [pytest.mark.reliability, pytest.mark.realdata]


@dataclass(frozen=True)
class Step:
    job: str  # "micro-batch" or "follow"
    until: int | None
    point: str | None  # DKMSKS_FAULT_KILL_AT, or None: kill -9 from outside after the first journal commit
    made: frozenset[str]  # tables the killed job must have committed
    not_made: frozenset[str]  # ... and must not have


NOTHING = frozenset({"journal", "run_metrics", "knn_state"})
JOURNAL_ONLY = frozenset({"journal"}), frozenset({"run_metrics", "knn_state"})
CHAIN = [
    Step("micro-batch", 2, "before-journal", frozenset(), NOTHING),
    Step("micro-batch", 4, "after-journal", *JOURNAL_ONLY),
    Step("micro-batch", 6, "compaction", *JOURNAL_ONLY),
    Step("micro-batch", 8, "compaction-write", *JOURNAL_ONLY),
    Step("follow", 10, "before-journal", frozenset(), NOTHING),
    Step("follow", 10, "after-journal", *JOURNAL_ONLY),
    Step("follow", 12, None, frozenset({"journal"}), frozenset({"knn_state"})),
]


def state_data_files(warehouse: h.Place) -> set[str]:
    folder = warehouse.folder / "tables" / "knn_state"
    return {str(p.relative_to(folder)) for p in folder.rglob("*.parquet") if "_delta_log" not in p.parts}


def _lease_held(wh: h.Place) -> bool:
    """Whether the writer lease's object (in the store's backing folder) says a holder has it:
    after a job killed while holding it, until the next job takes it over."""
    lock = wh.folder / "locks" / "default.lock"
    return wh.on_object_store and lock.exists() and json.loads(lock.read_bytes()).get("state") == "held"


def _command(wh: h.Place, step: Step, workers: int) -> list[str]:
    until = ["--until", str(step.until)] if step.until is not None else []
    if step.job == "micro-batch":
        return h.app_cmd("microbatch.py", "--warehouse", wh.arg, "--compaction", "always", *until,
                         "--run-id", f"fault-{step.point}-{step.until}")
    # One timestamp a round; the worker stage's tasks need slots beside the driver's.
    return h.dkm_cmd("follow", "--warehouse", wh.arg, *until, "--max-timestamps", "1", "--slots", str(workers + 2),
                     "--poll", "0.2", "--idle-exit", "120", "--nice", "0")


def test_kill_at_the_commit_points_of_runs_and_follow_rounds_then_rerun(prepared_on, tmp_path):
    prepared = prepared_on
    T, m = prepared.timestamps, prepared.workers
    wh = prepared.restore()
    record: list[dict] = []
    for step in CHAIN:
        files_before = state_data_files(wh)
        versions_before = h.table_versions(wh)
        held_before = _lease_held(wh)
        started = time.perf_counter()
        cmd = _command(wh, step, m)
        if step.point is not None:
            rec = h.run(cmd, wh, check=False, env=h.job_env(DKMSKS_FAULT_KILL_AT=step.point), timeout=600)
        else:
            rec = h.run_and_kill(cmd, wh, 0.05, after_commits=1, timeout=600)
        committed = [c.detail for c in rec.commits()]
        tables = {c.split("@")[0] for c in committed}
        said = [line for line in rec.output.splitlines() if line.startswith("fault injection: phase")]
        orphans = sorted(state_data_files(wh) - files_before)
        record.append({"job": step.job, "point": step.point or "kill -9 after the first commit",
                       "until": step.until, "returncode": rec.returncode,
                       "seconds": round(time.perf_counter() - started, 1), "commits": committed,
                       "fences": [e.detail for e in rec.events if e.kind == "fence"],
                       "job_said": said, "new_knn_state_files": len(orphans),
                       "knn_state_version": [versions_before.get("knn_state"), h.table_versions(wh).get("knn_state")]})
        print(json.dumps(record[-1]))
        what = f"{step.job} at {step.point}"
        assert rec.returncode == -signal.SIGKILL, f"{what}: the job was not killed:\n{rec.tail()}"
        if step.point is not None:
            assert said and said[-1].startswith(f"fault injection: phase {step.point}:"), rec.tail()
        assert step.made <= tables and not tables & step.not_made, f"{what}: commits {committed}"
        if step.point == "compaction-write":
            # The MERGE had written into knn_state when it died; the log never took the file.
            assert orphans, "the kill came before the MERGE wrote a file"
        if wh.on_object_store:
            # The epoch moves on, and the journal gets its fence commit, only when a job takes
            # over a lease whose holder was killed holding it (dkmsks.storage.leases); a lease
            # given back (free) is taken under its epoch with no commit.
            lease = "held by the killed job" if held_before else "free"
            assert bool(record[-1]["fences"]) is held_before, f"{what}: lease {lease}, fences {record[-1]['fences']}"
    # The rerun: the rest, and the compaction completes (ignoring the orphan files).
    final = h.run(h.app_cmd("microbatch.py", "--warehouse", wh.arg, "--compaction", "always",
                            "--run-id", "after-faults"), wh)
    final_commits = [c.detail for c in final.commits()]
    assert any(c.startswith("knn_state@") for c in final_commits), final_commits
    summary = inspect(wh, tmp_path / "after-faults", range(T + 1))
    (tmp_path / "crash-points.json").write_text(json.dumps({"warehouse": wh.arg, "chain": record,
                                                             "final_commits": final_commits,
                                                             "final_seconds": round(final.duration, 1),
                                                             "leftover_files": h.leftover_files(wh)}, indent=1))
    print(json.dumps({"final_commits": final_commits, "final_seconds": round(final.duration, 1)}))
    assert_bookkeeping(summary, T, m)
    assert_exports_equal(tmp_path / "after-faults", prepared.oracle, range(T + 1),
                         f"after the kills at every commit point ({wh.arg}) vs dkm oracle")
