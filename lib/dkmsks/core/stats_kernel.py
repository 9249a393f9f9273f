"""A compiled path for small batches of Eq. 4 counts (``|O_{R,λ}|``), beside the numpy one.

The main server re-costs a few hundred (keyword, ball) pairs per timestamp
(:meth:`~dkmsks.core.partition.MainServer.refresh`). :mod:`dkmsks.core.stats` answers them with
six binary searches per pair over arrays of ~10^6 entries and ~20 rank steps per pair in the
wavelet matrix, each a numpy call over the batch. At that size the numpy calls wait for memory
one after another: ``np.searchsorted`` follows one query's chain of dependent loads at a time,
and each rank step is a separate call. Here every search advances all queries by one halving
step per round (the steps are the same for every query, so one query's load never waits for
another's), and the rank steps of all levels run in one compiled loop.

The counts are the numpy path's, exactly: ``tests/unit/test_stats_kernel.py`` compares the two
on random and on real data, and with full scans.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dkmsks.core.kernel import HAVE_NUMBA, _jit
from dkmsks.core.model import Float64Array, Int64Array

__all__ = ["HAVE_NUMBA", "count_keyword_in_rects", "keyword_sums_in_rects"]


@_jit
def _bounds(values: Any, queries: Any, right: bool) -> Any:
    """``np.searchsorted(values, queries, side="right" if right else "left")``, every query one
    halving step per round. ``values`` ascending, no NaN among ``values`` or ``queries``."""
    m = queries.shape[0]
    base = np.zeros(m, dtype=np.int64)
    n = values.shape[0]
    if n == 0:
        return base
    # The answer lies in [base, base + size]; a step keeps the half that holds it.
    size = n
    while size > 1:
        half = size // 2
        for i in range(m):
            v = values[base[i] + half]
            if v <= queries[i] if right else v < queries[i]:
                base[i] += half
        size -= half
    for i in range(m):
        v = values[base[i]]
        if v <= queries[i] if right else v < queries[i]:
            base[i] += 1
    return base


@_jit
def _popcount(x: Any) -> Any:
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return (x * np.uint64(0x0101010101010101)) >> np.uint64(56)


@_jit
def _rank1(words: Any, before: Any, pos: int) -> int:
    """Ones among bits ``[0, pos)`` of one level (``_BitRank.rank1``)."""
    w = pos >> 6
    low = np.uint64(pos & 63)
    mask = (np.uint64(1) << low) - np.uint64(1)
    return int(before[w]) + int(_popcount(words[w] & mask))


@_jit
def _count_less(words: Any, before: Any, n_zeros: Any, v: Any, lo: Any, hi: Any) -> Any:
    """``_WaveletMatrix.count_less``: values ``< v[i]`` among positions ``[lo[i], hi[i])``, level
    by level for all questions (``v`` in ``[0, 2**n_bits]``, ``lo <= hi``)."""
    n_bits = words.shape[0]
    m = v.shape[0]
    out = np.zeros(m, dtype=np.int64)
    full = np.int64(1) << n_bits
    lo_ = lo.copy()
    hi_ = hi.copy()
    for i in range(m):
        if v[i] >= full:
            out[i] = hi[i] - lo[i]
    for j in range(n_bits):
        shift = n_bits - 1 - j
        zeros = n_zeros[j]
        w = words[j]
        b = before[j]
        for i in range(m):
            if v[i] >= full:
                continue
            lo1 = _rank1(w, b, lo_[i])
            hi1 = _rank1(w, b, hi_[i])
            if (v[i] >> shift) & 1:
                # Every value with a 0 here (same prefix) is smaller; follow the ones.
                out[i] += (hi_[i] - hi1) - (lo_[i] - lo1)
                lo_[i] = lo1 + zeros
                hi_[i] = hi1 + zeros
            else:
                lo_[i] -= lo1
                hi_[i] -= hi1
    return out


@_jit
def _count(kw: Any, xmin: Any, ymin: Any, xmax: Any, ymax: Any, xs: Any, ys: Any, kw_key: Any,
           words: Any, before: Any, n_zeros: Any) -> Any:
    x_lo = _bounds(xs, xmin, False)
    x_hi = _bounds(xs, xmax, True)
    y_lo = _bounds(ys, ymin, False)
    y_hi = _bounds(ys, ymax, True)
    base = kw * (xs.shape[0] + 1)
    p_lo = _bounds(kw_key, base + x_lo, False)
    p_hi = _bounds(kw_key, base + x_hi, False)
    m = kw.shape[0]
    # count_between: values in [y_lo, y_hi) among positions [p_lo, p_hi), as two "less than"s.
    v = np.empty(2 * m, dtype=np.int64)
    lo = np.empty(2 * m, dtype=np.int64)
    hi = np.empty(2 * m, dtype=np.int64)
    for i in range(m):
        top = max(y_hi[i], y_lo[i])
        end = max(p_hi[i], p_lo[i])
        v[i], lo[i], hi[i] = top, p_lo[i], end
        v[m + i], lo[m + i], hi[m + i] = y_lo[i], p_lo[i], end
    both = _count_less(words, before, n_zeros, v, lo, hi)
    return both[:m] - both[m:]


def count_keyword_in_rects(
    kw: Int64Array, xmin: Float64Array, ymin: Float64Array, xmax: Float64Array, ymax: Float64Array,
    xs: Float64Array, ys: Float64Array, kw_key: Int64Array, matrix: tuple[Any, Any, Any],
) -> Int64Array:
    """``ObjectStatistics._count_keyword_in_rects`` compiled: ``kw`` valid keyword ids, the
    rectangles without NaN, ``matrix`` the keyword wavelet matrix as stacked level arrays
    (``_WaveletMatrix.stacked``)."""
    words, before, n_zeros = matrix
    return _count(np.ascontiguousarray(kw, dtype=np.int64), np.ascontiguousarray(xmin, dtype=np.float64),
                  np.ascontiguousarray(ymin, dtype=np.float64), np.ascontiguousarray(xmax, dtype=np.float64),
                  np.ascontiguousarray(ymax, dtype=np.float64), xs, ys, kw_key, words, before, n_zeros)


@_jit
def _sums(rows: Any, ptr: Any, ids: Any, n_keywords: int, xmin: Any, ymin: Any, xmax: Any, ymax: Any,
          xs: Any, ys: Any, kw_key: Any, words: Any, before: Any, n_zeros: Any) -> Any:
    n = rows.shape[0]
    total = 0
    for i in range(n):
        total += ptr[rows[i] + 1] - ptr[rows[i]]
    kw = np.empty(total, dtype=np.int64)
    x0 = np.empty(total, dtype=np.float64)
    y0 = np.empty(total, dtype=np.float64)
    x1 = np.empty(total, dtype=np.float64)
    y1 = np.empty(total, dtype=np.float64)
    owner = np.empty(total, dtype=np.int64)
    j = 0
    for i in range(n):
        for p in range(ptr[rows[i]], ptr[rows[i] + 1]):
            k = ids[p]
            if 0 <= k < n_keywords:  # an unknown keyword counts 0, as on the numpy path
                kw[j], owner[j] = k, i
                x0[j], y0[j], x1[j], y1[j] = xmin[i], ymin[i], xmax[i], ymax[i]
                j += 1
    out = np.zeros(n, dtype=np.int64)
    if j == 0:
        return out
    counts = _count(kw[:j], x0[:j], y0[:j], x1[:j], y1[:j], xs, ys, kw_key, words, before, n_zeros)
    for e in range(j):
        out[owner[e]] += counts[e]
    return out


def keyword_sums_in_rects(
    rows: Int64Array, ptr: Int64Array, ids: Any, n_keywords: int,
    xmin: Float64Array, ymin: Float64Array, xmax: Float64Array, ymax: Float64Array,
    xs: Float64Array, ys: Float64Array, kw_key: Int64Array, matrix: tuple[Any, Any, Any],
) -> Int64Array:
    """Per row ``Σ_{λ ∈ ψ(rows[i])} |O_{R_i,λ}|``, ``R_i = [xmin[i], xmax[i]] × [ymin[i], ymax[i]]``
    (Eq. 5 times |O_init|, each subscription over its own rectangle), in one compiled call: the
    keyword sets' CSR ``ptr``/``ids`` are expanded, counted and summed without the numpy
    calls of :func:`~dkmsks.core.partition._common.keyword_rect_weights` (which dedupe
    (rectangle, keyword) pairs: nothing to dedupe when every rectangle is its own). Rectangles
    without NaN; ``matrix`` as for :func:`count_keyword_in_rects`."""
    words, before, n_zeros = matrix
    return _sums(np.ascontiguousarray(rows, dtype=np.int64), ptr, ids, n_keywords,
                 np.ascontiguousarray(xmin, dtype=np.float64), np.ascontiguousarray(ymin, dtype=np.float64),
                 np.ascontiguousarray(xmax, dtype=np.float64), np.ascontiguousarray(ymax, dtype=np.float64),
                 xs, ys, kw_key, words, before, n_zeros)
