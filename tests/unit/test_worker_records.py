"""A worker task's output records (spark/worker_records.py) against rows written out by hand.

The records are kept as numpy pieces per column and made into one Arrow table at the end; the
expectation here is the plain list of row dicts each call stands for, in call order, with
nulls wherever a record kind has no value. Also: a keyword column re-encoded in a worker's
own vocabulary holds each row's words, sorted by the worker's ids.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from dkmsks.core.knn_state import StateArrays
from dkmsks.core.model import KeywordSets, Vocabulary
from dkmsks.spark.bridge import KeywordColumn
from dkmsks.spark.worker_records import OUTPUT_SCHEMA, WorkerRecords, no_results

WORKER = 7


def _row(**values):
    return {f.name: values.get(f.name) for f in OUTPUT_SCHEMA}


def _matrix(rng, n, width, k):
    """A kNN matrix of ``n`` rows: some entries present, the rest padded with id -1."""
    ids = np.full((n, width), -1, dtype=np.int64)
    d2 = np.full((n, width), np.inf)
    for i in range(n):
        present = int(rng.integers(0, width + 1))
        ids[i, :present] = rng.choice(1000, present, replace=False)
        d2[i, :present] = np.sort(rng.random(present))
    return ids, d2


def _kept(ids_row, values_row, k):
    """The first ``k`` present entries of one row (what a result holds)."""
    return [v for j, (i, v) in enumerate(zip(ids_row.tolist(), values_row.tolist(), strict=True)) if i >= 0 and j < k]


@pytest.mark.unit
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_records_are_the_rows_of_the_calls_in_order(seed):
    rng = np.random.default_rng(seed)
    records, expected, seq = WorkerRecords(WORKER), [], 0
    for t in (3, 4, 6):
        gone = rng.choice(10_000, int(rng.integers(0, 4)), replace=False).astype(np.int64)
        records.changes_of([(t, "delete", gone, None)])
        for sid in gone.tolist():
            seq += 1
            expected.append(_row(record="change", t=t, seq=seq, worker=WORKER, sub_id=sid, change="delete"))

        new = rng.choice(10_000, int(rng.integers(0, 3)), replace=False).astype(np.int64)
        records.changes_of([(t, "insert", new, no_results(new.shape[0]))])
        for sid in new.tolist():
            seq += 1
            expected.append(_row(record="change", t=t, seq=seq, worker=WORKER, sub_id=sid, change="insert",
                                 object_ids=[], d2=[]))

        n = int(rng.integers(0, 6))
        changed = rng.choice(10_000, n, replace=False).astype(np.int64)
        k = rng.integers(1, 5, n).astype(np.int32)
        ids, d2 = _matrix(rng, n, 5, k)
        records.changes_of([(t, "update", changed, (k, ids, d2))])
        for i, sid in enumerate(changed.tolist()):
            seq += 1
            expected.append(_row(record="change", t=t, seq=seq, worker=WORKER, sub_id=sid, change="update",
                                 object_ids=_kept(ids[i], ids[i], k[i]), d2=_kept(ids[i], d2[i], k[i])))

        records.metrics(np.array([t]), subscriptions=np.array([40 + t]), pairs_tested=np.array([7 * t]),
                        pairs_in_ball=np.array([t]), results_changed=np.array([n]), knn_ms=np.array([0.5 * t]),
                        insert_ms=np.array([0.25]), delete_ms=np.array([0.125]))
        expected.append(_row(record="metric", t=t, worker=WORKER, subscriptions=40 + t, pairs_tested=7 * t,
                             pairs_in_ball=t, results_changed=n, knn_ms=0.5 * t, insert_ms=0.25, delete_ms=0.125))

    vocab = Vocabulary()
    # Ids in an order that is not the words' order, and words no final row uses (only the used
    # ones are ranked).
    for word in ("tea", "bar", "aardvark", "cafe", "zoo", "art", "bean"):
        vocab.id_of(word)
    sets = [["zoo", "bar"], ["tea"], ["art", "cafe", "tea"]]
    ptr = np.cumsum([0] + [len(s) for s in sets]).astype(np.int64)
    kw = KeywordSets(ptr, np.array([vocab.id_of(w) for s in sets for w in s], dtype=np.int32))
    k = np.array([2, 1, 3], dtype=np.int32)
    ids, d2 = _matrix(rng, 3, 4, k)
    final = StateArrays(np.array([11, 12, 13], np.int64), np.array([0.5, 1.5, -2.0]), np.array([3.0, 4.0, 5.0]),
                        kw, k, np.array([0, 2, 5], np.int64), ids, d2)
    records.finals_upsert(final, np.array([3, 4, 6], np.int64), np.array([1, 2, 3], np.int64),
                          np.array([9, 8, 7], np.int64), np.array([0, -1, 2], np.int64), vocab)
    for i in range(3):
        expected.append(_row(record="final", t=[3, 4, 6][i], seq=i + 1, worker=WORKER, sub_id=11 + i, change="upsert",
                             object_ids=_kept(ids[i], ids[i], k[i]), d2=_kept(ids[i], d2[i], k[i]),
                             x=[0.5, 1.5, -2.0][i], y=[3.0, 4.0, 5.0][i], keywords=sorted(sets[i]), k=int(k[i]),
                             registered_t=[0, 2, 5][i], weight=[9, 8, 7][i], subset=[0, -1, 2][i]))
    records.finals_delete(np.array([21, 22], np.int64), np.array([4, 6], np.int64), np.array([5, 9], np.int64))
    expected += [_row(record="final", t=4, seq=5, worker=WORKER, sub_id=21, change="delete"),
                 _row(record="final", t=6, seq=9, worker=WORKER, sub_id=22, change="delete")]

    # The changes first, then the other records, each in call order.
    changes, others = records.tables()
    in_order = [r for r in expected if r["record"] == "change"] + [r for r in expected if r["record"] != "change"]
    assert changes.num_rows == sum(r["record"] == "change" for r in expected) > 0
    assert set(changes.column("record").to_pylist()) == {"change"}
    assert "change" not in others.column("record").to_pylist()
    for table in (records.table(), pa.concat_tables([changes, others])):
        want = pa.Table.from_pylist(in_order, schema=OUTPUT_SCHEMA)
        assert table.schema.equals(OUTPUT_SCHEMA)
        assert table.num_rows == len(expected)
        for name in OUTPUT_SCHEMA.names:  # column by column, so that a failure names the column
            assert table.column(name).to_pylist() == want.column(name).to_pylist(), name
    assert all(part.column(name).num_chunks == 1 for part in (changes, others) for name in OUTPUT_SCHEMA.names)


@pytest.mark.unit
def test_no_records_is_an_empty_table_of_the_schema():
    table = WorkerRecords(WORKER).table()
    assert table.num_rows == 0 and table.schema.equals(OUTPUT_SCHEMA)
    assert all(part.num_rows == 0 and part.schema.equals(OUTPUT_SCHEMA) for part in WorkerRecords(WORKER).tables())


@pytest.mark.unit
def test_a_string_column_has_nulls_where_no_piece_is_and_each_pieces_word():
    records = WorkerRecords(WORKER)
    records.metrics(np.array([2]), subscriptions=np.array([1]))
    records.finals_delete(np.array([5, 6], np.int64), np.array([2, 2], np.int64), np.array([1, 2], np.int64))
    records.metrics(np.array([3]), subscriptions=np.array([1]))
    _, others = records.tables()
    assert others.column("record").to_pylist() == ["metric", "final", "final", "metric"]
    assert others.column("change").to_pylist() == [None, "delete", "delete", None]


@pytest.mark.unit
def test_a_keyword_column_in_a_worker_vocabulary_holds_each_row_sorted_by_the_worker_ids():
    rng = np.random.default_rng(5)
    driver_words = [f"w{i}" for i in range(300)]
    rows = [sorted(rng.choice(300, int(rng.integers(0, 6)), replace=False).tolist()) for _ in range(500)]
    ptr = np.cumsum([0] + [len(r) for r in rows]).astype(np.int64)
    column = KeywordColumn.from_sets(KeywordSets(ptr, np.array([i for r in rows for i in r], np.int32)), driver_words)

    worker = Vocabulary()
    for i in rng.permutation(300).tolist()[:150]:  # a worker that knew half the words, in its own order
        worker.id_of(driver_words[i])
    encoded = column.encode(worker)
    assert encoded.ptr.tolist() == ptr.tolist()
    for i, row in enumerate(rows):
        assert encoded.ids[ptr[i]:ptr[i + 1]].tolist() == sorted(worker.lookup(driver_words[w]) for w in row)
    picked = column.encode(worker, rows=np.array([4, 2], np.int64))
    assert [picked.row(i).tolist() for i in range(2)] == [encoded.row(4).tolist(), encoded.row(2).tolist()]


_FIRST_RECORDS = """
import sys
import numpy as np
from dkmsks.spark.bridge import warm_arrow
from dkmsks.spark.worker_records import WorkerRecords, no_results
if sys.argv[1] == "warm":
    warm_arrow()
before = set(sys.modules)
out = WorkerRecords(3)
out.changes_of([(5, "insert", np.array([11, 12]), no_results(2))])
out.metrics(np.array([5]), subscriptions=np.array([2]), pairs_tested=np.array([0]))
out.table()
print(" ".join(sorted(m for m in set(sys.modules) - before if m.split(".")[0] == "pandas")))
"""


@pytest.mark.slow  # a fresh interpreter per case: seconds
@pytest.mark.parametrize("warm", [True, False])
def test_warm_arrow_leaves_the_first_records_no_import(warm: bool) -> None:
    """A follow worker task calls warm_arrow before it says it is ready: building its first
    records then imports nothing (pyarrow loads pandas at its first numpy conversion), which
    a task without the warm-up does, in its first round."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _FIRST_RECORDS, "warm" if warm else "cold"],
                          capture_output=True, text=True, check=True)
    imported = done.stdout.split()
    if warm:
        assert imported == [], imported
    else:
        assert "pandas" in imported  # what the warm-up takes out of the first round


@pytest.mark.unit
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_groups_records_made_in_one_go_are_those_of_one_call_each(seed):
    """changes_of and metrics with a probe group's records at once (WorkerSession._apply) give
    the rows and seq of the same calls made one at a time, which the test above checks against
    rows written out by hand: kinds with and without results, results of different widths, and
    empty calls among them."""
    rng = np.random.default_rng(seed)
    calls = []
    for t in (5, 6, 8):
        calls.append((t, "delete", rng.choice(10_000, int(rng.integers(0, 4)), replace=False).astype(np.int64), None))
        new = rng.choice(10_000, int(rng.integers(0, 3)), replace=False).astype(np.int64)
        calls.append((t, "insert", new, no_results(new.shape[0])))
        n = int(rng.integers(0, 6))
        k = rng.integers(1, 5, n).astype(np.int32)
        ids, d2 = _matrix(rng, n, 5, k)
        calls.append((t, "update", rng.choice(10_000, n, replace=False).astype(np.int64), (k, ids, d2)))
    assert sum(c[2].shape[0] for c in calls) > 0
    metrics = {"subscriptions": np.array([40, 41, 43]), "pairs_tested": np.array([7, 0, 9]),
               "pairs_in_ball": np.array([1, 0, 2]), "results_changed": np.array([3, 0, 1]),
               "knn_ms": np.array([0.5, 0.0, 0.25]), "insert_ms": np.array([0.1, 0.2, 0.3]),
               "delete_ms": np.array([0.0, 0.125, 0.5])}

    one_by_one, at_once = WorkerRecords(WORKER), WorkerRecords(WORKER)
    earlier = (2, "update", np.array([1], np.int64), (np.array([1], np.int32), np.array([[4]], np.int64),
                                                       np.array([[0.5]])))
    one_by_one.changes_of([earlier])
    at_once.changes_of([earlier])
    for call in calls:
        one_by_one.changes_of([call])
    for i, t in enumerate((5, 6, 8)):
        one_by_one.metrics(np.array([t]), **{name: values[i:i + 1] for name, values in metrics.items()})
    at_once.changes_of(calls)
    at_once.metrics(np.array([5, 6, 8], np.int64), **metrics)

    want, got = one_by_one.table(), at_once.table()
    assert got.num_rows == want.num_rows > 4
    for name in OUTPUT_SCHEMA.names:
        assert got.column(name).to_pylist() == want.column(name).to_pylist(), name
    for mine, theirs in zip(at_once.last_changes(), one_by_one.last_changes(), strict=True):
        np.testing.assert_array_equal(mine, theirs)
