"""Load, scaled down: a backlog of 1,000 timestamps processed in ONE micro-batch run.

The heavy version is ``dkm bench backlog`` at the paper's rates (docs/reliability.md);
this test runs the same benchmark on 1,000 timestamps of 20 objects, 2 insertions and 2
deletions each, and checks that the run ends well, that every timestamp is in the ledger
exactly once, that the last timestamp equals the oracle, and that the per-timestamp work
(pairs tested: noise-free, docs/design.md §3 fact 4) is steady at the end of the run: the last 100
timestamps cost no more than the 100 before them.

Why not "first 100 vs last 100": the first timestamps are a transient. Initial subscriptions
start with their exact kNN within ``O_init`` (small balls); a subscription inserted later
starts empty and sees only the stream (docs/design.md §1), 20 objects per timestamp here, so once the
population has turned over, balls are larger and more pairs must be tested; and the stream
reaches regions ``O_init`` did not cover (measured in memory on this workload, pairs tested per
timestamp by window of 100: 47, 52, 50, 59, 52, 112, 150, 154, 153, 130; docs/reliability.md).
"""

from __future__ import annotations

import json

import pytest

from conftest import require_real_data

from . import rel_harness as h

pytestmark = [pytest.mark.reliability, pytest.mark.realdata]

T = 1000


def test_a_backlog_of_1000_timestamps_in_one_run(tmp_path):
    require_real_data()
    rec = h.run([h.PYTHON, "-m", "dkmsks.cli", "bench", "backlog", "--o-init", "2000", "--subscriptions", "200",
                 "--timestamps", str(T), "--objects-per-ts", "20", "--inserts-per-ts", "2", "--deletes-per-ts", "2",
                 "--k-max", "5", "--workers", "3", "--partition-args", "--gamma1 40 --theta 4 --grid 256",
                 "--verify", "yes", "--workdir", str(tmp_path)], None, timeout=1800)
    results = json.loads((tmp_path / "results.json").read_text())
    print(json.dumps({k: results[k] for k in ("steps", "metrics")}, indent=1))
    m = results["metrics"]
    assert m["ledger"] == {"rows": T + 1, "distinct": T + 1, "last": T}, m["ledger"]
    assert m["per_timestamp_rows"] == T
    assert results["export_equals_oracle"] is True
    first, last = m["first_100"], m["last_100"]
    assert rec.returncode == 0
    # The live set stays the same size and the work that must be done (pairs in a ball) too...
    assert last["live_subscriptions_mean"] <= 1.2 * first["live_subscriptions_mean"]
    assert last["pairs_in_ball_mean"] <= 1.5 * first["pairs_in_ball_mean"] + 10, (first, last)
    # ...and the work done (pairs tested) is steady once the transient is over.
    prev = m["previous_100"]
    assert last["pairs_tested_mean"] <= 1.5 * prev["pairs_tested_mean"] + 50, (first, prev, last)
