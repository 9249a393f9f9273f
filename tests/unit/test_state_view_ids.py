"""StateView.read for a few subscriptions: both delta-rs scans filtered by ``sub_id IN (...)``
give exactly the rows of the whole current state for those ids (the publisher's liveness check
asks about ~100 ids; the whole overlay at |S| = 10M cost it ~1 s)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import write_deltalake

from dkmsks.storage.lake import Lake, where
from dkmsks.storage.state_io import StateView

pytestmark = pytest.mark.unit


def _lake(tmp_path: Path) -> Lake:
    """A knn_state snapshot (two appends) and a journal tail with upserts, deletes and
    re-registrations at equal t, some before the snapshot's mark and some of another plan."""
    rng = np.random.default_rng(5)
    lake = Lake({"knn_state": str(tmp_path / "knn_state"), "journal": str(tmp_path / "journal")})
    subs = rng.permutation(400)[:300].astype(np.int64)
    for part in np.array_split(subs, 2):
        write_deltalake(lake.uris["knn_state"], pa.table({
            "plan_version": pa.array(np.full(part.shape[0], 3), pa.int64()), "worker": pa.array(part % 4, pa.int32()),
            "sub_id": pa.array(part), "updated_t": pa.array(rng.integers(0, 6, part.shape[0]), pa.int64())}),
            mode="append")
    # One final record per (subscription, t), as runs write them, plus a delete beside some
    # upserts (deleted on one worker, registered again on another at the same t).
    n = 600
    key = rng.choice(450 * 9, n, replace=False)
    sub, t = (key // 9).astype(np.int64), (key % 9 + 3).astype(np.int64)
    change = np.where(rng.random(n) < 0.3, "delete", "upsert")
    again = np.flatnonzero((change == "upsert") & (rng.random(n) < 0.2))
    sub, t = np.concatenate([sub, sub[again]]), np.concatenate([t, t[again]])
    change = np.concatenate([change, np.full(again.shape[0], "delete")])
    m = sub.shape[0]
    order = rng.permutation(m)  # file order must not matter
    tail = pa.table({
        "record": pa.array(np.where(rng.random(m) < 0.97, "final", "change")[order]),
        "plan_version": pa.array(np.where(rng.random(m) < 0.9, 3, 2)[order], pa.int64()),
        "t": pa.array(t[order]), "worker": pa.array(rng.integers(0, 4, m)[order], pa.int32()),
        "sub_id": pa.array(sub[order]), "change": pa.array(change[order]),
    })
    for part in (tail.slice(0, m // 2), tail.slice(m // 2)):
        write_deltalake(lake.uris["journal"], part, mode="append")
    return lake


@pytest.mark.parametrize("limit", [1000, 50])  # all sizes through the predicate; the larger ones filtered after
def test_reading_a_few_ids_equals_the_whole_state_restricted_to_them(tmp_path: Path, monkeypatch, limit) -> None:
    from dkmsks.storage import lake as lake_module

    monkeypatch.setattr(lake_module, "PREDICATE_IDS", limit)
    lake = _lake(tmp_path)
    view = StateView.open(lake)
    assert view.through_t == 5 and view.plan_version == 3
    columns = ["sub_id", "worker", "updated_t"]
    whole = view.read(columns=columns).sort_by("sub_id")
    assert 0 < whole.num_rows < 450
    rng = np.random.default_rng(9)
    for size in (1, 7, 100, 460):
        ids = rng.choice(500, size, replace=False).tolist()  # ids live, deleted and never seen
        got = view.read(columns=columns, sub_ids=ids).sort_by("sub_id")
        want = whole.filter(pc.is_in(whole.column("sub_id"), value_set=pa.array(ids, pa.int64())))
        assert got.schema == want.schema, (size, got.schema, want.schema)
        assert got.to_pylist() == want.to_pylist(), size
        for w in range(4):  # and together with a worker filter
            got_w = view.read(columns=columns, worker=w, sub_ids=ids).sort_by("sub_id")
            whole_w = view.read(columns=columns, worker=w)
            assert got_w.equals(whole_w.filter(pc.is_in(whole_w.column("sub_id"),
                                                         value_set=pa.array(ids, pa.int64()))).sort_by("sub_id"))


def test_where_in() -> None:
    assert where(sub_id__in=[3, 1]) == "sub_id IN (3, 1)"
    assert where(worker__eq=2, sub_id__in=np.array([7])) == "worker = 2 AND sub_id IN (7)"
    assert where(sub_id__in=None) is None
    with pytest.raises(ValueError, match="empty list"):
        where(sub_id__in=[])


def test_live_among_follows_the_rule_by_brute_force_and_agrees_with_read(tmp_path: Path, monkeypatch) -> None:
    lake = _lake(tmp_path)
    view = StateView.open(lake)
    snapshot = set(lake.read("knn_state", columns=["sub_id"]).column("sub_id").to_pylist())
    finals: dict[int, list[tuple[int, str]]] = {}
    for r in lake.read("journal").to_pylist():
        if r["record"] == "final" and r["plan_version"] == view.plan_version and r["t"] > view.through_t:
            finals.setdefault(r["sub_id"], []).append((r["t"], r["change"]))

    def live(sub: int) -> bool:  # the module's rule, record by record
        if sub not in finals:
            return sub in snapshot
        newest = max(t for t, _ in finals[sub])
        return any(change == "upsert" for t, change in finals[sub] if t == newest)

    rng = np.random.default_rng(11)
    cached = []  # which calls found the snapshot's ids kept: none the first, every later one
    real = Lake.sorted_values_on_reuse

    def spying(self, *args, **kwargs):
        got = real(self, *args, **kwargs)
        cached.append(got is not None)
        return got

    monkeypatch.setattr(Lake, "sorted_values_on_reuse", spying)
    for size in (1, 7, 100, 460, 3, 250):
        ids = rng.choice(500, size, replace=False)  # ids live, deleted and never seen
        ids = np.concatenate([ids, ids[: size // 3]])  # repeats are answered once
        got = view.live_among(ids)
        assert got.tolist() == sorted(s for s in set(ids.tolist()) if live(s)), size
        assert got.tolist() == sorted(view.read(columns=["sub_id"], sub_ids=ids.tolist()).column("sub_id").to_pylist())
    assert cached == [False, True, True, True, True, True]
