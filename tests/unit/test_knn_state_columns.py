"""KnnState's writes and frees of rows, both kernels: the compiled calls of
dkmsks.core.knn_state_kernel against the numpy statements, column by column, through the same
random registrations (with and without initial kNN matrices, growing k, keyword pools that
fill up and compact), deletions at once and retiring, and rows recycled from the free stack;
and every registered row read back against the subscriptions it was given."""

from __future__ import annotations

import numpy as np
import pytest

from dkmsks.core.knn_state import NEVER, KnnState
from dkmsks.core.model import KeywordSets, Subscriptions
from dkmsks.core.protocol import RoutedDeletions, RoutedInsertions, deletions_by_worker, insertions_by_worker

pytestmark = pytest.mark.unit

#: Every per-row column of a state (the first n_rows rows are compared).
COLUMNS = ("sub_id", "x", "y", "k", "t", "end_t", "in_use", "kw_start", "kw_len", "ids", "d2")


def _random_subs(rng: np.random.Generator, ids: np.ndarray, k_max: int, t: int) -> Subscriptions:
    n = ids.shape[0]
    sets = [sorted(set(rng.integers(0, 50, int(rng.integers(1, 6))).tolist())) for _ in range(n)]
    return Subscriptions(ids.astype(np.int64), rng.random(n), rng.random(n), KeywordSets.from_lists(sets),
                         rng.integers(1, k_max + 1, n).astype(np.int32), np.full(n, t, dtype=np.int64))


def _same(a: KnnState, b: KnnState) -> None:
    assert (a.n_rows, a.K, a._n_free, a._kw_used, a._kw_live) == (b.n_rows, b.K, b._n_free, b._kw_used, b._kw_live)
    for name in COLUMNS:
        left, right = getattr(a, name)[: a.n_rows], getattr(b, name)[: b.n_rows]
        assert left.dtype == right.dtype and np.array_equal(left, right), name
    assert np.array_equal(a._free[: a._n_free], b._free[: b._n_free])
    assert np.array_equal(a.kw_pool[: a._kw_used], b.kw_pool[: b._kw_used])


def _holds(state: KnnState, rows: np.ndarray, subs: Subscriptions) -> None:
    """The rows hold ``subs`` with empty results, read back column by column."""
    assert state.sub_id[rows].tolist() == subs.ids.tolist()
    assert state.x[rows].tolist() == subs.x.tolist() and state.y[rows].tolist() == subs.y.tolist()
    assert state.k[rows].tolist() == subs.k.tolist() and state.t[rows].tolist() == subs.t.tolist()
    assert state.in_use[rows].all() and np.all(state.end_t[rows] == NEVER)
    assert np.all(state.ids[rows] == -1) and np.all(state.d2[rows] == np.inf)
    got = state.keywords_of(rows)
    assert [got.row(i).tolist() for i in range(len(got))] == [subs.keywords.row(i).tolist() for i in range(len(subs))]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_compiled_rows_identical_to_the_numpy_statements(seed: int) -> None:
    rng = np.random.default_rng(seed)
    states = {kernel: KnnState(width=2, capacity=4, kernel=kernel) for kernel in ("numpy", "numba")}
    initial = _random_subs(rng, np.arange(1000, 1040), 3, 0)
    knn = rng.integers(0, 99, (40, 5)), np.sort(rng.random((40, 5)), axis=1)
    for state in states.values():
        state.add(initial, knn)
    _same(*states.values())
    live = set(range(1000, 1040))
    next_id = 0
    pools = set()
    for step in range(1, 120):
        if live and step % 3:
            gone = rng.choice(sorted(live), size=min(int(rng.integers(1, 9)), len(live)), replace=False)
            at = None if step % 2 else step + int(rng.integers(0, 3))  # at once, or retiring
            for state in states.values():
                state.remove(gone, t=at)
            live -= set(gone.tolist())
        # Results written alike into both, so that clearing a freed row is seen.
        some = rng.integers(0, states["numpy"].n_rows, 4)
        for state in states.values():
            state.ids[some, 0] = 7
            state.d2[some, 0] = 0.5
        n = int(rng.integers(0, 12))
        subs = _random_subs(rng, np.arange(next_id, next_id + n), 3 + step // 20, step)  # k, hence K, grows
        next_id += n
        taken = [state.add(subs) for state in states.values()]
        assert np.array_equal(*taken)
        _holds(states["numba"], taken[1], subs)
        live |= set(subs.ids.tolist())
        for state in states.values():
            state.advance(step)
            state.release_retired()
        _same(*states.values())
        pools.add(states["numba"].kw_pool.shape[0])
    numba = states["numba"]
    assert len(pools) > 2 and numba.K > 5, "the run never compacted the pool or widened the matrices"
    assert sorted(numba.sub_ids.tolist()) == sorted(live)


def test_freed_rows_are_cleared_and_taken_again_last_freed_first() -> None:
    for kernel in ("numpy", "numba"):
        rng = np.random.default_rng(5)
        state = KnnState(kernel=kernel)
        subs = _random_subs(rng, np.arange(10), 3, 0)
        rows = state.add(subs)
        state.ids[rows, 0] = 1
        state.d2[rows, 0] = 0.25
        state.remove([3, 7, 5])
        freed = rows[[3, 7, 5]]
        assert not state.in_use[freed].any() and np.all(state.sub_id[freed] == -1) and np.all(state.k[freed] == 0)
        assert np.all(state.ids[freed] == -1) and np.all(state.d2[freed] == np.inf) and np.all(state.kw_len[freed] == 0)
        state.remove([1])
        again = state.add(_random_subs(rng, np.arange(20, 25), 3, 1))
        # The last freed row first, then the earlier batch from its smallest row, then fresh rows.
        assert again.tolist() == [int(rows[1]), int(rows[3]), int(rows[5]), int(rows[7]), 10], kernel


def test_the_keyword_pool_compacts_and_keeps_every_live_set() -> None:
    for kernel in ("numpy", "numba"):
        rng = np.random.default_rng(9)
        state = KnnState(capacity=16, kernel=kernel)
        pools = set()
        kept: dict[int, list[int]] = {}
        for step in range(60):
            subs = _random_subs(rng, np.arange(step * 10, step * 10 + 10), 2, step)
            state.add(subs)
            kept.update({int(subs.ids[i]): subs.keywords.row(i).tolist() for i in range(len(subs))})
            gone = [i for i in kept if i % 3 == step % 3][:6]
            state.remove(gone)
            for i in gone:
                del kept[i]
            pools.add(state.kw_pool.shape[0])
        assert len(pools) > 2, "the pool never grew: the test does not reach a compaction"
        assert state._kw_live == sum(len(v) for v in kept.values())
        rows = state.rows_of(sorted(kept))
        got = state.keywords_of(rows)
        assert [got.row(i).tolist() for i in range(len(got))] == [kept[i] for i in sorted(kept)], kernel


def test_balls_after_identical_to_the_numpy_statements_and_to_a_loop() -> None:
    rng = np.random.default_rng(4)
    states = {kernel: KnnState(width=4, kernel=kernel) for kernel in ("numpy", "numba")}
    subs = _random_subs(rng, np.arange(300), 4, 0)
    subs = Subscriptions(subs.ids, subs.x, subs.y, subs.keywords, subs.k, rng.integers(0, 10, 300))
    knn = rng.integers(0, 99, (300, 4)), np.sort(rng.random((300, 4)), axis=1)
    knn[1][::5, 2:] = np.inf  # some results not full: radius inf
    for state in states.values():
        state.add(subs, knn)
        state.remove(np.arange(0, 300, 7))
    rows = rng.integers(0, 300, 120)
    for after in (None, -1, 4, 9):
        (ia, ra), (ib, rb) = (state.balls_after(rows, after) for state in states.values())
        assert np.array_equal(ia, ib) and np.array_equal(ra, rb), after
        want = [(int(subs.ids[r]), float(knn[1][r, subs.k[r] - 1])) for r in rows.tolist()
                if int(subs.ids[r]) % 7 and (after is None or subs.t[r] > after)]
        assert list(zip(ia.tolist(), ra.tolist(), strict=True)) == want, after
        assert 0 < len(want) < rows.shape[0] or after == 9


def test_insertions_by_worker_gives_each_worker_its_part_in_routed_order() -> None:
    rng = np.random.default_rng(3)
    subs = _random_subs(rng, rng.permutation(200)[:37], 4, 2)
    workers = rng.integers(0, 6, 37).astype(np.int32)
    by_worker, spans = insertions_by_worker(RoutedInsertions(2, subs, workers, np.zeros(37, dtype=np.int64)))
    assert [w for w, _, _ in spans] == sorted(set(workers.tolist()))
    assert spans[0][1] == 0 and spans[-1][2] == 37 and all(a[2] == b[1] for a, b in zip(spans, spans[1:], strict=False))
    for w, lo, hi in spans:
        part = by_worker.slice_rows(lo, hi)
        mine = [i for i in range(37) if workers[i] == w]
        assert part.ids.tolist() == subs.ids[mine].tolist()
        assert part.x.tolist() == subs.x[mine].tolist() and part.k.tolist() == subs.k[mine].tolist()
        assert part.keywords.ptr[0] == 0 and len(part.keywords) == len(mine)
        want = [subs.keywords.row(i).tolist() for i in mine]
        assert [part.keywords.row(i).tolist() for i in range(len(mine))] == want
    assert insertions_by_worker(RoutedInsertions(2, subs.take([]), workers[:0], np.zeros(0, np.int64)))[1] == []


def test_deletions_by_worker_gives_each_worker_its_part_and_the_unplaced_to_all() -> None:
    rng = np.random.default_rng(8)
    ids = rng.permutation(500)[:41].astype(np.int64)
    placed = rng.integers(0, 5, 41).astype(np.int32)
    parts = dict(deletions_by_worker(RoutedDeletions(3, ids, placed), 7))
    assert sorted(parts) == sorted(set(placed.tolist()))
    for w, mine in parts.items():
        assert mine.tolist() == [int(ids[i]) for i in range(41) if placed[i] == w]
    placed[[4, 9]] = -1  # not placed by the server: every worker is asked
    parts = dict(deletions_by_worker(RoutedDeletions(3, ids, placed), 7))
    assert sorted(parts) == list(range(7))
    for w, mine in parts.items():
        assert mine.tolist() == [int(ids[i]) for i in range(41) if placed[i] in (w, -1)]
    assert list(deletions_by_worker(RoutedDeletions(3, ids[:0], placed[:0]), 7)) == []
