"""dkmsks.core.sets: the sorting set operations equal numpy's own on every case that matters
to them (empty sides, values beyond the pool's ends, repeats, negative ids)."""

from __future__ import annotations

import numpy as np
import pytest

from dkmsks.core.sets import has_duplicates, member

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

