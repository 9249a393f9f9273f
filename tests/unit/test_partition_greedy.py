"""Algorithm 1 and Algorithm 3 on hand-made inputs (expected assignments worked out by hand)."""

from __future__ import annotations

import numpy as np
import pytest

from dkmsks.core.partition.greedy import algorithm1, algorithm3, assign_in_order

pytestmark = pytest.mark.unit


def test_algorithm1_by_hand() -> None:
    # Sorted desc (stable): 8(#2) 5(#0) 3(#1) 3(#3) 1(#4).
    # #2 -> w0 [8,0]; #0 -> w1 [8,5]; #1 -> w1 [8,8]; #3 -> tie, w0 [11,8]; #4 -> w1 [11,9].
    workers, loads = algorithm1([5, 3, 8, 3, 1], 2)
    assert workers.tolist() == [1, 1, 0, 0, 1]
    assert loads.tolist() == [11, 9]


def test_algorithm1_ties_go_to_lowest_worker_then_input_order() -> None:
    # All equal: input order, each to the lowest-index least-loaded worker -> round robin.
    workers, loads = algorithm1([2, 2, 2, 2, 2], 3)
    assert workers.tolist() == [0, 1, 2, 0, 1]
    assert loads.tolist() == [4, 4, 2]
    # Zero weights never change the loads: everything goes to worker 0.
    workers, loads = algorithm1([0, 0, 0], 4)
    assert workers.tolist() == [0, 0, 0] and loads.tolist() == [0, 0, 0, 0]


def test_algorithm3_by_hand() -> None:
    # Subsets: S0 = {s0:4, s1:1, s2:3} (8), S1 = {s3:2, s4:2} (4), S2 = {s5:5} (5).
    # Order: S0 (s0, s2, s1), S2 (s5), S1 (s3, s4 — tie kept in input order).
    # s0 -> w0 [4,0]; s2 -> w1 [4,3]; s1 -> w1 [4,4]; s5 -> tie, w0 [9,4];
    # s3 -> w1 [9,6]; s4 -> w1 [9,8].
    workers, loads = algorithm3([4, 1, 3, 2, 2, 5], [0, 0, 0, 1, 1, 2], [8, 4, 5], 2)
    assert workers.tolist() == [0, 1, 1, 1, 1, 0]
    assert loads.tolist() == [9, 8]
    # Algorithm 1 on the same costs visits 5,4,3,2,2,1 and differs (s5 first, on w0):
    # s5 w0 [5,0]; s0 w1 [5,4]; s2 w1 [5,7]; s3 w0 [7,7]; s4 w0 [9,7]; s1 w1 [9,8].
    w1, l1 = algorithm1([4, 1, 3, 2, 2, 5], 2)
    assert w1.tolist() == [1, 1, 1, 0, 0, 0] and l1.tolist() == [9, 8]


def test_algorithm3_subset_ties_by_index() -> None:
    # Two subsets of equal cost: subset 0 first. S0 = {s1:3}, S1 = {s0:3}.
    workers, _ = algorithm3([3, 3], [1, 0], [3, 3], 2)
    assert workers.tolist() == [1, 0]


def test_initial_loads_and_order() -> None:
    workers, loads = assign_in_order([1, 1, 1], [2, 1, 0], 2, initial_loads=[5, 0])
    # #2 -> w1 [5,1]; #1 -> w1 [5,2]; #0 -> w1 [5,3]
    assert workers.tolist() == [1, 1, 1] and loads.tolist() == [5, 3]


@pytest.mark.parametrize("m", [1, 2, 7, 20])
def test_greedy_bound(rng: np.random.Generator, m: int) -> None:
    w = rng.integers(0, 1000, 500)
    workers, loads = algorithm1(w, m)
    assert np.array_equal(np.bincount(workers, weights=w, minlength=m).astype(np.int64), loads)
    assert loads.max() <= w.sum() / m + w.max()
    subset_of = rng.integers(0, 40, 500)
    sw = np.bincount(subset_of, weights=w, minlength=40).astype(np.int64)
    workers, loads = algorithm3(w, subset_of, sw, m)
    assert loads.sum() == w.sum() and loads.max() <= w.sum() / m + w.max()


@pytest.mark.parametrize("m", [0, -1, 1.5, True])
def test_bad_m(m) -> None:
    with pytest.raises(ValueError, match="m must be"):
        algorithm1([1, 2], m)


def test_negative_weight_rejected() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        algorithm1([1, -2], 2)
