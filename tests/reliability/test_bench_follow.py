"""``dkm bench follow``: several warm catch-up rounds on a small real warehouse, their median,
and the results they commit equal to the brute-force oracle.

One catch-up round is one sample of a machine whose speed drifts by more than 10 % within
an hour (docs/benchmarks.md), so the benchmark takes ``--repeats`` rounds and reports their
median beside the one-timestamp rounds of the same run. A benchmark that processed the
wrong timestamps, counted objects it did not apply or left the warehouse wrong would still
print a number: this checks what it processed against the workload file and the oracle.
"""

from __future__ import annotations

import csv
import gzip
import json
import statistics
from collections import Counter
from pathlib import Path

import pytest

from conftest import require_real_data

from . import rel_harness as h
from .conftest import oracle_exports

pytestmark = [pytest.mark.reliability, pytest.mark.e2e]

O_INIT, SUBSCRIPTIONS, TIMESTAMPS, WORKERS = 2000, 300, 7, 3


def _change_files_per_commit(journal: Path) -> dict[int, int]:
    """Per journal commit (by its application transaction's version, the last timestamp it
    commits): how many files of changes it added."""
    out = {}
    for log in sorted((journal / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        txn = [a["txn"]["version"] for a in actions if "txn" in a]
        if txn:
            out[txn[0]] = sum(1 for a in actions if "add" in a and a["add"]["partitionValues"]["record"] == "change")
    return out


def _changes_per_t(warehouse: Path) -> Counter:
    """Changes per timestamp from a read of the journal without a predicate (no file skipped)."""
    from dkmsks.storage.lake import Lake
    from dkmsks.warehouse import Warehouse

    rows = Lake.of(Warehouse(warehouse)).read("journal", columns=["record", "t"])
    return Counter(t for record, t in zip(rows.column("record").to_pylist(), rows.column("t").to_pylist(),
                                          strict=True) if record == "change")


def _sql_rows(output: str) -> list[tuple[int, int]]:
    """The ``(t, n)`` rows of a table ``dkm sql`` printed."""
    cells = [line.strip("|").split("|") for line in output.splitlines() if line.startswith("|")]
    return [(int(a), int(b)) for a, b in cells[1:]]  # the first is the header


def _objects_per_t(objects: Path) -> Counter:
    with gzip.open(objects, "rt", encoding="utf-8", newline="") as f:
        return Counter(int(row["t"]) for row in csv.DictReader(f, delimiter="\t"))


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """A partitioned warehouse at t = 0 with t = 1..7 published and pending."""
    source = require_real_data()
    root = tmp_path_factory.mktemp("bench-follow")
    objects, events, warehouse = h.partitioned_at_t0(source, root, o_init=O_INIT, subscriptions=SUBSCRIPTIONS,
                                                     timestamps=TIMESTAMPS, workers=WORKERS, seed=31)
    h.run(h.dkm_cmd("publish", "--objects", str(objects), "--events", str(events), "--warehouse", str(warehouse),
                    "--timestamps", str(TIMESTAMPS)), timeout=300)
    return root, objects, events, warehouse


def test_flags_out_of_range_and_too_few_pending_timestamps_are_refused_before_spark(published):
    _, _, _, warehouse = published
    bad = h.run(h.dkm_cmd("bench", "follow", "--warehouse", str(warehouse), "--backlog", "3", "--repeats", "0"),
                check=False, timeout=120)
    assert bad.returncode == 2
    assert "--repeats take a number >= 1" in bad.output
    short = h.run(h.dkm_cmd("bench", "follow", "--warehouse", str(warehouse), "--timestamps", "2",
                            "--backlog", "3", "--repeats", "2"), check=False, timeout=120)
    assert short.returncode == 2
    assert f"need a partitioned warehouse with >= 8 pending timestamps (found {TIMESTAMPS})" in short.output


def test_repeated_catch_up_rounds_report_their_median_and_commit_the_oracles_results(published):
    root, objects, events, warehouse = published
    out_json = root / "follow.json"
    # Rounds of 300 objects or more (the catch-up rounds here) have their changes written by
    # the worker tasks; the one-timestamp round's go through the driver's append.
    run = h.run(h.dkm_cmd("bench", "follow", "--warehouse", str(warehouse), "--timestamps", "1", "--backlog", "3",
                          "--repeats", "2", "--task-changes-from", str(3 * h.OBJECTS_PER_T), "--json", str(out_json)),
                warehouse, timeout=900)
    result = json.loads(out_json.read_text())
    per_t = _objects_per_t(objects)

    # One one-timestamp round (t = 1), then two rounds of three timestamps each, in order.
    assert [r["t"] for r in result["rounds"]] == [1]
    rounds = result["backlog_rounds"]
    assert [(c["first_t"], c["last_t"], c["timestamps"]) for c in rounds] == [(2, 4, 3), (5, 7, 3)]
    for c in rounds:
        assert c["objects"] == sum(per_t[t] for t in range(c["first_t"], c["last_t"] + 1))
        assert c["objects_per_s"] == pytest.approx(c["objects"] / c["seconds"])
    rates = [c["objects_per_s"] for c in rounds]
    assert result["backlog_median_objects_per_s"] == pytest.approx(statistics.median(rates))
    assert result["backlog"] in rounds  # the round that stands for the run (the lower middle one)
    assert result["backlog"]["objects_per_s"] == min(rates)
    assert result["one_timestamp_objects_per_s"] == pytest.approx(per_t[1] / result["rounds"][0]["seconds"])
    assert "warm catch-up: 2 rounds of 3 timestamps" in run.output
    assert "x the one-timestamp rounds of this run" in run.output

    # What the rounds committed is the oracle's answer at every timestamp they processed.
    oracle = oracle_exports(objects, events, range(1, TIMESTAMPS + 1), root / "oracle")
    for t in range(1, TIMESTAMPS + 1):
        path = root / f"export-{t}.jsonl"
        h.run(h.dkm_cmd("export", "--warehouse", str(warehouse), "--as-of", str(t), "--out", str(path)))
        assert path.read_bytes() == oracle[t].read_bytes(), f"dkm export --as-of {t} differs from the oracle"

    # Who wrote the changes: one file through the driver for t = 1, one per worker task after.
    change_files = _change_files_per_commit(warehouse / "tables" / "journal")
    assert change_files[1] == 1
    assert change_files[4] == change_files[7] == 2  # two worker tasks (one per core) host the 3 workers
    # Spark reads the tasks' files, its data skipping trusting their statistics: its counts
    # per timestamp, with t in the filter, are those of a full read without any skipping.
    counts = _changes_per_t(warehouse)
    sql = h.run(h.dkm_cmd("sql", "--warehouse", str(warehouse), "SELECT t, count(*) AS n FROM result_changes "
                          "WHERE t IN (1, 3, 6) GROUP BY t ORDER BY t"), timeout=300)
    assert _sql_rows(sql.output) == [(t, counts[t]) for t in (1, 3, 6)]
    assert all(counts[t] > 0 for t in (1, 3, 6))
