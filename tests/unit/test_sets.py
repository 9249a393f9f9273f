"""dkmsks.core.sets: the sorting set operations equal numpy's own on every case that matters
to them (empty sides, values beyond the pool's ends, repeats, negative ids)."""

from __future__ import annotations

import numpy as np
import pytest

from dkmsks.core.sets import SLICE_LIMIT, delete_at, has_duplicates, in_any_sorted, insert_at, member

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("n_values, n_pool", [(0, 5), (5, 0), (1, 1), (1_000, 30), (30, 1_000), (20_000, 20_000)])
def test_member_equals_isin(n_values: int, n_pool: int) -> None:
    rng = np.random.default_rng(n_values * 7 + n_pool)
    values = rng.integers(-50, 2_000, n_values)
    pool = rng.integers(-50, 2_000, n_pool)  # repeats, and values below and above every pool entry
    got = member(values, pool)
    assert got.dtype == np.bool_ and got.shape == values.shape
    np.testing.assert_array_equal(got, np.isin(values, pool))


def test_member_at_the_pool_ends() -> None:
    pool = np.array([10, 20, 30])
    np.testing.assert_array_equal(member([9, 10, 11, 29, 30, 31], pool), [False, True, False, False, True, False])


@pytest.mark.parametrize("sizes", [[], [0], [0, 40], [1, 1], [500, 3, 0, 2_000]])
def test_in_any_sorted_equals_isin_on_the_union(sizes: list[int]) -> None:
    rng = np.random.default_rng(len(sizes) * 11 + sum(sizes))
    pools = [np.sort(rng.integers(-50, 3_000, size)) for size in sizes]
    values = rng.integers(-60, 3_100, 1_500)
    union = np.concatenate(pools) if pools else np.empty(0, dtype=np.int64)
    got = in_any_sorted(values, pools)
    assert got.dtype == np.bool_ and got.shape == values.shape
    np.testing.assert_array_equal(got, np.isin(values, union))


def test_has_duplicates() -> None:
    assert not has_duplicates([])
    assert not has_duplicates([7])
    assert not has_duplicates([3, 1, 2])
    assert has_duplicates([3, 1, 3])
    assert has_duplicates(np.array([5, 5]))
    rng = np.random.default_rng(1)
    ids = rng.permutation(100_000)
    assert not has_duplicates(ids)
    ids[71_234] = ids[5]
    assert has_duplicates(ids)



@pytest.mark.parametrize("n_new", [0, 1, 5, SLICE_LIMIT, SLICE_LIMIT + 1, 500])
@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_insert_at_equals_np_insert(n_new: int, dtype: type) -> None:
    rng = np.random.default_rng(n_new)
    a = np.sort(rng.integers(-1_000, 1_000, 2_000)).astype(dtype)
    # Values before the first entry, after the last, between equal entries and repeated.
    values = np.sort(np.concatenate([rng.integers(-1_200, 1_200, max(n_new - 2, 0)), [-5_000, 5_000][:n_new]]))
    pos = np.searchsorted(a, values)
    got = insert_at(a, pos, values)
    assert got.dtype == a.dtype
    np.testing.assert_array_equal(got, np.insert(a, pos, values.astype(dtype)))
    assert np.all(got[1:] >= got[:-1])


def test_insert_at_into_an_empty_array() -> None:
    np.testing.assert_array_equal(insert_at(np.zeros(0, np.int64), [0, 0], [3, 4]), [3, 4])


@pytest.mark.parametrize("n_del", [0, 1, 5, SLICE_LIMIT, SLICE_LIMIT + 1, 700])
def test_delete_at_equals_np_delete(n_del: int) -> None:
    rng = np.random.default_rng(100 + n_del)
    a = rng.integers(0, 10**9, 2_000)
    pos = np.sort(rng.choice(a.shape[0], n_del, replace=False))
    if n_del >= 2:
        pos[0], pos[-1] = 0, a.shape[0] - 1  # the first and the last entry
    pos = np.unique(pos)
    np.testing.assert_array_equal(delete_at(a, pos), np.delete(a, pos))


def test_delete_at_everything_and_adjacent_runs() -> None:
    a = np.arange(10)
    np.testing.assert_array_equal(delete_at(a, np.arange(10)), [])
    np.testing.assert_array_equal(delete_at(a, [3, 4, 5, 9]), [0, 1, 2, 6, 7, 8])
