"""The run's journal append (dkmsks.storage.journal.journal_records + commit) through delta-rs.

The workers' records reach the append in the order the workers wrote them, the kinds
interleaved; the table's ``record`` partition sorts them out. What each kind's partition holds,
row for row and in the order read back, must be what the workers wrote of that kind; a record of
no known kind is refused before anything is written.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from tests.lake_tables import create_tables

from dkmsks.spark.main_server import RoutedBatch
from dkmsks.storage import tables
from dkmsks.storage.journal import commit, journal_records
from dkmsks.warehouse import Warehouse

pytestmark = pytest.mark.unit


def _worker_records(rng: np.random.Generator, n: int) -> pa.Table:
    """``n`` records of the three worker kinds in a random interleaving, each row numbered."""
    kinds = rng.choice(["change", "final", "metric"], size=n)
    sub = rng.integers(0, 1_000_000, size=n)
    lengths = rng.integers(0, 4, size=n)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    ids = rng.integers(0, 10**9, size=int(offsets[-1]))
    return pa.table({
        "record": pa.array(kinds.tolist()),
        "t": pa.array(rng.integers(1, 4, size=n), type=pa.int64()),
        "seq": pa.array(np.arange(n), type=pa.int64()),
        "worker": pa.array(rng.integers(0, 4, size=n).astype(np.int32)),
        "sub_id": pa.array(sub, type=pa.int64()),
        "change": pa.array([("update" if k == "change" else None) for k in kinds.tolist()], type=pa.string()),
        "object_ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(ids, type=pa.int64())),
        "d2": pa.ListArray.from_arrays(pa.array(offsets), pa.array(rng.random(int(offsets[-1])))),
        # the row's number, to find it again: a metric's pairs_tested, never compared by the code under test
        "pairs_tested": pa.array(np.arange(n), type=pa.int64()),
    })


def _routed(timestamps: list[int]) -> RoutedBatch:
    return RoutedBatch(payload=None, counts={t: (10 * t, t, 0) for t in timestamps})  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_each_kind_lands_in_its_partition_in_the_workers_order(tmp_path, seed) -> None:
    rng = np.random.default_rng(seed)
    out = _worker_records(rng, 3_000)
    lake = create_tables(Warehouse(tmp_path / "wh"))
    records = journal_records(out, plan_version=4, routed=_routed([1, 2, 3]), timestamps=[1, 2, 3], from_t=0,
                              run_id="run-x")
    assert commit(lake, records, 3)

    written = lake.read(tables.JOURNAL)
    written_kind = np.asarray(written.column("record").to_pylist())
    out_kind = np.asarray(out.column("record").to_pylist())
    for kind in ("change", "final", "metric"):
        mine = np.flatnonzero(out_kind == kind)
        theirs = np.flatnonzero(written_kind == kind)
        assert len(theirs) == len(mine) > 0
        # read back as recorded: the export's last change of a subscription breaks its last
        # tie by this order (dkmsks.storage.export.last_change_rows)
        got = written.take(pa.array(theirs))
        assert got.column("pairs_tested").to_pylist() == mine.tolist()
        want = out.take(pa.array(mine))
        for column in ("t", "sub_id", "worker", "change", "object_ids", "d2"):
            assert got.column(column).to_pylist() == want.column(column).to_pylist(), (kind, column)
        assert set(got.column("plan_version").to_pylist()) == {4}
        assert set(got.column("run_id").to_pylist()) == {"run-x"}
    ledger = written.filter(pa.compute.equal(written.column("record"), "ledger")).sort_by("t")
    assert ledger.column("t").to_pylist() == [1, 2, 3]
    assert ledger.column("objects").to_pylist() == [10, 20, 30]
    assert ledger.column("run_through_t").to_pylist() == [3, 3, 3]


def test_a_record_of_no_known_kind_is_refused_before_the_append(tmp_path) -> None:
    out = _worker_records(np.random.default_rng(5), 50)
    kinds = out.column("record").to_pylist()
    kinds[17] = "ledger"  # only the run writes ledger records
    kinds[30] = None
    out = out.set_column(0, "record", pa.array(kinds))
    with pytest.raises(ValueError, match="neither a change, a final nor a metric") as failure:
        journal_records(out, plan_version=1, routed=_routed([1]), timestamps=[1], from_t=0, run_id="r")
    assert "ledger" in str(failure.value)
