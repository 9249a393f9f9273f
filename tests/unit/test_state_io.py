"""The current-state overlay (knn_state snapshot + journal tail) and the typed predicates."""

from __future__ import annotations

import pyarrow as pa
import pytest

from dkmsks.spark.lake import where
from dkmsks.spark.state_io import overlay

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

    from dkmsks.spark.export import _last_change_per_subscription

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
    last = _last_change_per_subscription(changes).sort_by("sub_id").to_pylist()
    assert [(r["sub_id"], r["t"], r["change"], r["object_ids"]) for r in last] == [
        (1, 3, "update", [30]), (2, 4, "insert", [41]), (3, 5, "delete", []), (4, 6, "update", [61])]
