"""The main server's book of live new subscriptions: worker, weight and ball of each.

Initial subscriptions sit in the plan's sorted columns (:class:`~.server.MainServer`); the ones
registered later are few (a hundred a timestamp, against millions) but are touched every
timestamp: looked up by the insertions' duplicate check and by deletions, and re-costed by
:meth:`~.server.MainServer.refresh` as their balls shrink (``new_cost="live"``). The book keeps
them as columns that grow by doubling (an append per timestamp costs its own rows, not a copy of
the book) and finds them through a sorted index of the live ids; a deletion only leaves the
index, and the columns drop their dead rows once these outnumber the live ones.

Under the numba kernels, the refresh's first steps (refusing a repeated id, finding each id,
choosing the balls to re-cost) are one compiled pass (:func:`pick_recosts`) and the re-costed
balls' boxes another (:func:`ball_boxes_compiled`); the numpy steps beside them are the
reference, and ``tests/unit/test_new_book.py`` holds the two to the same answers. The pass
avoids branches on the data where it can (a branchless binary search; repeated ids told by a
mark per row rather than a sort): it runs once a timestamp, right after the workers, on a
branch predictor that has not seen its data (docs/benchmarks.md has the measurement).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dkmsks.core.jit import _jit, _prefetch, read_only
from dkmsks.core.model import Float64Array, Int32Array, Int64Array, KeywordSets, Rect
from dkmsks.core.sets import has_duplicates, member

__all__ = ["NewSubscriptionBook", "ball_boxes_compiled", "pick_recosts", "pick_recosts_numpy"]


class NewSubscriptionBook:
    """Live new subscriptions as growing columns, found by id.

    Columns (views of the rows in use, live and dead alike; write through them):
    :attr:`worker`, :attr:`weight` (``C(s) · |O_init|``), :attr:`x`, :attr:`y`,
    :attr:`keywords` and :attr:`costed_r2`, the squared radius the weight was last computed
    with (``inf`` until the first re-cost).
    """

    #: Dead rows tolerated before the columns are compacted, whatever the live count.
    SLACK = 1024

    def __init__(self) -> None:
        self._n = 0  # rows in use, live and dead
        self._nk = 0  # keyword entries in use
        self._sub_id = np.zeros(0, dtype=np.int64)
        self._worker = np.zeros(0, dtype=np.int32)
        self._weight = np.zeros(0, dtype=np.int64)
        self._x = np.zeros(0)
        self._y = np.zeros(0)
        self._r2 = np.zeros(0)
        self._kw_ptr = np.zeros(1, dtype=np.int64)
        self._kw_ids = np.zeros(0, dtype=np.int32)
        self.ids = np.zeros(0, dtype=np.int64)  # live ids, ascending (read only)
        self.rows = np.zeros(0, dtype=np.int64)  # the column row of each (read only)

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    # ---- columns -------------------------------------------------------------------------
    @property
    def n_rows(self) -> int:
        """Column rows in use (live and dead)."""
        return self._n

    @property
    def sub_id(self) -> Int64Array:
        """Id of each row."""
        return self._sub_id[: self._n]

    @property
    def worker(self) -> Int32Array:
        """Worker of each row."""
        return self._worker[: self._n]

    @property
    def weight(self) -> Int64Array:
        """``C(s) · |O_init|`` of each row."""
        return self._weight[: self._n]

    @property
    def x(self) -> Float64Array:
        """Location x of each row."""
        return self._x[: self._n]

    @property
    def y(self) -> Float64Array:
        """Location y of each row."""
        return self._y[: self._n]

    @property
    def costed_r2(self) -> Float64Array:
        """Squared radius of the ball each row's weight was last computed with (``inf``: never)."""
        return self._r2[: self._n]

    @property
    def keywords(self) -> KeywordSets:
        """Keyword sets of the rows (CSR views)."""
        return KeywordSets(self._kw_ptr[: self._n + 1], self._kw_ids[: self._nk])

    # ---- changes -------------------------------------------------------------------------
    def add(self, ids: Int64Array, workers: Int32Array, weights: Int64Array,
            x: Float64Array, y: Float64Array, keywords: KeywordSets) -> None:
        """Register subscriptions whose ids are not held yet (one row each, in this order),
        never costed by a ball."""
        b = int(ids.shape[0])
        if b == 0:
            return
        lo, hi = int(keywords.ptr[0]), int(keywords.ptr[-1])
        n, nk = self._n, self._nk
        self._reserve(n + b, nk + hi - lo)
        self._sub_id[n:n + b] = ids
        self._worker[n:n + b] = workers
        self._weight[n:n + b] = weights
        self._x[n:n + b] = x
        self._y[n:n + b] = y
        self._r2[n:n + b] = math.inf
        self._kw_ptr[n + 1:n + b + 1] = nk + (keywords.ptr[1:] - lo)
        self._kw_ids[nk:nk + hi - lo] = keywords.ids[lo:hi]
        self._n, self._nk = n + b, nk + hi - lo
        rows = n + np.arange(b, dtype=np.int64)
        order = np.argsort(ids, kind="stable")
        at = np.searchsorted(self.ids, ids[order])
        self.ids = np.insert(self.ids, at, ids[order])
        self.rows = np.insert(self.rows, at, rows[order])

    def _reserve(self, rows: int, entries: int) -> None:
        """Room for ``rows`` rows and ``entries`` keyword entries: at least double, so the
        copies of a long run of appends cost a constant per row."""
        if rows > self._sub_id.shape[0]:
            cap = max(16, 2 * rows)
            for name in ("_sub_id", "_worker", "_weight", "_x", "_y", "_r2"):
                old = getattr(self, name)
                grown = np.empty(cap, dtype=old.dtype)
                grown[: self._n] = old[: self._n]
                setattr(self, name, grown)
            ptr = np.empty(cap + 1, dtype=np.int64)
            ptr[: self._n + 1] = self._kw_ptr[: self._n + 1]
            self._kw_ptr = ptr
        if entries > self._kw_ids.shape[0]:
            grown_ids = np.empty(max(64, 2 * entries), dtype=np.int32)
            grown_ids[: self._nk] = self._kw_ids[: self._nk]
            self._kw_ids = grown_ids

    def remove(self, ids: Int64Array) -> None:
        """Forget ``ids`` (ids not held are ignored)."""
        gone = member(self.ids, ids)
        if not gone.any():
            return
        self.ids, self.rows = self.ids[~gone], self.rows[~gone]
        if self._n - len(self) > max(len(self), self.SLACK):
            self._compact()

    def _compact(self) -> None:
        keep = np.sort(self.rows)
        kw = self.keywords.take(keep)
        n = int(keep.shape[0])
        for name in ("_sub_id", "_worker", "_weight", "_x", "_y", "_r2"):
            setattr(self, name, getattr(self, name)[keep])
        self._kw_ptr, self._kw_ids = kw.ptr, kw.ids
        self._n, self._nk = n, int(kw.ids.shape[0])
        self.rows = np.searchsorted(keep, self.rows)

    # ---- questions -----------------------------------------------------------------------
    def find(self, ids: Int64Array) -> Int64Array:
        """Column row of each of ``ids``, ``-1`` where it is not a live new subscription."""
        if self.ids.shape[0] == 0:
            return np.full(ids.shape[0], -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(self.ids, ids), self.ids.shape[0] - 1)
        return np.where(self.ids[at] == ids, self.rows[at], -1)


def pick_recosts_numpy(book: NewSubscriptionBook, ids: Int64Array, radius2: Float64Array,
                       shrink: float) -> tuple[bool, Int64Array, Int64Array]:
    """The refresh's choice (:meth:`~.server.MainServer.refresh`): whether ``ids`` repeat an
    id, and the positions in ``ids`` (ascending) and book rows of the live new subscriptions
    whose ball became finite or whose squared radius fell to ``shrink`` of the one last costed."""
    if has_duplicates(ids):
        return True, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    rows = book.find(ids)
    new = np.flatnonzero(rows >= 0)
    last, r = book.costed_r2[rows[new]], radius2[new]
    pick = new[(r != last) & ((last == math.inf) | (r <= shrink * last))]
    return False, pick, rows[pick]


def pick_recosts(book: NewSubscriptionBook, ids: Int64Array, radius2: Float64Array,
                 shrink: float) -> tuple[bool, Int64Array, Int64Array]:
    """:func:`pick_recosts_numpy` in one compiled pass."""
    if ids.shape[0] != radius2.shape[0]:  # (the compiled pass reads without bounds checks)
        raise ValueError("one radius² per subscription id")
    return _pick(np.ascontiguousarray(ids, dtype=np.int64), read_only(np.ascontiguousarray(radius2, dtype=np.float64)),
                 book.ids, book.rows, book.costed_r2, float(shrink))


@_jit
def _lower_bound(values: Any, q: Any) -> int:
    """``np.searchsorted(values, q)`` (left) of ascending ``values``, without a branch on the
    data: the loop runs ~log2(n) times whatever ``q`` is and each step is a conditional move,
    so it costs the same on a cold branch predictor (the main server runs right after the
    workers) as on a trained one."""
    n = values.shape[0]
    if n == 0:
        return 0
    lo = 0
    while n > 1:
        half = n >> 1
        lo = lo + half if values[lo + half - 1] < q else lo
        n -= half
    return lo + 1 if values[lo] < q else lo


@_jit
def _pick(ids: Any, r2: Any, live_ids: Any, live_rows: Any, costed: Any, shrink: float) -> Any:
    n = ids.shape[0]
    empty = np.zeros(0, dtype=np.int64)
    m = live_ids.shape[0]
    # The book's columns (a few thousand rows) are cold after the workers' turn: ask for all
    # their lines at once rather than each search waiting for its own.
    for p in range(0, m, 8):
        _prefetch(live_ids, p)
        _prefetch(live_rows, p)
    for p in range(0, costed.shape[0], 8):
        _prefetch(costed, p)
    pick = np.empty(n, dtype=np.int64)
    rows = np.empty(n, dtype=np.int64)
    # A repeated id is refused: ids the book holds are told apart by their row (a mark per
    # row, no sort), the others (initial or unknown subscriptions, few once the engine's
    # filter is on) by a sort of just those.
    seen = np.zeros(costed.shape[0], dtype=np.bool_)
    others = np.empty(n, dtype=np.int64)
    n_others = 0
    j = 0
    for i in range(n):
        q = ids[i]
        a = _lower_bound(live_ids, q)
        if a == m or live_ids[a] != q:
            others[n_others] = q
            n_others += 1
            continue
        row = live_rows[a]
        if seen[row]:
            return True, empty, empty
        seen[row] = True
        last, r = costed[row], r2[i]
        # The same test as the numpy path, comparison for comparison (NaN fails each alike).
        if r != last and (last == math.inf or r <= shrink * last):
            pick[j], rows[j] = i, row
            j += 1
    if n_others > 1:
        ordered = np.sort(others[:n_others])
        for i in range(1, n_others):
            if ordered[i] == ordered[i - 1]:
                return True, empty, empty
    return False, pick[:j].copy(), rows[:j].copy()


def ball_boxes_compiled(x: Float64Array, y: Float64Array, radius2: Float64Array,
                        space: Rect) -> tuple[Float64Array, Float64Array, Float64Array, Float64Array]:
    """:func:`~._common.ball_boxes` in one compiled loop (the same operations on each ball,
    so the same boxes to the bit)."""
    return _boxes(np.ascontiguousarray(x, dtype=np.float64), np.ascontiguousarray(y, dtype=np.float64),
                  np.ascontiguousarray(radius2, dtype=np.float64),
                  float(space.xmin), float(space.ymin), float(space.xmax), float(space.ymax))


@_jit
def _clip(v: float, lo: float, hi: float) -> float:
    # np.clip's order: the lower bound first, then the upper (NaN stays NaN).
    if v < lo:
        v = lo
    if v > hi:
        v = hi
    return v


@_jit
def _boxes(x: Any, y: Any, r2: Any, xmin: float, ymin: float, xmax: float, ymax: float) -> Any:
    n = x.shape[0]
    x0 = np.empty(n)
    y0 = np.empty(n)
    x1 = np.empty(n)
    y1 = np.empty(n)
    for i in range(n):
        if not np.isfinite(r2[i]):
            x0[i], y0[i], x1[i], y1[i] = xmin, ymin, xmax, ymax
            continue
        r = np.sqrt(r2[i])
        x0[i] = _clip(np.nextafter(x[i] - r, -np.inf), xmin, xmax)
        x1[i] = _clip(np.nextafter(x[i] + r, np.inf), xmin, xmax)
        y0[i] = _clip(np.nextafter(y[i] - r, -np.inf), ymin, ymax)
        y1[i] = _clip(np.nextafter(y[i] + r, np.inf), ymin, ymax)
    return x0, y0, x1, y1
