"""The two sub id -> row maps (dkmsks.core.sub_map): the compiled hash table against the sorted
numpy reference, driven through the same random sequences of registrations (ids new, and ids
registered again after their deletion while their old row still retires), deletions (of live,
unknown and repeated ids; at once and with a time) and lookups, both inside KnnState and alone."""

from __future__ import annotations

import numpy as np
import pytest

from dkmsks.core import sub_map as sub_map_module
from dkmsks.core.knn_state import NEVER, KnnState
from dkmsks.core.model import KeywordSets, Subscriptions
from dkmsks.core.sub_map import HashSubMap, SortedSubMap

pytestmark = pytest.mark.unit


def _subs(ids: list[int]) -> Subscriptions:
    n = len(ids)
    return Subscriptions(np.array(ids, dtype=np.int64), np.zeros(n), np.zeros(n), KeywordSets.from_lists([[1]] * n),
                         np.ones(n, dtype=np.int32), np.zeros(n, dtype=np.int64))


def _mapped_rows(state: KnnState) -> list[int]:
    """Rows the state holds live: in use and not retiring (what to_arrays(rows) keeps)."""
    n = state.n_rows
    return np.flatnonzero(state.in_use[:n] & (state.end_t[:n] == NEVER)).tolist()


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("small", [1, 64])
def test_both_maps_give_the_same_answers_inside_a_state(seed: int, small: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sub_map_module, "MAP_SMALL", small)  # the sorted map merges often, or rarely
    rng = np.random.default_rng(seed)
    states = {kernel: KnnState(kernel=kernel) for kernel in ("numba", "numpy")}
    ref: dict[int, int] = {}  # id -> row, by the reference's answers
    # Ids from a small pool (so they come back), spread over the int64 range and clustered
    # (consecutive, and multiples of 2^32: bad for a hash that keeps low bits).
    pool = np.unique(np.concatenate([np.arange(200), np.arange(1, 60) << 32, rng.integers(0, 2**62, 60),
                                     [2**63 - 1, 0]]))
    for step in range(120):
        state_t = step
        live = np.fromiter(ref, dtype=np.int64, count=len(ref))
        free = np.setdiff1d(pool, live)
        new = rng.choice(free, size=min(int(rng.integers(0, 30 if step else 150)), free.shape[0]), replace=False)
        rows = {kernel: state.add(_subs(new.tolist())) for kernel, state in states.items()}
        assert rows["numba"].tolist() == rows["numpy"].tolist()
        ref.update(zip(new.tolist(), rows["numpy"].tolist(), strict=True))
        if ref and rng.random() < 0.7:
            live = np.fromiter(ref, dtype=np.int64, count=len(ref))
            gone = rng.choice(live, size=min(int(rng.integers(1, 25)), live.shape[0]), replace=False)
            repeated = rng.choice(gone, size=int(rng.integers(0, 3)))
            asked = rng.permutation(np.concatenate([gone, repeated, [-1, -7, 2**40 + 3]]))  # unknown ids too
            how = int(rng.integers(3))
            t = None if how == 0 else (state_t + int(rng.integers(0, 4)) if how == 1 else
                                       state_t + rng.integers(-1, 4, asked.shape[0]))
            removed = {kernel: state.remove(asked, t=t) for kernel, state in states.items()}
            assert removed["numba"].tolist() == removed["numpy"].tolist()
            assert sorted(removed["numpy"].tolist()) == sorted(ref[i] for i in gone.tolist())
            for i in gone.tolist():
                del ref[i]
        for state in states.values():
            state.advance(state_t)
            state.release_retired()
        q = np.concatenate([rng.choice(pool, 100), rng.integers(-5, 5, 10)])
        want = [ref.get(i, -1) for i in q.tolist()]
        for state in states.values():
            assert state.rows_of(q).tolist() == want
            assert state.contains(q).tolist() == [w >= 0 for w in want]
            assert len(state) == len(ref)
            assert sorted(_mapped_rows(state)) == sorted(ref.values())
        if step % 7 == 0:
            ids = sorted(ref)
            for state in states.values():
                assert state.sub_ids.tolist() == ids
                assert state.live_rows().tolist() == [ref[i] for i in ids]
                assert sorted(state.results()) == ids


@pytest.mark.parametrize("seed", range(4))
def test_both_maps_alone_through_the_same_operations(seed: int) -> None:
    """Without a state: rows are handed out by the test, and a popped row keeps its id in the
    sub_id column until the test reuses it (as a retiring row does), while the same id is mapped
    again to another row. Heavy growth from a tiny table, long probe runs from clustered ids."""
    rng = np.random.default_rng(seed)
    maps = {"hash": HashSubMap(1), "sorted": SortedSubMap(1)}
    sub_id = np.full(4000, -1, dtype=np.int64)
    free_rows = list(range(4000))[::-1]
    retiring: list[int] = []
    ref: dict[int, int] = {}
    pool = np.concatenate([np.arange(300) * 1024, rng.integers(-(2**40), 2**40, 300)])
    pool = np.unique(pool)
    for _ in range(300):
        live = np.fromiter(ref, dtype=np.int64, count=len(ref))
        free = np.setdiff1d(pool, live)
        new = rng.choice(free, size=min(int(rng.integers(0, 60)), free.shape[0]), replace=False)
        rows = np.array([free_rows.pop() for _ in range(new.shape[0])], dtype=np.int64)
        sub_id[rows] = new
        for m in maps.values():
            m.insert(new, rows, sub_id)
        ref.update(zip(new.tolist(), rows.tolist(), strict=True))
        live = np.fromiter(ref, dtype=np.int64, count=len(ref))
        gone = rng.choice(live, size=min(int(rng.integers(0, 60)), live.shape[0]), replace=False)
        asked = np.concatenate([gone, gone[: int(rng.integers(0, 4))], 2**50 + rng.integers(-3, 3, 3)])  # unknown too
        asked = rng.permutation(asked)
        got = {name: m.pop(asked, sub_id) for name, m in maps.items()}
        assert got["hash"].tolist() == got["sorted"].tolist()
        popped = got["hash"][got["hash"] >= 0]
        assert sorted(popped.tolist()) == sorted(ref[i] for i in gone.tolist())
        for i in gone.tolist():
            del ref[i]
        retiring.extend(popped.tolist())  # their sub_id stays until freed below
        if rng.random() < 0.5:
            for row in retiring:
                sub_id[row] = -1
                free_rows.append(row)
            retiring.clear()
        q = np.concatenate([rng.choice(pool, 200), [-1, 2**63 - 1]])
        want = [ref.get(i, -1) for i in q.tolist()]
        ids = sorted(ref)
        for m in maps.values():
            assert m.rows_of(q, sub_id).tolist() == want
            assert len(m) == len(ref)
            assert m.sorted_rows(sub_id).tolist() == [ref[i] for i in ids]
        slots = maps["hash"]._slots
        assert int(np.count_nonzero(slots >= 0)) == len(ref) and 2 * len(ref) <= slots.shape[0]


def test_the_hash_table_doubles_and_keeps_its_load_at_most_a_half() -> None:
    table = HashSubMap(16)
    sub_id = np.arange(10_000, dtype=np.int64) * 7
    for lo in range(0, 10_000, 1000):
        rows = np.arange(lo, lo + 1000, dtype=np.int64)
        table.insert(sub_id[rows], rows, sub_id)
        assert 2 * len(table) <= table._slots.shape[0] < 8 * len(table)
    assert table.rows_of(sub_id, sub_id).tolist() == list(range(10_000))
    assert table.pop(sub_id[::2], sub_id).tolist() == list(range(0, 10_000, 2))
    assert table.rows_of(sub_id, sub_id).tolist() == [-1 if r % 2 == 0 else r for r in range(10_000)]
