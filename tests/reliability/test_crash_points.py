"""Crash at the narrow points of the commit path: ``kill -9`` between the journal append and the
``run_metrics`` append, before a compaction's MERGE and during it, then rerun, compare.

The random kills of ``test_crash.py`` rarely land in these windows (the journal commit and the
``run_metrics`` append land within a fraction of a second; auto-compaction never runs on the
small workload). Here the job kills itself there, deterministically: the test-only
``DKMSKS_FAULT_KILL_AT`` (:mod:`dkmsks.spark.faults`) makes it ``SIGKILL`` its own process
group (driver, JVM, Python workers) at the named point. Everything else is black box, as in
``test_crash.py``: the real entry point in a process group of its own, its Delta commits read
from the log, the comparison through ``dkm export`` against ``dkm oracle``.

One chain on the prepared warehouse, each run the rerun of the one killed before it (four
micro-batch JVMs and one inspection):

1. ``--until 4 --compaction always``, killed at ``after-journal``: the journal commit landed,
   no ``run_metrics`` and no ``knn_state`` commit;
2. ``--until 8 --compaction always``, killed at ``compaction``: t = 5..8 committed to the
   journal, the compaction's MERGE never started;
3. the rest, ``--compaction always``, killed at ``compaction-write``: the MERGE wrote a data file
   into ``knn_state`` and its commit never landed (an orphan file the table must ignore);
4. ``--compaction always`` without a fault: nothing pending, the compaction completes.

Then ``dkm export`` at every timestamp must equal ``dkm oracle`` byte for byte, and the ledger,
``timestamp_metrics`` and ``worker_metrics`` hold each timestamp exactly once. A summary
(``crash-points.json`` in the test's tmp folder) is printed.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from . import rel_harness as h
from .conftest import assert_bookkeeping, assert_exports_equal, inspect

pytestmark = [pytest.mark.reliability, pytest.mark.realdata]

#: (fault point, --until, tables the killed run must have committed, tables it must not have).
CHAIN = [
    ("after-journal", 4, {"journal"}, {"run_metrics", "knn_state"}),
    ("compaction", 8, {"journal"}, {"run_metrics", "knn_state"}),
    ("compaction-write", None, {"journal"}, {"run_metrics", "knn_state"}),
]


def state_data_files(warehouse: Path) -> set[str]:
    folder = warehouse / "tables" / "knn_state"
    return {str(p.relative_to(folder)) for p in folder.rglob("*.parquet") if "_delta_log" not in p.parts}


def test_kill_after_the_journal_and_during_compaction_then_rerun(prepared, tmp_path):
    T, m = prepared.timestamps, prepared.workers
    wh = prepared.restore()
    mb = lambda *a: h.app_cmd("microbatch.py", "--warehouse", str(wh), "--compaction", "always", *a)  # noqa: E731
    record: list[dict] = []
    for point, until, made, not_made in CHAIN:
        files_before = state_data_files(wh)
        versions_before = h.table_versions(wh)
        started = time.perf_counter()
        rec = h.run(mb(*(["--until", str(until)] if until else []), "--run-id", f"fault-{point}"), wh,
                    check=False, env=h.job_env(DKMSKS_FAULT_KILL_AT=point))
        committed = [c.detail for c in rec.commits()]
        tables = {c.split("@")[0] for c in committed}
        said = [line for line in rec.output.splitlines() if line.startswith("fault injection: phase")]
        orphans = sorted(state_data_files(wh) - files_before)
        record.append({"point": point, "until": until, "returncode": rec.returncode,
                       "seconds": round(time.perf_counter() - started, 1), "commits": committed,
                       "job_said": said, "new_knn_state_files": len(orphans),
                       "knn_state_version": [versions_before.get("knn_state"), h.table_versions(wh).get("knn_state")]})
        print(json.dumps(record[-1]))
        assert rec.returncode == -signal.SIGKILL, f"{point}: the run was not killed:\n{rec.tail()}"
        assert said and said[-1].startswith(f"fault injection: phase {point}:"), rec.tail()
        assert made <= tables and not tables & not_made, f"{point}: commits {committed}"
        if point == "compaction-write":
            # The MERGE had written into knn_state when it died; the log never took the file.
            assert orphans, "the kill came before the MERGE wrote a file"
    # The rerun: nothing pending, the compaction completes (and ignores the orphan files).
    final = h.run(mb("--run-id", "after-faults"), wh)
    final_commits = [c.detail for c in final.commits()]
    assert any(c.startswith("knn_state@") for c in final_commits), final_commits
    summary = inspect(wh, tmp_path / "after-faults", range(T + 1))
    (tmp_path / "crash-points.json").write_text(json.dumps({"chain": record, "final_commits": final_commits,
                                                             "final_seconds": round(final.duration, 1),
                                                             "leftover_files": h.leftover_files(wh)}, indent=1))
    print(json.dumps({"final_commits": final_commits, "final_seconds": round(final.duration, 1)}))
    assert_bookkeeping(summary, T, m)
    assert_exports_equal(tmp_path / "after-faults", prepared.oracle, range(T + 1),
                         "after the kills at after-journal, compaction, compaction-write vs dkm oracle")
