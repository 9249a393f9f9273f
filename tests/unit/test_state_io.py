"""The current-state overlay (knn_state snapshot + journal tail) and the typed predicates."""

from __future__ import annotations

import pyarrow as pa
import pytest

from dkmsks.storage.lake import where
from dkmsks.storage.state_io import overlay

pytestmark = pytest.mark.unit

COLUMNS = ["sub_id", "worker", "object_ids", "updated_t"]


def _snapshot():
    return pa.table({"sub_id": [1, 2, 3], "worker": pa.array([0, 1, 0], pa.int32()),
                     "object_ids": [[10], [20], [30]], "updated_t": [0, 0, 2]})


def test_newest_tail_record_wins_deletes_drop_and_new_subscriptions_appear():
    tail = pa.table({
        "sub_id": [2, 2, 3, 4, 5, 5],
        "t": [3, 5, 4, 5, 4, 6],
        "change": ["upsert", "upsert", "delete", "upsert", "upsert", "delete"],
        "worker": pa.array([1, 1, 0, 1, 0, 0], pa.int32()),
        "object_ids": [[21], [22], None, [40], [50], None],
    })
    got = overlay(_snapshot(), tail, COLUMNS).sort_by("sub_id").to_pylist()
    assert got == [
        {"sub_id": 1, "worker": 0, "object_ids": [10], "updated_t": 0},
        {"sub_id": 2, "worker": 1, "object_ids": [22], "updated_t": 5},
        {"sub_id": 4, "worker": 1, "object_ids": [40], "updated_t": 5},
    ]


def test_an_empty_tail_is_the_snapshot():
    assert overlay(_snapshot(), pa.table({"sub_id": pa.array([], pa.int64()), "t": pa.array([], pa.int64()),
                                          "change": pa.array([], pa.string())}), COLUMNS).equals(_snapshot())


def test_predicates_render_typed_values_only():
    assert where(record__eq="final", t__gt=5, worker__eq=None, t__le=9) == "record = 'final' AND t > 5 AND t <= 9"
    assert where() is None
    with pytest.raises(ValueError, match="constant words"):
        where(record__eq="x' OR 1=1 --")
    with pytest.raises(ValueError, match="bad condition"):
        where(**{"t; DROP__gt": 1})
    with pytest.raises(ValueError):
        where(t__gt="5 OR 1=1")


@pytest.mark.parametrize("delete_first", [True, False])
def test_a_subscription_deleted_and_registered_again_at_one_timestamp_is_live(delete_first):
    # Deleted on worker 0 and registered again on worker 1 at t=4: two final records with
    # equal t, in whatever order the workers' rows were written. Deletions apply first within
    # a timestamp (docs/design.md §1), so the subscription is live on worker 1.
    records = [("delete", 0, None), ("upsert", 1, [31])]
    if not delete_first:
        records.reverse()
    tail = pa.table({
        "sub_id": [3, 3], "t": [4, 4], "change": [c for c, _, _ in records],
        "worker": pa.array([w for _, w, _ in records], pa.int32()), "object_ids": [o for _, _, o in records],
    })
    got = overlay(_snapshot(), tail, COLUMNS).sort_by("sub_id").to_pylist()
    assert got[-1] == {"sub_id": 3, "worker": 1, "object_ids": [31], "updated_t": 4}
    assert [r["sub_id"] for r in got] == [1, 2, 3]


def test_the_export_applies_each_subscriptions_changes_in_protocol_order():
    """The result changes after a snapshot, given out of order: per subscription, by
    timestamp, and within one timestamp deletion < insertion < update (docs/design.md §1)."""
    import pyarrow as pa

    from dkmsks.storage.export import change_kinds, last_change_rows

    rows = [  # (t, sub_id, change, object_ids)
        (3, 1, "update", [30]),
        (2, 1, "insert", [20]),
        (4, 2, "insert", [41]),  # deleted on one worker, registered on another at t = 4
        (4, 2, "delete", []),
        (5, 3, "delete", []),
        (4, 3, "update", [40]),
        (6, 4, "update", [61]),
        (6, 4, "insert", [60]),
    ]
    changes = pa.table({"t": [r[0] for r in rows], "sub_id": [r[1] for r in rows],
                        "change": [r[2] for r in rows], "object_ids": [r[3] for r in rows]})
    picked = last_change_rows(changes.column("sub_id").to_numpy(), changes.column("t").to_numpy(),
                              change_kinds(changes.column("change")))
    last = changes.take(picked).to_pylist()
    assert [(r["sub_id"], r["t"], r["change"], r["object_ids"]) for r in last] == [
        (1, 3, "update", [30]), (2, 4, "insert", [41]), (3, 5, "delete", []), (4, 6, "update", [61])]


def _replay(state_rows, change_rows):
    """The expected export rows by a plain replay: each change in protocol order (timestamp,
    then deletion < insertion < update, then as recorded) replaces or removes its row."""
    rank = {"delete": 0, "insert": 1, "update": 2}
    current = {r["sub_id"]: r for r in state_rows}
    ordered = sorted(enumerate(change_rows), key=lambda ir: (ir[1]["t"], rank[ir[1]["change"]], ir[0]))
    for _, c in ordered:
        if c["change"] == "delete":
            current.pop(c["sub_id"], None)
        else:
            current[c["sub_id"]] = {"sub_id": c["sub_id"], "object_ids": c["object_ids"], "d2": c["d2"]}
    return [current[s] for s in sorted(current)]


@pytest.mark.parametrize("seed", range(6))
def test_the_exports_rows_equal_a_replay_of_the_changes_over_the_snapshot(seed):
    """The snapshot in unsorted chunks, changes of known and new subscriptions over several
    timestamps (deletions, re-registrations at equal t): one row per live subscription, by
    sub_id, with what its last change says."""
    import numpy as np

    from dkmsks.storage.export import _apply_changes

    rng = np.random.default_rng(seed)
    schema = pa.schema([pa.field("sub_id", pa.int64(), nullable=False),
                        pa.field("object_ids", pa.list_(pa.int64()), nullable=False),
                        pa.field("d2", pa.list_(pa.float64()), nullable=False)])
    ids = rng.permutation(np.arange(0, 400, 2))  # even ids in the snapshot; odd ones are new
    state_rows = [{"sub_id": int(s), "object_ids": [int(s) * 10], "d2": [float(s)]} for s in ids]
    chunks = [pa.Table.from_pylist(state_rows[i:i + 37], schema=schema) for i in range(0, len(state_rows), 37)]
    state = pa.concat_tables(chunks)
    change_rows = []
    for i in range(300):
        kind = str(rng.choice(["delete", "insert", "update"]))
        live = kind != "delete"
        change_rows.append({"t": int(rng.integers(1, 6)), "sub_id": int(rng.integers(0, 420)), "change": kind,
                            "object_ids": [i] if live else None, "d2": [i / 7] if live else None})
    changes = pa.concat_tables([pa.Table.from_pylist(change_rows[:150]), pa.Table.from_pylist(change_rows[150:])])
    got = _apply_changes(state, changes)
    assert got.schema == schema
    assert got.to_pylist() == _replay(state_rows, change_rows)
    assert _apply_changes(state, changes.slice(0, 0)).to_pylist() == _replay(state_rows, [])


def test_an_unknown_change_kind_is_an_error_naming_it():
    from dkmsks.storage.export import change_kinds

    with pytest.raises(ValueError, match="neither a delete, an insert nor an update"):
        change_kinds(pa.array(["insert", "upsert"]))
