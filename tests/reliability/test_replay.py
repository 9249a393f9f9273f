"""Replays, retries and concurrent writers, black box (real entry points in subprocesses).

- every job retried after success (what an Airflow retry does: the same command again)
  changes no result and adds no row: ingest, the initial partition (``--if-absent``), the
  micro-batch; a repartition retried makes another plan and keeps the results exact;
- two micro-batch runs started at once, and a repartition started during a micro-batch: both
  processes end cleanly (the loser waits, or exits non-zero with a message naming the other
  writer), no table is left unreadable (the next run succeeds), and the results at every
  timestamp equal the oracle, with each timestamp in the ledger exactly once.

The concurrency cases rely on the warehouse writer lock (``dkmsks.storage.writer_lock``).
"""

from __future__ import annotations

import re
import time

import pytest

from . import rel_harness as h
from .conftest import PARTITION_ARGS, assert_bookkeeping, assert_exports_equal, inspect

pytestmark = [pytest.mark.reliability, pytest.mark.realdata]

#: What a losing writer must say (a lock, or the writer it lost to), case-insensitive.
CLEAR_LOSER = re.compile(r"writer lock|\block\b.*(held|taken|busy)|another (writer|run|job|micro-?batch|repartition)"
                         r"|already running|concurrent (writer|run)", re.IGNORECASE)


def _ingest(wh, prepared, run_id):
    return h.app_cmd("ingest.py", "--warehouse", str(wh), "--objects", str(prepared.objects),
                     "--events", str(prepared.events), "--run-id", run_id)


def test_every_job_retried_after_success_changes_nothing(prepared, tmp_path):
    T = prepared.timestamps
    wh = prepared.restore()
    mb = lambda rid, *a: h.app_cmd("microbatch.py", "--warehouse", str(wh), "--run-id", rid, *a)  # noqa: E731

    h.run(mb("mb", "--until", "4"), wh)
    for name, cmd in [
        ("ingest", _ingest(wh, prepared, "prep")),  # the same files, the same run id
        ("partition", h.app_cmd("partition.py", "--warehouse", str(wh), *PARTITION_ARGS, "--if-absent",
                                "--run-id", "prep")),
        ("micro-batch", mb("mb", "--until", "4")),
    ]:
        before = h.delta_commits(wh)
        rec = h.run(cmd, wh)
        new = sorted(set(h.delta_commits(wh)) - set(before))
        written = {f"{t}@{v}": h.rows_written(wh, t, v) for t, v in new}
        assert not any(written.values()), f"the {name} retry wrote rows: {written}\n{rec.tail()}"

    # The rest, then a retried repartition: two new plans, results still exact everywhere.
    h.run(mb("mb-rest"), wh)
    repartition = h.app_cmd("partition.py", "--warehouse", str(wh), "--repartition", "--method", "sop",
                            "--workers", str(prepared.workers), "--theta", "4", "--run-id", "re")
    h.run(repartition, wh)
    h.run(repartition, wh)
    summary = inspect(wh, tmp_path / "after", range(T + 1))
    assert_bookkeeping(summary, T, prepared.workers)
    assert_exports_equal(tmp_path / "after", prepared.oracle, range(T + 1), "after retries vs dkm oracle")


def _both_end_cleanly(a: h.RunRecord, b: h.RunRecord) -> list[str]:
    """Both succeeded, or the loser failed with a clear message; returns notes for the report."""
    notes = []
    for rec in (a, b):
        if rec.returncode != 0:
            last = rec.output.strip().splitlines()[-15:]
            assert any(CLEAR_LOSER.search(line) for line in last), (
                f"{' '.join(rec.cmd[1:3])} failed without naming the other writer (exit {rec.returncode}):\n"
                + "\n".join(last))
            notes.append(f"{rec.cmd[1]} lost: {next(line for line in last if CLEAR_LOSER.search(line))}")
    assert a.returncode == 0 or b.returncode == 0, "both concurrent writers failed"
    return notes


def _start_together(cmds, wh, stagger: float = 0.0):
    jobs = []
    for i, cmd in enumerate(cmds):
        if i and stagger:
            time.sleep(stagger)
        jobs.append(h.Monitored(cmd, wh))
    return [j.wait(1200) for j in jobs]


def test_two_microbatch_runs_started_at_once(prepared, tmp_path):
    T = prepared.timestamps
    wh = prepared.restore()
    cmd = lambda rid: h.app_cmd("microbatch.py", "--warehouse", str(wh), "--run-id", rid)  # noqa: E731
    a, b = _start_together([cmd("first"), cmd("second")], wh)
    notes = _both_end_cleanly(a, b)
    print({"a": a.returncode, "b": b.returncode, "notes": notes})
    h.run(cmd("after"), wh)  # the next run can read every table (and completes a loser's work)
    summary = inspect(wh, tmp_path / "after", range(T + 1))
    assert_bookkeeping(summary, T, prepared.workers)
    assert_exports_equal(tmp_path / "after", prepared.oracle, range(T + 1), "after two concurrent runs")


def test_a_repartition_started_during_a_microbatch(prepared, tmp_path):
    T = prepared.timestamps
    wh = prepared.restore()
    mb = h.Monitored(h.app_cmd("microbatch.py", "--warehouse", str(wh), "--run-id", "during"), wh)
    deadline = time.time() + 600
    while mb.proc.poll() is None and not mb.record.first("python-workers") and time.time() < deadline:
        time.sleep(0.1)  # start the repartition once the micro-batch's workers run
    assert mb.proc.poll() is None, "the micro-batch ended before its workers were seen"
    re_cmd = h.app_cmd("partition.py", "--warehouse", str(wh), "--repartition", "--method", "sop",
                       "--workers", str(prepared.workers), "--theta", "4", "--run-id", "re-during")
    repartition = h.Monitored(re_cmd, wh)
    a, b = mb.wait(1200), repartition.wait(1200)
    notes = _both_end_cleanly(a, b)
    print({"microbatch": a.returncode, "repartition": b.returncode, "notes": notes})
    h.run(h.app_cmd("microbatch.py", "--warehouse", str(wh), "--run-id", "after"), wh)
    summary = inspect(wh, tmp_path / "after", range(T + 1))
    assert_bookkeeping(summary, T, prepared.workers)
    assert_exports_equal(tmp_path / "after", prepared.oracle, range(T + 1), "after a repartition during a run")
