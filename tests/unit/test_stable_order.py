"""The compiled radix sort behind :class:`~dkmsks.core.kernel.SortedProbe`: the same order as
numpy's stable argsort, on keys that exercise each of its parts (the sign flip, skipped digits,
equal keys in input order, every digit varying)."""

from __future__ import annotations

import numpy as np
import pytest

from dkmsks.core import kernel

pytestmark = pytest.mark.unit


def _keys(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    if kind == "full range":  # negative keys, every digit varies
        return rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64)
    if kind == "few values":  # long runs of equal keys: stability decides
        return rng.integers(-3, 4, n).astype(np.int64)
    if kind == "grid probe":  # cell << 32 | keyword, cells level after level, the outside ids' high bit
        cells = np.concatenate([rng.integers(0, 3 * 10**8, n - n // 10), rng.integers(2**31, 2**32, n // 10)])
        return (cells.astype(np.int64) << 32) | rng.integers(0, 20_000, n)
    if kind == "one digit":  # only the lowest digit varies: every other pass is skipped
        return (np.int64(5) << 40) + rng.integers(0, 2**11, n)
    return np.full(n, -7, dtype=np.int64)  # all equal: no pass at all


@pytest.mark.parametrize("kind", ["full range", "few values", "grid probe", "one digit", "all equal"])
@pytest.mark.parametrize("n", [0, 1, 2, 7, 2_049, 60_000])
def test_stable_order_is_numpys_stable_argsort(kind: str, n: int) -> None:
    assert kernel.HAVE_NUMBA  # numba is pinned: the compiled sort is what runs (and is tested)
    keys = _keys(kind, n, np.random.default_rng(n))
    got = kernel.stable_order(keys)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, np.argsort(keys, kind="stable"))


@pytest.mark.parametrize("layout", ["grid", "empty", "one", "all equal", "signed"])
def test_a_sorted_probe_keeps_every_pair(layout: str) -> None:
    rng = np.random.default_rng(11)
    keys = (rng.integers(0, 50, 5_000).astype(np.int64) << 32) | rng.integers(0, 9, 5_000)
    owners = rng.integers(0, 1_000, 5_000).astype(np.int64)
    if layout == "empty":
        keys, owners = keys[:0], owners[:0]
    elif layout == "one":
        keys, owners = keys[:1], owners[:1]
    elif layout == "all equal":
        keys = np.full(5_000, 7 << 32, dtype=np.int64)
    elif layout == "signed":
        keys = rng.integers(-(2**62), 2**62, 5_000)
        keys[::3] = keys[1::3][: keys[::3].shape[0]]  # repeats
    probe = kernel.SortedProbe.of(keys, owners.astype(np.int32))  # owners of any integer type
    assert probe.keys.dtype == probe.ptr.dtype == probe.owners.dtype == np.int64
    assert np.all(np.diff(probe.keys) > 0)
    assert probe.ptr[0] == 0 and probe.ptr[-1] == keys.shape[0] and probe.ptr.shape[0] == probe.keys.shape[0] + 1
    back_keys, back_owners = probe.pairs()
    # The same multiset of (key, owner) pairs, each key's owners in input order.
    order = np.argsort(keys, kind="stable")
    np.testing.assert_array_equal(back_keys, keys[order])
    np.testing.assert_array_equal(back_owners, owners[order])
