"""KnnState's sub id -> row map, both kinds (dkmsks.core.sub_map: the numpy reference, a large
sorted part with deletion marks and a small sorted part of recent ids, with merges forced at
several sizes; the compiled hash table): random registrations and deletions (at once and
retiring), ids registered again after their deletion, against a dict."""

from __future__ import annotations

import numpy as np
import pytest

from dkmsks.core import sub_map as sub_map_module
from dkmsks.core.jit import KERNELS
from dkmsks.core.knn_state import KnnState
from dkmsks.core.model import KeywordSets, Subscriptions

pytestmark = pytest.mark.unit


def _subs(ids: list[int]) -> Subscriptions:
    n = len(ids)
    return Subscriptions(np.array(ids, dtype=np.int64), np.arange(n, dtype=np.float64), np.zeros(n),
                         KeywordSets.from_lists([[1]] * n), np.ones(n, dtype=np.int32), np.zeros(n, dtype=np.int64))


@pytest.mark.parametrize("kernel", KERNELS)  # numba is a dependency: no case goes missing without it
@pytest.mark.parametrize("small", [1, 7, 64, 1024])
def test_map_against_a_dict(small: int, kernel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sub_map_module, "MAP_SMALL", small)  # the sorted map's merges
    rng = np.random.default_rng(small)
    state = KnnState(kernel=kernel)
    ref: dict[int, int] = {}  # id -> row
    pool = np.arange(0, 3000, 3)  # ids come back after their deletion
    for step in range(150):
        free = np.setdiff1d(pool, np.fromiter(ref, dtype=np.int64, count=len(ref)))
        new = rng.choice(free, size=min(int(rng.integers(0, 40 if step else 500)), free.shape[0]), replace=False)
        rows = state.add(_subs(new.tolist()))
        ref.update(zip(new.tolist(), rows.tolist(), strict=True))
        if ref and step % 2:
            live = np.fromiter(ref, dtype=np.int64, count=len(ref))
            gone = rng.choice(live, size=min(int(rng.integers(1, 30)), live.shape[0]), replace=False)
            asked = np.concatenate([gone, [1, 2]])  # and ids never registered
            removed = state.remove(asked, t=None if step % 4 == 1 else step)
            assert sorted(removed.tolist()) == sorted(ref[i] for i in gone.tolist())
            for i in gone.tolist():
                del ref[i]
        state.advance(step)
        state.release_retired()
        q = rng.integers(-3, 3003, 400)
        assert state.rows_of(q).tolist() == [ref.get(i, -1) for i in q.tolist()]
        assert len(state) == len(ref)
        if step % 10 == 0:
            want = sorted(ref)
            assert state.sub_ids.tolist() == want
            assert state.live_rows().tolist() == [ref[i] for i in want]
            assert sorted(state.results()) == want
            assert state.rows_of(q).tolist() == [ref.get(i, -1) for i in q.tolist()]  # after the merge
