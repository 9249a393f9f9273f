"""Statistics of ``O_init`` used by the cost models (paper Eq. 1, 2 and 4).

The partitioners ask millions of counting questions about the static set ``O_init``:
``|O_λ|`` (Eq. 1), ``|O_R|`` for a rectangle ``R`` (Eq. 2) and ``|O_{R,λ}|`` (Eq. 4). All
three are answered *exactly* (docs/design.md §1: results never rest on approximations, and exact
counts keep every run reproducible) and in vectorised batches.

How the rectangle counts work
-----------------------------
A closed rectangle ``[xmin, xmax] × [ymin, ymax]`` becomes two integer ranges by binary search:
the points are sorted by ``x`` (so ``x ∈ [xmin, xmax]`` is a contiguous *position* range) and
every point gets a distinct ``y``-rank (so ``y ∈ [ymin, ymax]`` is a contiguous *rank* range;
equal coordinates fall on the right side because both ends use the matching ``searchsorted``
side). What remains is "how many values in positions ``[l, r)`` lie in ``[a, b)``", a classic
range-counting query that a *wavelet matrix* answers with one rank lookup per bit of the rank
(about 20 for a million points), independently of the rectangle's size or the data's skew —
the real data has very dense cities, where grid-based schemes degrade. Each level is a plain
bit vector with popcount-based ranks, so memory is about ``0.2`` bytes per point and level.

For Eq. 4 the same structure is built over the keyword postings ordered by
``(keyword, x)``: each keyword's postings form one contiguous block, so a (keyword, rect) query
is the same question restricted to the keyword's block.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise
from typing import TYPE_CHECKING, Literal

import numpy as np
import numpy.typing as npt

from dkmsks.core.config import thread_count
from dkmsks.core.model import Float64Array, Int32Array, Int64Array, KeywordSets, Objects

if TYPE_CHECKING:
    from dkmsks.core import stats_kernel

_MASKS = np.array([(1 << i) - 1 for i in range(64)], dtype=np.uint64)


class _BitRank:
    """A static bit vector with O(1) ``rank1`` (number of ones before a position).

    Bits are packed 64 to a word, with the number of ones before each word alongside, so a
    rank is two gathers and a popcount. Positions are int32 (callers keep ``n < 2**31``):
    half the memory traffic of int64 on the batch-wide arrays.
    """

    __slots__ = ("_before", "_words", "n_zeros")

    def __init__(self, bits: npt.NDArray[np.bool_]) -> None:
        n = bits.shape[0]
        # One spare word so that rank1(n) is valid even when n is a multiple of 64.
        n_words = n // 64 + 1
        packed = np.zeros(n_words * 8, dtype=np.uint8)
        packed[: (n + 7) // 8] = np.packbits(bits, bitorder="little")
        words = packed.view("<u8").astype(np.uint64, copy=False)
        ones = np.bitwise_count(words).astype(np.int32)
        before = np.zeros(n_words, dtype=np.int32)
        np.cumsum(ones[:-1], out=before[1:])
        self._words = words
        self._before = before
        self.n_zeros = int(n - int(ones.sum(dtype=np.int64)))

    @classmethod
    def from_parts(cls, words: npt.NDArray[np.uint64], before: Int32Array, n_zeros: int) -> _BitRank:
        """The bit vector from what :meth:`__init__` computed (:meth:`ObjectStatistics.to_arrays`)."""
        rank = cls.__new__(cls)
        rank._words, rank._before, rank.n_zeros = words, before, int(n_zeros)
        return rank

    def rank1(self, pos: Int32Array) -> Int32Array:
        """Ones among bits ``[0, pos)`` for every entry of ``pos`` (``0 <= pos <= n``)."""
        # Plain fancy indexing: measured faster than ``take`` (with or without ``out=``).
        word = pos >> 6
        out = self._before[word]
        out += np.bitwise_count(self._words[word] & _MASKS[pos & 63])
        return out


class _WaveletMatrix:
    """Static sequence of small non-negative ints answering "values < v in positions [l, r)".

    Level ``j`` stores bit ``L-1-j`` of every value after the values were stably partitioned
    by the higher bits (zeros first), the usual wavelet-matrix layout.
    """

    __slots__ = ("_stacked", "levels", "n_bits")

    def __init__(self, values: Int64Array, n_bits: int) -> None:
        if values.shape[0] >= 2**31 - 1:
            raise ValueError("more than 2**31 - 2 values are not supported")
        self.n_bits = n_bits
        levels: list[_BitRank] = []
        # int32 halves the memory traffic of the per-level stable partitions.
        cur = np.asarray(values).astype(np.int32)
        for shift in range(n_bits - 1, -1, -1):
            bits = ((cur >> shift) & 1).astype(np.bool_)
            levels.append(_BitRank(bits))
            # Stable partition: zeros keep their order, then ones keep theirs.
            cur = np.concatenate([cur[~bits], cur[bits]])
        # Every level has the same number of words (one bit per value): one array of all the
        # levels, each level a view of its row (the compiled counts read it whole).
        words = np.stack([lv._words for lv in levels])
        before = np.stack([lv._before for lv in levels])
        zeros = np.array([lv.n_zeros for lv in levels], dtype=np.int64)
        self.levels = [_BitRank.from_parts(words[j], before[j], int(zeros[j])) for j in range(n_bits)]
        self._stacked = (words, before, zeros)

    def stacked(self) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int32], Int64Array]:
        """The levels' words, ranks before each word and zero counts, one row per level."""
        return self._stacked

    def __getstate__(self) -> tuple[int, tuple[npt.NDArray[np.uint64], npt.NDArray[np.int32], Int64Array]]:
        # The stacked arrays only: the levels are views of them (pickling both doubled the size).
        return self.n_bits, self._stacked

    def __setstate__(self, state: tuple[int, tuple[npt.NDArray[np.uint64], npt.NDArray[np.int32], Int64Array]]) -> None:
        self.n_bits, self._stacked = state
        words, before, zeros = self._stacked
        self.levels = [_BitRank.from_parts(words[j], before[j], int(zeros[j])) for j in range(self.n_bits)]

    def to_arrays(self, prefix: str) -> dict[str, npt.NDArray]:
        words, before, zeros = self._stacked
        return {
            f"{prefix}_n_bits": np.array(self.n_bits, dtype=np.int64),
            f"{prefix}_words": words,
            f"{prefix}_before": before,
            f"{prefix}_n_zeros": zeros,
        }

    @classmethod
    def from_arrays(cls, arrays: dict[str, npt.NDArray], prefix: str) -> _WaveletMatrix:
        matrix = cls.__new__(cls)
        matrix.n_bits = int(arrays[f"{prefix}_n_bits"])
        # (Saved arrays already have these types: no copies.)
        words = np.ascontiguousarray(arrays[f"{prefix}_words"], dtype=np.uint64)
        before = np.ascontiguousarray(arrays[f"{prefix}_before"], dtype=np.int32)
        zeros = np.asarray(arrays[f"{prefix}_n_zeros"], dtype=np.int64)
        if not words.shape[0] == before.shape[0] == zeros.shape[0] == matrix.n_bits:
            raise ValueError(f"wavelet matrix {prefix!r}: level arrays disagree with n_bits={matrix.n_bits}")
        matrix.levels = [_BitRank.from_parts(words[j], before[j], int(zeros[j])) for j in range(matrix.n_bits)]
        matrix._stacked = (words, before, zeros)
        return matrix

    def count_less(self, v: Int64Array, lo: Int64Array, hi: Int64Array) -> Int64Array:
        """Number of values ``< v[i]`` among positions ``[lo[i], hi[i])`` (``lo <= hi``).

        ``v`` must lie in ``[0, 2**n_bits]``; ``2**n_bits`` means "every value".
        """
        v = np.asarray(v, dtype=np.int64)
        full = v >= (1 << self.n_bits)
        out = np.where(full, np.asarray(hi, dtype=np.int64) - lo, 0)
        if full.all():
            return out
        keep = np.flatnonzero(~full)
        vk = v[keep].astype(np.int32)
        lo_ = np.asarray(lo)[keep].astype(np.int32)
        hi_ = np.asarray(hi)[keep].astype(np.int32)
        acc = np.zeros(vk.shape[0], dtype=np.int32)
        for j, level in enumerate(self.levels):
            # Arithmetic blends instead of np.where / masked ufuncs: several times faster.
            bit = (vk >> (self.n_bits - 1 - j)) & 1
            lo1 = level.rank1(lo_)
            hi1 = level.rank1(hi_)
            lo0 = lo_ - lo1
            hi0 = hi_ - hi1
            # Where v has a 1 here, every value with a 0 in this bit (same prefix) is smaller:
            # count them and follow the ones (which start after all n_zeros zeros); otherwise
            # follow the zeros.
            acc += bit * (hi0 - lo0)
            lo_ = lo0 + bit * (lo1 + level.n_zeros - lo0)
            hi_ = hi0 + bit * (hi1 + level.n_zeros - hi0)
        out[keep] = acc
        return out

    def count_between(
        self, lo: Int64Array, hi: Int64Array, a: Int64Array, b: Int64Array
    ) -> Int64Array:
        """Number of values in ``[a, b)`` among positions ``[lo, hi)``; empty ranges give 0."""
        hi = np.maximum(hi, lo)
        b = np.maximum(b, a)
        m = lo.shape[0]
        # One pass over the levels for both ends: stack the two "less than" questions.
        both = self.count_less(
            np.concatenate([b, a]), np.concatenate([lo, lo]), np.concatenate([hi, hi])
        )
        return both[:m] - both[m:]


#: Batches of fewer Eq. 4 queries than this take the compiled path (numba; a main server's
#: re-costs of one timestamp). Bigger ones, a partitioner's, sort their queries instead.
_COMPILED_BELOW = 4096

#: Batches of at least twice this many queries are split over threads.
_PARALLEL_FROM = 32768

#: Below this many queries a plain binary search is cheaper than sorting the queries first.
_SORT_QUERIES_FROM = 4096


def _search(
    sorted_values: npt.NDArray, queries: npt.NDArray, side: Literal["left", "right"]
) -> Int64Array:
    """``np.searchsorted`` for a big batch: sort the queries first, then search in order.

    numpy's searchsorted reuses the previous answer as a hint when the queries are sorted, so
    the random cache misses of a million binary searches disappear; with numpy's SIMD argsort
    this is ~4x faster overall (measured: 45 ms instead of 200 ms for 1M queries on 1M values).
    """
    if queries.shape[0] < _SORT_QUERIES_FROM:
        return np.searchsorted(sorted_values, queries, side=side).astype(np.int64)
    order = np.argsort(queries)
    out = np.empty(queries.shape[0], dtype=np.int64)
    out[order] = np.searchsorted(sorted_values, queries[order], side=side)
    return out


def _as_f64(a: npt.ArrayLike) -> Float64Array:
    return np.atleast_1d(np.asarray(a, dtype=np.float64))


class ObjectStatistics:
    """Exact counting structure over ``O_init``.

    Answers, for millions of queries at a time:
    - ``keyword_counts(kw)``: ``|O_λ|`` (Eq. 1 numerator);
    - ``count_in_rects(xmin, ymin, xmax, ymax)``: ``|O_R|`` for closed rectangles (Eq. 2);
    - ``count_keyword_in_rects(kw, xmin, ymin, xmax, ymax)``: ``|O_{R,λ}|`` per (keyword, rect)
      pair (Eq. 4).
    Probabilities are the counts divided by ``n_objects``. Keywords never seen in ``O_init``
    (ids >= the vocabulary size at build time) count zero.

    Rectangles are closed: a point on an edge or a corner counts. A rectangle with
    ``xmin > xmax`` or ``ymin > ymax`` is empty; a degenerate one (a segment or a point) counts
    the objects on it. Queries are answered in ``O(log n)`` array operations per batch, each
    over the whole batch (see the module docstring).
    """

    n_objects: int
    n_keywords: int

    def __init__(
        self,
        xs: Float64Array,
        ys: Float64Array,
        counts: Int64Array,
        space: _WaveletMatrix,
        kw_key: Int64Array,
        kw_matrix: _WaveletMatrix,
        *,
        workers: int,
        kernel: str | None = None,
    ) -> None:
        from dkmsks.core.kernel import kernel_name

        #: ``numba``: small batches of Eq. 4 counts take the compiled path
        #: (:mod:`dkmsks.core.stats_kernel`, the same counts); ``numpy``: never.
        self.kernel = kernel_name(kernel)
        self.n_objects = int(xs.shape[0])
        self.n_keywords = int(counts.shape[0])
        self._xs = xs  # x of every object, ascending (position order of both matrices)
        self._ys = ys  # y of every object, ascending (defines the y-ranks)
        self._counts = counts
        self._space = space
        self._kw_key = kw_key  # keyword * (n + 1) + x-position of each posting, ascending
        self._kw_matrix = kw_matrix
        self._threads = thread_count(workers)
        # The compiled counts' bucket tables of xs, ys and kw_key (stats_kernel.axis_table), built on
        # first use and never saved or pickled.
        self._axes: stats_kernel.Axes | None = None

    @classmethod
    def build(
        cls, objects: Objects, n_keywords: int, *, workers: int, kernel: str | None = None
    ) -> ObjectStatistics:
        """Index ``O_init`` for Eq. 1, 2 and 4.

        Parameters
        ----------
        objects
            ``O_init`` (timestamps are ignored).
        n_keywords
            Vocabulary size at build time; keyword ids ``>= n_keywords`` count zero. Postings
            with such ids (should not happen) are ignored.
        workers
            Threads for big query batches (``1``: none), at least 1; never changes a count.
            The caller counts them (one per usable core: ``dkmsks.cores.usable_cores()``): the
            core reads nothing of the machine.
        kernel
            ``numba`` or ``numpy`` for small batches of Eq. 4 counts (by default numba where it
            imports); never changes a count.
        """
        workers = thread_count(workers)
        n = len(objects)
        n_bits = max(1, int(n).bit_length())  # y-ranks are < n < 2**n_bits
        # Any order among equal coordinates is fine (positions and ranks only need to be
        # distinct), so numpy's fast default (SIMD) sort beats a stable one.
        x_order = np.argsort(objects.x)
        y_order = np.argsort(objects.y)
        xs = objects.x[x_order]
        ys = objects.y[y_order]
        # Distinct ranks: ties in y get consecutive ranks, and a query's searchsorted bounds
        # include or exclude a whole run of equal y values, so ties never split wrongly.
        y_rank = np.empty(n, dtype=np.int64)
        y_rank[y_order] = np.arange(n, dtype=np.int64)
        x_pos = np.empty(n, dtype=np.int64)
        x_pos[x_order] = np.arange(n, dtype=np.int64)

        owners = objects.keywords.owners()
        kws = objects.keywords.ids.astype(np.int64)
        ok = (kws >= 0) & (kws < n_keywords)
        owners, kws = owners[ok], kws[ok]
        counts = np.bincount(kws, minlength=n_keywords).astype(np.int64)[:n_keywords]
        key = kws * (n + 1) + x_pos[owners]
        order = np.argsort(key)  # keys are distinct: no stability needed
        kw_key = key[order]
        # The two matrices are independent; numpy releases the GIL in the per-level work.
        with ThreadPoolExecutor(max_workers=min(2, workers)) as pool:
            space_f = pool.submit(_WaveletMatrix, y_rank[x_order], n_bits)
            kw_f = pool.submit(_WaveletMatrix, y_rank[owners[order]], n_bits)
            space, kw_matrix = space_f.result(), kw_f.result()
        return cls(xs, ys, counts, space, kw_key, kw_matrix, workers=workers, kernel=kernel)

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "_axes": None}

    def _compiled(self, n_counts: int, *bounds: Float64Array) -> bool:
        """Whether a batch of ``n_counts`` Eq. 4 counts takes the compiled path: under numba,
        small, and no NaN among the rectangles' ``bounds``."""
        return (self.kernel == "numba" and n_counts < _COMPILED_BELOW
                and not any(np.isnan(b).any() for b in bounds))

    def _axis_tables(self) -> stats_kernel.Axes:
        axes = getattr(self, "_axes", None)  # (also absent from a pickle of a version without them)
        if axes is None:
            from dkmsks.core import stats_kernel

            axes = self._axes = (stats_kernel.axis_table(self._xs), stats_kernel.axis_table(self._ys),
                                 stats_kernel.axis_table(self._kw_key))
        return axes

    def to_arrays(self) -> dict[str, npt.NDArray]:
        """The whole structure as named arrays (``np.savez``-able); :meth:`from_arrays` takes
        them back without rebuilding (a job that reuses a plan's statistics skips reading
        ``O_init``)."""
        return {"xs": self._xs, "ys": self._ys, "counts": self._counts, "kw_key": self._kw_key,
                **self._space.to_arrays("space"), **self._kw_matrix.to_arrays("kw")}

    @classmethod
    def from_arrays(cls, arrays: dict[str, npt.NDArray], *, workers: int,
                    kernel: str | None = None) -> ObjectStatistics:
        """Inverse of :meth:`to_arrays`; raises ``ValueError`` (or ``KeyError``) on arrays that
        do not fit together."""
        xs, ys = np.asarray(arrays["xs"], dtype=np.float64), np.asarray(arrays["ys"], dtype=np.float64)
        space = _WaveletMatrix.from_arrays(arrays, "space")
        kw_matrix = _WaveletMatrix.from_arrays(arrays, "kw")
        kw_key = np.asarray(arrays["kw_key"], dtype=np.int64)
        n = xs.shape[0]
        if ys.shape[0] != n or space.levels[0]._words.shape[0] != n // 64 + 1 \
                or kw_matrix.levels[0]._words.shape[0] != kw_key.shape[0] // 64 + 1:
            raise ValueError("statistics arrays of different sizes")
        return cls(xs, ys, np.asarray(arrays["counts"], dtype=np.int64), space, kw_key, kw_matrix,
                   workers=workers, kernel=kernel)

    def keyword_counts(self, kw: npt.ArrayLike) -> Int64Array:
        """``|O_λ|`` for every keyword id in ``kw`` (Eq. 1); unseen ids give 0."""
        kw = np.atleast_1d(np.asarray(kw, dtype=np.int64))
        valid = (kw >= 0) & (kw < self.n_keywords)
        return np.where(valid, self._counts[np.where(valid, kw, 0)], 0).astype(np.int64)

    def keyword_sums(self, keywords: KeywordSets, rows: Int64Array) -> Int64Array:
        """Per row ``Σ_{λ ∈ ψ(rows[i])} |O_λ|`` (Eq. 1 times |O_init|), ``rows`` indexing
        ``keywords``: one compiled loop under numba (:func:`dkmsks.core.stats_kernel.keyword_sums`),
        :meth:`keyword_counts` summed per row otherwise."""
        rows = np.asarray(rows, dtype=np.int64)
        if self.kernel == "numba" and (rows.shape[0] == 0 or int(rows.min()) >= 0):
            from dkmsks.core import stats_kernel

            return stats_kernel.keyword_sums(rows, keywords.ptr, keywords.ids, self._counts)
        sub = keywords.take(rows)
        if sub.ids.shape[0] == 0:
            return np.zeros(rows.shape[0], dtype=np.int64)
        counts = self.keyword_counts(sub.ids)
        # bincount with float weights is exact here: every sum is far below 2**53.
        return np.bincount(sub.owners(), weights=counts, minlength=rows.shape[0]).astype(np.int64)

    def _in_threads(self, fn: Callable[..., Int64Array], *arrays: npt.NDArray) -> Int64Array:
        """``fn(*arrays)``, for big batches as contiguous slices in parallel threads.

        numpy releases the GIL in the sorts, binary searches, gathers and arithmetic that make
        up all of the work, so the slices really run concurrently.
        """
        m = arrays[0].shape[0]
        if self._threads <= 1 or m < 2 * _PARALLEL_FROM:
            return fn(*arrays)
        n_parts = min(self._threads, m // _PARALLEL_FROM)
        cuts = np.linspace(0, m, n_parts + 1).astype(np.int64).tolist()
        out = np.empty(m, dtype=np.int64)

        def run(a: int, b: int) -> None:
            out[a:b] = fn(*(x[a:b] for x in arrays))

        with ThreadPoolExecutor(max_workers=n_parts) as pool:
            for f in [pool.submit(run, a, b) for a, b in pairwise(cuts)]:
                f.result()
        return out

    def _rank_bounds(
        self, xmin: Float64Array, ymin: Float64Array, xmax: Float64Array, ymax: Float64Array
    ) -> tuple[Int64Array, Int64Array, Int64Array, Int64Array]:
        # "left" for the lower bound and "right" for the upper bound make both ends closed.
        x_lo = _search(self._xs, xmin, "left")
        x_hi = _search(self._xs, xmax, "right")
        y_lo = _search(self._ys, ymin, "left")
        y_hi = _search(self._ys, ymax, "right")
        return x_lo, x_hi, y_lo, y_hi

    def count_in_rects(
        self, xmin: Float64Array, ymin: Float64Array, xmax: Float64Array, ymax: Float64Array
    ) -> Int64Array:
        """``|O_R|`` for every closed rectangle ``R = [xmin, xmax] × [ymin, ymax]`` (Eq. 2).

        All four arguments are broadcast to a common 1-D shape.
        """
        xmin, ymin, xmax, ymax = np.broadcast_arrays(
            _as_f64(xmin), _as_f64(ymin), _as_f64(xmax), _as_f64(ymax)
        )
        if xmin.shape[0] == 0 or self.n_objects == 0:
            return np.zeros(xmin.shape[0], dtype=np.int64)
        return self._in_threads(self._count_in_rects, xmin, ymin, xmax, ymax)

    def _count_in_rects(
        self, xmin: Float64Array, ymin: Float64Array, xmax: Float64Array, ymax: Float64Array
    ) -> Int64Array:
        x_lo, x_hi, y_lo, y_hi = self._rank_bounds(xmin, ymin, xmax, ymax)
        return self._space.count_between(x_lo, x_hi, y_lo, y_hi)

    def count_keyword_in_rects(
        self,
        kw: npt.ArrayLike,
        xmin: Float64Array,
        ymin: Float64Array,
        xmax: Float64Array,
        ymax: Float64Array,
    ) -> Int64Array:
        """``|O_{R,λ}|`` for every (keyword, closed rectangle) query pair (Eq. 4).

        ``kw[i]`` is paired with rectangle ``i``; all five arguments are broadcast to a common
        1-D shape, so one keyword against many rectangles (or the reverse) works too. Keyword
        ids outside ``[0, n_keywords)`` give 0.
        """
        kw_a = np.atleast_1d(np.asarray(kw, dtype=np.int64))
        kw_a, xmin, ymin, xmax, ymax = np.broadcast_arrays(
            kw_a, _as_f64(xmin), _as_f64(ymin), _as_f64(xmax), _as_f64(ymax)
        )
        m = kw_a.shape[0]
        out = np.zeros(m, dtype=np.int64)
        valid = (kw_a >= 0) & (kw_a < self.n_keywords)
        if m == 0 or self.n_objects == 0 or not valid.any():
            return out
        if not valid.all():
            sel = np.flatnonzero(valid)
            out[sel] = self.count_keyword_in_rects(
                kw_a[sel], xmin[sel], ymin[sel], xmax[sel], ymax[sel]
            )
            return out
        return self._in_threads(self._count_keyword_in_rects, kw_a, xmin, ymin, xmax, ymax)

    def _count_keyword_in_rects(
        self,
        kw_a: Int64Array,
        xmin: Float64Array,
        ymin: Float64Array,
        xmax: Float64Array,
        ymax: Float64Array,
    ) -> Int64Array:
        if self._compiled(kw_a.shape[0], xmin, ymin, xmax, ymax):
            from dkmsks.core import stats_kernel

            return stats_kernel.count_keyword_in_rects(kw_a, xmin, ymin, xmax, ymax, self._xs, self._ys, self._kw_key,
                                                       self._kw_matrix.stacked(), self._axis_tables())
        x_lo, x_hi, y_lo, y_hi = self._rank_bounds(xmin, ymin, xmax, ymax)
        # The keyword's block is sorted by x-position; keys make the block boundaries part of
        # one global binary search (an x bound of n lies past every key of the block, before the
        # next block).
        base = kw_a * (self.n_objects + 1)
        p_lo = _search(self._kw_key, base + x_lo, "left")
        p_hi = _search(self._kw_key, base + x_hi, "left")
        return self._kw_matrix.count_between(p_lo, p_hi, y_lo, y_hi)

    def keyword_sums_in_rects(
        self,
        keywords: KeywordSets,
        rows: Int64Array,
        xmin: Float64Array,
        ymin: Float64Array,
        xmax: Float64Array,
        ymax: Float64Array,
    ) -> Int64Array:
        """Per row ``Σ_{λ ∈ ψ(rows[i])} |O_{R_i,λ}|`` with ``R_i`` rectangle ``i`` (Eq. 5 times
        |O_init|, every subscription over its own rectangle: the main server's re-costs).

        ``rows`` index ``keywords``; the four bounds have one entry per row. The counts are
        :meth:`count_keyword_in_rects`' summed per row; a small batch without NaN bounds runs
        as one compiled call (:func:`dkmsks.core.stats_kernel.keyword_sums_in_rects`).
        """
        rows = np.asarray(rows, dtype=np.int64)
        xmin, ymin, xmax, ymax = (_as_f64(b) for b in (xmin, ymin, xmax, ymax))
        n = rows.shape[0]
        if n == 0 or self.n_objects == 0:
            return np.zeros(n, dtype=np.int64)
        lengths = keywords.ptr[rows + 1] - keywords.ptr[rows]
        if self._compiled(int(lengths.sum()), xmin, ymin, xmax, ymax):
            from dkmsks.core import stats_kernel

            return stats_kernel.keyword_sums_in_rects(
                rows, np.ascontiguousarray(keywords.ptr), np.ascontiguousarray(keywords.ids), self.n_keywords,
                xmin, ymin, xmax, ymax, self._xs, self._ys, self._kw_key, self._kw_matrix.stacked(),
                self._axis_tables())
        owner = np.repeat(np.arange(n, dtype=np.int64), lengths)
        kw = keywords.take(rows).ids.astype(np.int64)
        counts = self.count_keyword_in_rects(kw, xmin[owner], ymin[owner], xmax[owner], ymax[owner])
        # bincount with float weights is exact here: every sum is far below 2**53.
        return np.bincount(owner, weights=counts, minlength=n).astype(np.int64)
