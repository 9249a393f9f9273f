"""A compiled path for small batches of Eq. 4 counts (``|O_{R,λ}|``), beside the numpy one.

The main server re-costs a few hundred (keyword, ball) pairs per timestamp
(:meth:`~dkmsks.core.partition.MainServer.refresh`). :mod:`dkmsks.core.stats` answers them with
six binary searches per pair over arrays of ~10^6 entries and ~20 rank steps per pair in the
wavelet matrix, each a numpy call over the batch. At that size the numpy calls wait for memory
one after another: ``np.searchsorted`` follows one query's chain of dependent loads at a time,
and each rank step is a separate call. Here the six searches go through bucket tables of
``xs``, ``ys`` and ``kw_key`` (:func:`axis_table`, about one entry per bucket), which put each
answer within a bucket's few entries instead of ~20 halvings of the whole array, and the rank
steps of all levels run in one compiled loop; the main server's re-costs sum per subscription
in the same call (:func:`keyword_sums_in_rects`). Both walk all questions a step at a time and
ask for the cache lines of a step's reads before making them (``_prefetch``): the main server
counts right after the workers have swept the caches, and lines fetched together overlap
where lines read one by one each wait for memory.

The counts are the numpy path's, exactly: ``tests/unit/test_stats_kernel.py`` compares the two
on random and on real data, and with full scans.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dkmsks.core.jit import HAVE_NUMBA, _jit, _prefetch, read_only
from dkmsks.core.model import Float64Array, Int64Array

__all__ = ["HAVE_NUMBA", "Axes", "axis_table", "bounds_in_buckets", "count_keyword_in_rects", "keyword_sums",
           "keyword_sums_in_rects"]

#: An :func:`axis_table`: bucket starts, origin and scale.
AxisTable = tuple[Any, float, float]
#: The tables of ``xs``, ``ys`` and ``kw_key`` the compiled counts search through.
Axes = tuple[AxisTable, AxisTable, AxisTable]


@_jit
def _bucket(v: float, origin: float, scale: float, n_buckets: int) -> int:
    """The bucket of ``v`` in an :func:`axis_table`: non-decreasing in ``v`` (a subtraction,
    a multiplication by ``scale >= 0`` and a clamp, each monotone under rounding). ``±inf``
    times a zero scale is NaN: bucket 0, where every value is then."""
    x = (v - origin) * scale
    if x >= n_buckets - 1.0:
        return n_buckets - 1
    if x > 0.0:
        return int(x)
    return 0


@_jit
def _axis_starts(values: Any, origin: float, scale: float, n_buckets: int) -> Any:
    starts = np.zeros(n_buckets + 1, dtype=np.int32)
    for i in range(values.shape[0]):
        starts[_bucket(values[i], origin, scale, n_buckets) + 1] += 1
    for b in range(n_buckets):
        starts[b + 1] += starts[b]
    return starts


def axis_table(values: Float64Array | Int64Array) -> AxisTable:
    """``(starts, origin, scale)`` over ascending finite ``values`` (floats, or ints whose
    conversion to float is just as monotone): bucket ``b`` (of about one
    value each on average) holds positions ``[starts[b], starts[b + 1])``. Since the bucket of a
    value never decreases with it, a value in a lower bucket than ``q`` is below ``q`` and one
    in a higher bucket above it, so ``np.searchsorted(values, q)`` (either side) lies in
    ``[starts[b], starts[b + 1]]`` for ``q``'s bucket ``b``: a search over a bucket instead
    of ~20 halvings of the whole array."""
    n = values.shape[0]
    n_buckets = 1 << max(int(n).bit_length(), 1)
    origin = float(values[0]) if n else 0.0
    span = float(values[-1]) - origin if n else 0.0
    scale = n_buckets / span if span > 0 and np.isfinite(span) else 0.0
    return _axis_starts(read_only(values), origin, scale, n_buckets), origin, scale


@_jit
def _bounds_in_buckets(values: Any, starts: Any, origin: float, scale: float, queries: Any, right: bool) -> Any:
    """``np.searchsorted(values, queries, side="right" if right else "left")`` through an
    :func:`axis_table` of ``values`` (no NaN among ``queries``)."""
    m = queries.shape[0]
    n_buckets = starts.shape[0] - 1
    out = np.empty(m, dtype=np.int64)
    # Three passes, each asking for the lines the next one reads (the table entry, then the
    # bucket's first values), so that cold lines are fetched together rather than one by one.
    lo = np.empty(m, dtype=np.int64)
    for i in range(m):
        b = _bucket(queries[i], origin, scale, n_buckets)
        lo[i] = b
        _prefetch(starts, b)
    for i in range(m):
        b = lo[i]
        lo[i] = np.int64(starts[b])
        out[i] = np.int64(starts[b + 1])
        _prefetch(values, lo[i])
    for i in range(m):
        q = queries[i]
        a = lo[i]
        e = out[i]
        while a < e:
            mid = (a + e) >> 1
            v = values[mid]
            if v <= q if right else v < q:
                a = mid + 1
            else:
                e = mid
        out[i] = a
    return out


def bounds_in_buckets(values: Any, table: AxisTable, queries: Any, *, right: bool = False) -> Int64Array:
    """``np.searchsorted(values, queries, side=...)`` through ``table = axis_table(values)``
    (no NaN among ``queries``)."""
    starts, origin, scale = table
    return _bounds_in_buckets(read_only(values), starts, origin, scale, queries, right)


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
        # Every question's positions at this level are known before any is read: ask for
        # all their lines first, so the reads below overlap instead of waiting one by one
        # (the main server's counts run on caches the workers have just swept).
        for i in range(m):
            _prefetch(w, lo_[i] >> 6)
            _prefetch(b, lo_[i] >> 6)
            _prefetch(w, hi_[i] >> 6)
            _prefetch(b, hi_[i] >> 6)
        for i in range(m):
            if v[i] >= full:
                continue
            lo1 = _rank1(w, b, lo_[i])
            hi1 = _rank1(w, b, hi_[i])
            # Bit 1: every value with a 0 here (same prefix) is smaller; follow the ones. Bit
            # 0: follow the zeros. Both outcomes are computed and one kept by arithmetic, as
            # the bit is a coin flip to the branch predictor.
            one = (v[i] >> shift) & 1
            lo0, hi0 = lo_[i] - lo1, hi_[i] - hi1
            out[i] += one * (hi0 - lo0)
            lo_[i] = lo0 + one * (lo1 + zeros - lo0)
            hi_[i] = hi0 + one * (hi1 + zeros - hi0)
    return out


@_jit
def _count(kw: Any, xmin: Any, ymin: Any, xmax: Any, ymax: Any, xs: Any, ys: Any, kw_key: Any,
           words: Any, before: Any, n_zeros: Any, x_starts: Any, x_origin: float, x_scale: float,
           y_starts: Any, y_origin: float, y_scale: float, k_starts: Any, k_origin: float, k_scale: float) -> Any:
    x_lo = _bounds_in_buckets(xs, x_starts, x_origin, x_scale, xmin, False)
    x_hi = _bounds_in_buckets(xs, x_starts, x_origin, x_scale, xmax, True)
    y_lo = _bounds_in_buckets(ys, y_starts, y_origin, y_scale, ymin, False)
    y_hi = _bounds_in_buckets(ys, y_starts, y_origin, y_scale, ymax, True)
    base = kw * (xs.shape[0] + 1)
    p_lo = _bounds_in_buckets(kw_key, k_starts, k_origin, k_scale, base + x_lo, False)
    p_hi = _bounds_in_buckets(kw_key, k_starts, k_origin, k_scale, base + x_hi, False)
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
    axes: Axes,
) -> Int64Array:
    """``ObjectStatistics._count_keyword_in_rects`` compiled: ``kw`` valid keyword ids, the
    rectangles without NaN, ``matrix`` the keyword wavelet matrix as stacked level arrays
    (``_WaveletMatrix.stacked``), ``axes`` the :func:`axis_table` of ``xs``, ``ys`` and ``kw_key``."""
    words, before, n_zeros = matrix
    return _count(np.ascontiguousarray(kw, dtype=np.int64), np.ascontiguousarray(xmin, dtype=np.float64),
                  np.ascontiguousarray(ymin, dtype=np.float64), np.ascontiguousarray(xmax, dtype=np.float64),
                  np.ascontiguousarray(ymax, dtype=np.float64), xs, ys, kw_key, words, before, n_zeros,
                  *axes[0], *axes[1], *axes[2])


@_jit
def _sums(rows: Any, ptr: Any, ids: Any, n_keywords: int, xmin: Any, ymin: Any, xmax: Any, ymax: Any,
          xs: Any, ys: Any, kw_key: Any, words: Any, before: Any, n_zeros: Any, x_starts: Any, x_origin: float,
          x_scale: float, y_starts: Any, y_origin: float, y_scale: float, k_starts: Any, k_origin: float,
          k_scale: float) -> Any:
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
    counts = _count(kw[:j], x0[:j], y0[:j], x1[:j], y1[:j], xs, ys, kw_key, words, before, n_zeros,
                    x_starts, x_origin, x_scale, y_starts, y_origin, y_scale, k_starts, k_origin, k_scale)
    for e in range(j):
        out[owner[e]] += counts[e]
    return out


def keyword_sums_in_rects(
    rows: Int64Array, ptr: Int64Array, ids: Any, n_keywords: int,
    xmin: Float64Array, ymin: Float64Array, xmax: Float64Array, ymax: Float64Array,
    xs: Float64Array, ys: Float64Array, kw_key: Int64Array, matrix: tuple[Any, Any, Any],
    axes: Axes,
) -> Int64Array:
    """Per row ``Σ_{λ ∈ ψ(rows[i])} |O_{R_i,λ}|``, ``R_i = [xmin[i], xmax[i]] × [ymin[i], ymax[i]]``
    (Eq. 5 times |O_init|, each subscription over its own rectangle), in one compiled call: the
    keyword sets' CSR ``ptr``/``ids`` are expanded, counted and summed without the numpy
    calls of :func:`~dkmsks.core.partition._common.keyword_rect_weights` (which dedupe
    (rectangle, keyword) pairs: nothing to dedupe when every rectangle is its own). Rectangles
    without NaN; ``matrix`` and ``axes`` as for :func:`count_keyword_in_rects`."""
    words, before, n_zeros = matrix
    return _sums(np.ascontiguousarray(rows, dtype=np.int64), ptr, ids, n_keywords,
                 np.ascontiguousarray(xmin, dtype=np.float64), np.ascontiguousarray(ymin, dtype=np.float64),
                 np.ascontiguousarray(xmax, dtype=np.float64), np.ascontiguousarray(ymax, dtype=np.float64),
                 xs, ys, kw_key, words, before, n_zeros, *axes[0], *axes[1], *axes[2])


@_jit
def _keyword_sums(rows: Any, ptr: Any, ids: Any, counts: Any) -> Any:
    n_keywords = counts.shape[0]
    out = np.zeros(rows.shape[0], dtype=np.int64)
    for i in range(rows.shape[0]):
        total = 0
        for p in range(ptr[rows[i]], ptr[rows[i] + 1]):
            k = ids[p]
            if 0 <= k < n_keywords:  # an unknown keyword counts 0, as on the numpy path
                total += counts[k]
        out[i] = total
    return out


def keyword_sums(rows: Int64Array, ptr: Int64Array, ids: Any, counts: Int64Array) -> Int64Array:
    """Per row ``Σ_{λ ∈ ψ(rows[i])} |O_λ|`` (Eq. 1 times |O_init|) in one compiled loop, for
    non-negative ``rows`` of the keyword sets' CSR ``ptr``/``ids``, ``counts[λ] = |O_λ|``."""
    return _keyword_sums(np.ascontiguousarray(rows, dtype=np.int64), np.ascontiguousarray(ptr),
                         np.ascontiguousarray(ids), counts)
