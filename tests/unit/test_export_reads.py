"""The results of a few subscriptions read through the scans' predicate equal those of the
whole export (dkm results and the client take that path; dkm export the other)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from dkmsks.storage import export
from dkmsks.storage import lake as lake_module
from dkmsks.storage.journal import commit
from dkmsks.storage.lake import Lake
from lake_tables import partitioned_warehouse

pytestmark = pytest.mark.unit

O_INIT = [(1, 0.1, 0.1, ["cafe"], 0), (2, 0.2, 0.2, ["bar"], 0)]
LIVE = [(s, 0.1 * (s - 99), 0.1, ["cafe"], 1) for s in range(100, 105)]  # registered at T0 = 0


@pytest.fixture
def lake(tmp_path):
    lake = Lake.of(partitioned_warehouse(tmp_path / "wh", objects=O_INIT, subscriptions=LIVE))
    changes = [("update", 101, [2], [0.5]), ("insert", 200, [1], [0.25]), ("delete", 102, [], [])]
    commit(lake, pa.table({
        "record": ["change"] * len(changes) + ["ledger"], "t": [1] * (len(changes) + 1),
        "plan_version": [0] * (len(changes) + 1), "run_id": ["r"] * (len(changes) + 1),
        "sub_id": [c[1] for c in changes] + [None], "change": [c[0] for c in changes] + [None],
        "object_ids": pa.array([c[2] for c in changes] + [None], pa.list_(pa.int64())),
        "d2": pa.array([c[3] for c in changes] + [None], pa.list_(pa.float64())),
    }), 1)
    return lake


def test_the_whole_export_applies_the_changes(lake):
    t, table = export.results_table_as_of(lake)
    rows = {r["sub_id"]: (r["object_ids"], r["d2"]) for r in table.to_pylist()}
    assert t == 1
    assert sorted(rows) == [100, 101, 103, 104, 200]
    assert rows[101] == ([2], [0.5]) and rows[200] == ([1], [0.25]) and rows[100] == ([], [])


@pytest.mark.parametrize("limit", [lake_module.PREDICATE_IDS, 1])  # through the predicate; filtered after the read
@pytest.mark.parametrize("picked", [[101], [102], [200, 100], [999], [104, 101, 200, 103]])
def test_a_few_subscriptions_read_as_the_whole_export_has_them(lake, monkeypatch, picked, limit):
    monkeypatch.setattr(lake_module, "PREDICATE_IDS", limit)
    _, whole = export.results_table_as_of(lake)
    t, few = export.results_table_as_of(lake, sub_ids=picked)
    assert t == 1
    assert few.to_pylist() == [r for r in whole.to_pylist() if r["sub_id"] in picked]
