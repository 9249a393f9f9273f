"""Greedy least-loaded assignment: Algorithm 1 and Algorithm 3 of the paper.

Both algorithms visit items in a fixed order and give each to the worker with the smallest
load ``C(w)`` (Graham's LPT rule). Loads are integer weights (``cost · |O_init|``, see
:mod:`dkmsks.core.partition.plan`) so ties are exact. Ties are broken deterministically:

- among workers, the lowest worker index wins (a heap of ``(load, worker)`` pairs);
- among items of equal cost, the earlier one in the input comes first (stable sort).
"""

from __future__ import annotations

import heapq

import numpy as np
import numpy.typing as npt

from dkmsks.core.model import Int32Array, Int64Array

__all__ = ["assign_in_order", "algorithm1", "algorithm3"]


def _check_m(m: int) -> int:
    if isinstance(m, bool) or int(m) != m or m < 1:
        raise ValueError(f"the number of workers m must be an integer >= 1, got {m!r}")
    return int(m)


def assign_in_order(
    weights: npt.ArrayLike,
    order: npt.ArrayLike,
    m: int,
    *,
    initial_loads: npt.ArrayLike | None = None,
) -> tuple[Int32Array, Int64Array]:
    """Visit ``weights[order]`` and give each item to the least-loaded worker.

    Parameters
    ----------
    weights
        int64 ``[n]`` item weights (``>= 0``).
    order
        A permutation of ``range(n)``: the visiting order.
    m
        Number of workers (``>= 1``).
    initial_loads
        Optional int64 ``[m]`` starting loads (default zeros).

    Returns
    -------
    workers, loads
        int32 ``[n]`` worker per item (indexed like ``weights``) and the final int64 loads.
    """
    m = _check_m(m)
    w = np.asarray(weights, dtype=np.int64)
    order = np.asarray(order, dtype=np.int64)
    if order.shape != w.shape:
        raise ValueError("order must be a permutation of the item indices")
    loads0 = np.zeros(m, dtype=np.int64) if initial_loads is None else np.asarray(
        initial_loads, dtype=np.int64
    )
    if loads0.shape != (m,):
        raise ValueError(f"initial_loads must have {m} entries")
    if w.size and int(w.min()) < 0:
        raise ValueError("weights must be non-negative")
    out = np.empty(w.shape[0], dtype=np.int32)
    # A heap of (load, worker): heapreplace pops the least-loaded worker, the lowest index
    # on equal loads, and pushes it back with its new load in one O(log m) step.
    heap = [(int(loads0[i]), i) for i in range(m)]
    heapq.heapify(heap)
    picked = [0] * w.shape[0]
    ordered_w = w[order].tolist()
    replace = heapq.heapreplace
    for j, wj in enumerate(ordered_w):
        load, wk = heap[0]
        picked[j] = wk
        replace(heap, (load + wj, wk))
    out[order] = np.asarray(picked, dtype=np.int32)
    loads = np.zeros(m, dtype=np.int64)
    for load, wk in heap:
        loads[wk] = load
    return out, loads


def algorithm1(
    weights: npt.ArrayLike, m: int, *, initial_loads: npt.ArrayLike | None = None
) -> tuple[Int32Array, Int64Array]:
    """Algorithm 1 (Subscription-Assignment): sort by cost descending, least-loaded worker.

    Used by KOP over subscriptions and by SOP over region subsets. Items of equal cost keep
    their input order.

    Returns
    -------
    workers, loads
        int32 worker per item and int64 load per worker.
    """
    w = np.asarray(weights, dtype=np.int64)
    order = np.argsort(-w, kind="stable")
    return assign_in_order(w, order, m, initial_loads=initial_loads)


def algorithm3_order(
    sub_weights: npt.ArrayLike, subset_of: npt.ArrayLike, subset_rank: npt.ArrayLike
) -> Int64Array:
    """The visiting order of Algorithm 3.

    Subsets by ``subset_rank`` ascending (the caller ranks them by cost descending), then
    inside each subset its subscriptions by cost descending, equal costs in input order.
    """
    w = np.asarray(sub_weights, dtype=np.int64)
    rank = np.asarray(subset_rank, dtype=np.int64)[np.asarray(subset_of, dtype=np.int64)]
    idx = np.arange(w.shape[0], dtype=np.int64)
    return np.lexsort((idx, -w, rank)).astype(np.int64)


def algorithm3(
    sub_weights: npt.ArrayLike,
    subset_of: npt.ArrayLike,
    subset_weights: npt.ArrayLike,
    m: int,
) -> tuple[Int32Array, Int64Array]:
    """Algorithm 3 (Subscription-Assignment for DkM-SKS).

    Sort the subsets by cost ``C(S_r)`` descending (equal costs: lower subset index first);
    inside each subset sort its subscriptions by ``C(s)`` descending (equal costs: input order);
    give each subscription, in that order, to the least-loaded worker. Consecutive
    subscriptions of one subset thus land on different workers, which is the paper's point:
    they tend to be updated by the same objects, so spreading them parallelises the update.

    Parameters
    ----------
    sub_weights
        int64 ``[n]`` ``C(s) · |O_init|`` (Eq. 5).
    subset_of
        int ``[n]`` subset row of each subscription.
    subset_weights
        int64 ``[n_subsets]`` ``C(S_r) · |O_init|`` (Eq. 6).
    m
        Number of workers.
    """
    sw = np.asarray(subset_weights, dtype=np.int64)
    subset_order = np.argsort(-sw, kind="stable")
    rank = np.empty_like(subset_order)
    rank[subset_order] = np.arange(sw.shape[0], dtype=np.int64)
    order = algorithm3_order(sub_weights, subset_of, rank)
    return assign_in_order(sub_weights, order, m)
