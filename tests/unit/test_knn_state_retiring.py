"""KnnState: rows deleted inside a batch (a deletion time ahead of the watermark) retire when
the watermark reaches it, and only then; removals without a time free their rows at once and
leave nothing for release_retired to find (it then skips its scan of every row)."""

from __future__ import annotations

import numpy as np
import pytest

from dkmsks.core.jit import KERNELS
from dkmsks.core.knn_state import NEVER, KnnState
from dkmsks.core.model import KeywordSets, Subscriptions

pytestmark = pytest.mark.unit

#: Both maps of a state (dkmsks.core.sub_map): compiled hash table, numpy reference (numba is a
#: dependency: without it the compiled cases fail, they do not go missing).
kernels = pytest.mark.parametrize("kernel", KERNELS)


def _subs(ids: list[int]) -> Subscriptions:
    n = len(ids)
    return Subscriptions(np.array(ids, dtype=np.int64), np.zeros(n), np.zeros(n),
                         KeywordSets.from_lists([[1]] * n), np.ones(n, dtype=np.int32), np.zeros(n, dtype=np.int64))


@kernels
def test_retiring_rows_are_freed_when_the_watermark_reaches_their_time(kernel: str) -> None:
    state = KnnState(kernel=kernel)
    rows = state.add(_subs([10, 11, 12, 13, 14]))
    state.advance(3)
    assert state.release_retired().shape[0] == 0
    gone_now = state.remove([10])  # no time: freed at once
    retiring = state.remove([12, 13], t=6)
    late = state.remove([14], t=8)
    assert not state.in_use[gone_now].any()
    assert state.in_use[retiring].all() and np.all(state.end_t[retiring] == 6)
    assert len(state) == 1 and state.contains([12, 13, 14]).tolist() == [False, False, False]
    state.advance(5)
    assert state.release_retired().shape[0] == 0 and state.in_use[retiring].all()
    state.advance(6)
    np.testing.assert_array_equal(np.sort(state.release_retired()), np.sort(retiring))
    assert not state.in_use[retiring].any() and np.all(state.end_t[retiring] == NEVER)
    assert state.release_retired().shape[0] == 0 and state.in_use[late].all()
    state.advance(9)
    np.testing.assert_array_equal(state.release_retired(), late)
    assert state.release_retired().shape[0] == 0
    # A freed row is reused, and the live one never retired.
    again = state.add(_subs([12, 13]))
    assert set(again.tolist()) <= set(rows.tolist()) and state.in_use[rows[1]]


@kernels
def test_a_deletion_at_or_before_the_watermark_frees_at_once(kernel: str) -> None:
    state = KnnState(kernel=kernel)
    state.add(_subs([1, 2]))
    state.advance(4)
    rows = state.remove([1], t=4)
    assert not state.in_use[rows].any()
    assert state.release_retired().shape[0] == 0


@kernels
def test_a_removal_with_a_time_per_id_retires_each_row_until_its_own_time(kernel: str) -> None:
    """A probe group's deletions in one call (spark/bridge.py, _events_at_once): each id with
    its timestamp; those at or before the watermark are freed at once, and the worker's index
    forgets exactly those."""
    from dkmsks.core.model import Rect
    from dkmsks.core.update import Worker

    worker = Worker("dkm", Rect(0.0, 0.0, 1.0, 1.0), grid=4, kernel=kernel)
    rows = worker.add(_subs([1, 2, 3, 4, 5]))
    state = worker.state
    state.advance(4)
    forgotten: list[int] = []
    forget = worker.index.forget
    worker.index.forget = lambda r: (forgotten.extend(np.asarray(r).tolist()), forget(r))  # type: ignore[method-assign]
    assert worker.remove([2, 3, 4, 99, 5], t=[6, 4, 8, 5, 3]) == 4  # 99 is not held
    row_of = dict(zip([1, 2, 3, 4, 5], rows.tolist(), strict=True))
    assert sorted(forgotten) == sorted([row_of[3], row_of[5]])
    assert not state.in_use[[row_of[3], row_of[5]]].any()
    assert state.end_t[row_of[2]] == 6 and state.end_t[row_of[4]] == 8 and state.in_use[row_of[1]]
    assert len(state) == 1 and state.contains([1, 2, 3, 4, 5]).tolist() == [True, False, False, False, False]
    state.advance(6)
    assert state.release_retired().tolist() == [row_of[2]]
    state.advance(8)
    assert state.release_retired().tolist() == [row_of[4]]
    assert state.release_retired().shape[0] == 0


@kernels
@pytest.mark.parametrize("at", [None, 5])
def test_an_id_asked_twice_in_one_removal_frees_its_row_once(kernel: str, at: int | None) -> None:
    """A repeated id in one removal is one deletion: its row is freed (or retires) once, so two
    later registrations never share a row (the row used to go onto the free list twice)."""
    state = KnnState(kernel=kernel)
    rows = state.add(_subs([10, 11, 12]))
    state.advance(7)  # a time at the watermark frees at once too
    assert state.remove([11, 11], t=at).tolist() == [rows[1]]
    assert state.release_retired().shape[0] == 0
    again = state.add(_subs([20, 21, 22]))
    assert len(set(again.tolist())) == 3
    assert sorted(state.sub_ids.tolist()) == [10, 12, 20, 21, 22]
    assert state.rows_of([20, 21, 22]).tolist() == again.tolist()


@kernels
def test_a_deletion_at_the_largest_timestamp_is_not_exported_as_live(kernel: str) -> None:
    """A deletion time of 2^63 - 1 (a valid int64 timestamp) leaves the row retiring with the
    same end time a live row has; exports still leave it out: live means mapped."""
    state = KnnState(kernel=kernel)
    rows = state.add(_subs([10, 11, 12]))
    state.advance(3)
    state.remove([11], t=NEVER)
    assert state.end_t[rows[1]] == NEVER and state.in_use[rows[1]]  # retiring, not yet freed
    assert state.to_arrays(rows).sub_ids.tolist() == [10, 12]
    assert state.to_arrays().sub_ids.tolist() == [10, 12]
    assert sorted(state.results()) == [10, 12]
