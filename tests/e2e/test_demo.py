"""The README's main job (`make demo` runs scripts/demo.sh) end to end, what it prints against the oracle."""

from __future__ import annotations

import math
import os
import subprocess

import pytest

from conftest import REPO, require_real_data
from dkmsks.core.model import Op, Vocabulary
from dkmsks.core.oracle import oracle_results
from dkmsks.io.formats import read_events, read_objects

pytestmark = [pytest.mark.e2e, pytest.mark.realdata]

# Small enough for a test, with churn enough that the generator (seed 0) deletes subscriptions 0
# and 2 by t = 3: a demo that picked its three subscriptions from the t = 0 snapshot (knn_state)
# instead of the current state would print results for fewer of them.
O_INIT, SUBSCRIPTIONS, TIMESTAMPS, WORKERS = 3000, 400, 3, 4
PRINTED_ROWS = 15  # the demo's `--limit`


def printed_table(stdout: str) -> list[list[str]]:
    """The cells of the table `dkm sql` printed (Spark's `show`), header first."""
    return [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in stdout.splitlines() if line.startswith("|")]


def test_the_demo_prints_the_exact_current_results_of_the_first_three_live_subscriptions(tmp_path):
    require_real_data()
    env = dict(os.environ, DEMO_O_INIT=str(O_INIT), DEMO_SUBSCRIPTIONS=str(SUBSCRIPTIONS),
               DEMO_TIMESTAMPS=str(TIMESTAMPS), DEMO_WORKERS=str(WORKERS), DEMO_WORKDIR=str(tmp_path))
    done = subprocess.run([str(REPO / "scripts" / "demo.sh")], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"

    workload = tmp_path / f"workload-o{O_INIT}-s{SUBSCRIPTIONS}-t{TIMESTAMPS}"
    vocab = Vocabulary()
    objects = read_objects(workload / "objects.tsv.gz", vocab).objects
    events = read_events(workload / "events.tsv.gz", vocab).events
    deleted = set(events.ids[events.op == Op.DELETE].tolist())
    assert {0, 2} <= deleted, "the workload no longer deletes what this test is about; pick other sizes"

    expected_results = oracle_results(objects, events, TIMESTAMPS)
    first_three = sorted(expected_results)[:3]
    row_of = {int(i): r for r, i in enumerate(objects.ids)}
    expected = []
    for sub_id in first_three:
        result = expected_results[sub_id]
        for rank, (object_id, d2) in enumerate(zip(result.object_ids, result.d2, strict=True), start=1):
            words = sorted(vocab.word(w) for w in objects.keywords.row(row_of[int(object_id)]))
            expected.append((sub_id, rank, int(object_id), math.sqrt(d2), words))
    expected = expected[:PRINTED_ROWS]
    assert expected, "the oracle gives the first three live subscriptions no result at all"

    header, *rows = printed_table(done.stdout)
    assert header == ["sub_id", "rank", "object_id", "distance", "object_keywords"]
    assert len(rows) == len(expected), f"printed {rows}, the oracle's rows are {expected}"
    for cells, (sub_id, rank, object_id, distance, words) in zip(rows, expected, strict=True):
        assert (int(cells[0]), int(cells[1]), int(cells[2])) == (sub_id, rank, object_id), (cells, expected)
        # The demo prints round(distance, 5).
        assert abs(float(cells[3]) - distance) <= 5e-6 + 1e-12, (cells, distance)
        assert sorted(cells[4].strip("[]").split(", ")) == words, (cells, words)
