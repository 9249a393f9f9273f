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
    run = h.run(h.dkm_cmd("bench", "follow", "--warehouse", str(warehouse), "--timestamps", "1", "--backlog", "3",
                          "--repeats", "2", "--json", str(out_json)), warehouse, timeout=900)
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
