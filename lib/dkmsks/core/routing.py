"""Which workers need which objects: the main server's routing summary (docs/design.md §2.6).

The paper's main server hands every new object to every worker. A worker only *needs* object
``o`` when one of its live subscriptions shares a keyword with ``o`` and ``o`` lies within that
subscription's ball (docs/design.md §1; the ball is the whole plane while the result holds fewer
than ``k`` objects, so a new subscription needs every object sharing a keyword). Anything else it
receives, its index probes and its exact test rejects. Testing each object against every ball
would be the workers' whole work done again on the main server; :class:`ObjectRouter` keeps a
summary instead, small enough to keep current on every timestamp and *conservative*: an object
goes to every worker that needs it, and maybe to a few more (docs/design.md §3 fact 1, again).

**The summary.** Per keyword, a pyramid of grids over the data space (level ``l`` has
``2^l × 2^l`` cells, ``0 <= l <= levels``), and per ``(keyword, level, cell)`` how many balls of
each worker are *posted* there. A ball is posted under each keyword of its subscription at the
finest level where its bounding box spans at most ``cells`` cells per axis, in every cell of that
window the circle reaches; an infinite ball is posted in the one cell of level 0. An object goes
to worker ``w`` when one of its keywords has a ball of ``w`` posted in the object's cell at some
level. A ball lies within the cells it is posted in, so every object inside a ball reaches its
worker; the cell arithmetic is monotone in the coordinate (points outside the data space clamp
to its edge cells, balls and objects alike) and every radius carries the index's float margin
(:func:`~dkmsks.core.worker_index.safe_radius`).

**Keeping it current.** Three events change balls, and each is applied so that the summary
never under-approximates:

- a new subscription is posted as an infinite ball from its registration on; within a round of
  several timestamps (routed before its events apply) a registration at ``t`` reaches the
  objects of ``t`` and later only (:meth:`ObjectRouter.route`'s ``new`` argument);
- a deletion is forgotten after the round's objects were routed (until then the ball only
  makes the summary larger);
- a ball that shrank is posted again when the workers report its radius (the final records of
  a round, the changed results of a timestamp: :meth:`ObjectRouter.shrink`). Balls only shrink
  (objects are only ever added), so a radius reported at the end of a round is still an upper
  bound at the start of the next, and a summary that has not heard of a shrink yet is still
  conservative.

The counts are held as sorted ``int64`` keys ``(keyword, pyramid cell, worker)`` with a count
each, plus a small sorted side part for keys new since the last merge (:class:`KeyCounts`); a
lookup finds each probe key's workers with two binary searches.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dkmsks.core.model import BoolArray, Float64Array, Int32Array, Int64Array, KeywordSets, Objects, Rect
from dkmsks.core.sets import has_duplicates
from dkmsks.core.sub_map import SortedSubMap
from dkmsks.core.worker_index import safe_radius

__all__ = ["DEFAULT_CELLS", "DEFAULT_LEVELS", "KeyCounts", "NewBalls", "ObjectRouter", "needed_objects"]

#: The finest level of the pyramid (``2^levels`` cells a side) and the most cells per axis a ball
#: is posted in. At these values on the 1M/1M workload the summary holds 9.8M keys (121 MiB) and
#: sends 1.9x the minimum bytes a timestamp (docs/benchmarks.md, "Routing the objects"); other
#: values have not been compared there.
DEFAULT_LEVELS = 14
DEFAULT_CELLS = 4


@dataclass(frozen=True)
class NewBalls:
    """Subscriptions registered within a round, not yet in the summary: each reaches the
    objects of its registration time ``t`` and later that share one of its keywords (an
    infinite ball)."""

    t: Int64Array
    workers: Int32Array
    keywords: KeywordSets


class KeyCounts:
    """A multiset of ``int64`` keys ``(prefix << shift) | suffix``, answered by prefix: sorted
    distinct keys and a count each, plus a small sorted side part for keys new since the last
    merge (merged once it holds an eighth of the large part), and a one-hash bit filter of the
    prefixes present (a lookup of an absent prefix, most of an object's probes, costs one bit;
    docs/benchmarks.md "Routing the objects"). A count that falls to zero keeps its key, and its
    prefix's bit, until the next merge; lookups skip it."""

    #: The side part is merged into the large one once it holds more keys than this and an eighth of it.
    SIDE_MIN = 4096
    #: The filter has at least 2^FILTER_MIN_BITS bits and eight per distinct prefix at the last merge.
    FILTER_MIN_BITS = 16
    _HASH = np.uint64(0x9E3779B97F4A7C15)

    def __init__(self, shift: int) -> None:
        self.shift = int(shift)
        self.keys = np.zeros(0, dtype=np.int64)
        self.counts = np.zeros(0, dtype=np.int32)
        self.side_keys = np.zeros(0, dtype=np.int64)
        self.side_counts = np.zeros(0, dtype=np.int32)
        self._filter_bits = self.FILTER_MIN_BITS
        self._filter = np.zeros(1 << (self._filter_bits - 3), dtype=np.uint8)

    def __len__(self) -> int:
        """Keys with a positive count."""
        return int(np.count_nonzero(self.counts > 0) + np.count_nonzero(self.side_counts > 0))

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays held."""
        return int(self.keys.nbytes + self.counts.nbytes + self.side_keys.nbytes + self.side_counts.nbytes
                   + self._filter.nbytes)

    def add(self, keys: Int64Array, sign: int) -> None:
        """Count every one of ``keys`` once more (``sign`` 1) or once less (``sign`` -1)."""
        if keys.shape[0] == 0:
            return
        k = np.sort(keys)
        starts = np.flatnonzero(np.concatenate([[True], k[1:] != k[:-1]]))
        u = k[starts]
        n = (np.diff(np.append(starts, k.shape[0])) * sign).astype(np.int32)
        if sign > 0:
            self._set(u >> self.shift)
        rest = _add_present(self.keys, self.counts, u, n)
        if rest.shape[0] and self.side_keys.shape[0]:
            rest = rest[_add_present(self.side_keys, self.side_counts, u[rest], n[rest])]
        if rest.shape[0]:
            if np.any(n[rest] < 0):
                raise AssertionError("a key was removed more often than it was added")
            self.side_keys = np.concatenate([self.side_keys, u[rest]])
            self.side_counts = np.concatenate([self.side_counts, n[rest]])
            order = np.argsort(self.side_keys, kind="stable")
            self.side_keys, self.side_counts = self.side_keys[order], self.side_counts[order]
        if self.side_keys.shape[0] > max(self.SIDE_MIN, self.keys.shape[0] >> 3):
            self.merge()

    def merge(self) -> None:
        """Merge the side part into the large one, drop keys whose count is zero and make the
        filter anew for the prefixes left."""
        keys = np.concatenate([self.keys, self.side_keys])
        counts = np.concatenate([self.counts, self.side_counts])
        keep = counts != 0
        keys, counts = keys[keep], counts[keep]
        order = np.argsort(keys, kind="stable")
        self.keys, self.counts = keys[order], counts[order]
        self.side_keys = np.zeros(0, dtype=np.int64)
        self.side_counts = np.zeros(0, dtype=np.int32)
        if np.any(self.counts < 0):
            raise AssertionError("a key was removed more often than it was added")
        prefixes = self.keys >> self.shift
        distinct = int(np.count_nonzero(prefixes[1:] != prefixes[:-1])) + 1 if prefixes.shape[0] else 0
        self._filter_bits = max(self.FILTER_MIN_BITS, (8 * distinct).bit_length())
        self._filter = np.zeros(1 << (self._filter_bits - 3), dtype=np.uint8)
        self._set(prefixes)

    def _slots(self, prefixes: Int64Array) -> Int64Array:
        return ((prefixes.astype(np.uint64) * self._HASH) >> np.uint64(64 - self._filter_bits)).astype(np.int64)

    def _set(self, prefixes: Int64Array) -> None:
        slots = self._slots(prefixes)
        np.bitwise_or.at(self._filter, slots >> 3, (1 << (slots & 7)).astype(np.uint8))

    def maybe(self, prefixes: Int64Array) -> BoolArray:
        """Whether each prefix may have a key (``False``: it has none)."""
        slots = self._slots(prefixes)
        return ((self._filter[slots >> 3] >> (slots & 7).astype(np.uint8)) & 1).astype(bool)

    def lookup(self, prefixes: Int64Array) -> tuple[Int64Array, Int64Array]:
        """Every key with a positive count under each of ``prefixes``: ``(i, suffix)`` pairs."""
        owners, suffixes = [], []
        lo, hi = prefixes << self.shift, (prefixes + 1) << self.shift
        for part_keys, part_counts in ((self.keys, self.counts), (self.side_keys, self.side_counts)):
            if part_keys.shape[0] == 0:
                continue
            owner, pos = _expand(np.searchsorted(part_keys, lo), np.searchsorted(part_keys, hi))
            live = part_counts[pos] > 0
            owners.append(owner[live])
            suffixes.append(part_keys[pos[live]] & ((1 << self.shift) - 1))
        if not owners:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        return np.concatenate(owners), np.concatenate(suffixes)


def _add_present(keys: Int64Array, counts: Int32Array, u: Int64Array, n: Int32Array) -> Int64Array:
    """Add ``n`` to the counts of those of ``u`` (distinct, sorted) that ``keys`` holds; the
    positions in ``u`` of the others."""
    if keys.shape[0] == 0:
        return np.arange(u.shape[0])
    pos = np.minimum(np.searchsorted(keys, u), keys.shape[0] - 1)
    hit = keys[pos] == u
    counts[pos[hit]] += n[hit]
    return np.flatnonzero(~hit)


def _unique_inverse(values: Int64Array) -> tuple[Int64Array, Int64Array]:
    """The distinct ``values`` (ascending) and each value's index among them, by a sort
    (numpy's hashing ``np.unique`` is slower on many distinct int64 values: dkmsks.core.sets)."""
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    new = np.concatenate([[True], ordered[1:] != ordered[:-1]]) if ordered.shape[0] else np.zeros(0, dtype=bool)
    inverse = np.empty(values.shape[0], dtype=np.int64)
    inverse[order] = np.cumsum(new) - 1
    return ordered[new], inverse


def _expand(lo: Int64Array, hi: Int64Array) -> tuple[Int64Array, Int64Array]:
    """For ranges ``[lo_i, hi_i)``: the owner ``i`` of each position, and the positions."""
    counts = hi - lo
    owner = np.repeat(np.arange(lo.shape[0], dtype=np.int64), counts)
    total = int(counts.sum())
    if total == 0:
        return owner, np.zeros(0, dtype=np.int64)
    starts = np.zeros(lo.shape[0], dtype=np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    return owner, np.arange(total, dtype=np.int64) - np.repeat(starts - lo, counts)


class ObjectRouter:
    """The main server's summary of the workers' balls, per keyword and cell (module doc).

    Parameters
    ----------
    space
        The plan's data space (docs/design.md §1): the pyramid's extent.
    workers
        ``m``.
    levels, cells
        The finest level (``2^levels`` cells a side) and the most cells per axis of a posting.
    """

    def __init__(self, space: Rect, workers: int, *, levels: int = DEFAULT_LEVELS,
                 cells: int = DEFAULT_CELLS) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if not 0 <= levels <= 20:
            raise ValueError(f"levels must be 0..20, got {levels}")
        if cells < 2:
            raise ValueError(f"cells must be >= 2, got {cells}")
        self.m = int(workers)
        self.levels = int(levels)
        self.cells = int(cells)
        self.x0, self.y0 = float(space.xmin), float(space.ymin)
        # A degenerate space still needs a positive extent to divide by (as RectIndex's).
        self.w = float(space.xmax - space.xmin) or 1.0
        self.h = float(space.ymax - space.ymin) or 1.0
        # Cell bounds are recomputed in floats; this margin (far above their rounding) keeps a
        # cell the circle may reach.
        self._margin = 1e-9 * (abs(space.xmin) + abs(space.xmax) + abs(space.ymin) + abs(space.ymax) + self.w + self.h)
        self._wbits = max(1, (self.m - 1).bit_length())
        self._cbits = ((4 ** (self.levels + 1) - 1) // 3).bit_length()
        self._kbits = 63 - self._wbits - self._cbits
        if self._kbits < 8:
            raise ValueError(f"{workers} workers and {levels} levels leave no room for keywords in a 63-bit key")
        self._offsets = np.array([(4**lv - 1) // 3 for lv in range(self.levels + 1)], dtype=np.int64)
        self.counts = KeyCounts(self._wbits)
        # The book: one row per subscription in the summary.
        self._map = SortedSubMap()
        self._n = 0
        self._free: list[int] = []
        cap = 16
        self.sub_id = np.full(cap, -1, dtype=np.int64)
        self.worker = np.zeros(cap, dtype=np.int32)
        self.x = np.zeros(cap)
        self.y = np.zeros(cap)
        self.r = np.zeros(cap)  # the radius posted with (safe, inf for an infinite ball)
        self.level = np.zeros(cap, dtype=np.int8)
        self.window = np.zeros((cap, 4), dtype=np.int64)  # a0, a1, b0, b1 at the posted level
        self.kw_start = np.zeros(cap, dtype=np.int64)
        self.kw_len = np.zeros(cap, dtype=np.int32)
        self._pool = np.zeros(64, dtype=np.int32)
        self._pool_used = 0

    def __len__(self) -> int:
        """Subscriptions in the summary."""
        return len(self._map)

    @property
    def nbytes(self) -> int:
        """Bytes of the summary's counts (the book's columns aside)."""
        return self.counts.nbytes

    # ------------------------------------------------------------------ the book
    def register(self, sub_ids: npt.ArrayLike, workers: npt.ArrayLike, x: npt.ArrayLike, y: npt.ArrayLike,
                 keywords: KeywordSets, radius2: npt.ArrayLike) -> None:
        """Post the balls of subscriptions (an id already in the summary is replaced): worker,
        location, keywords and squared radius (``inf`` for an empty or short result)."""
        ids = np.asarray(sub_ids, dtype=np.int64)
        if ids.shape[0] == 0:
            return
        if has_duplicates(ids):
            raise ValueError("register: a subscription id occurs twice")
        owners = np.asarray(workers, dtype=np.int32)
        if owners.shape[0] and (owners.min() < 0 or owners.max() >= self.m):
            raise ValueError(f"register: workers must be 0..{self.m - 1}")
        self.forget(ids)
        rows = self._take_rows(ids.shape[0])
        self._append_keywords(rows, keywords)  # before the rows count as live (a compaction skips them)
        self.sub_id[rows] = ids
        self.worker[rows] = owners
        self.x[rows] = np.asarray(x, dtype=np.float64)
        self.y[rows] = np.asarray(y, dtype=np.float64)
        self._map.insert(ids, rows, self.sub_id)
        self._post(rows, np.asarray(radius2, dtype=np.float64))

    def forget(self, sub_ids: npt.ArrayLike) -> int:
        """Remove subscriptions from the summary (ids not in it are ignored); how many were."""
        ids = np.asarray(sub_ids, dtype=np.int64)
        if ids.shape[0] == 0 or len(self._map) == 0:
            return 0
        rows = self._map.pop(ids, self.sub_id)
        rows = rows[rows >= 0]
        if rows.shape[0]:
            self.counts.add(self._keys(rows), -1)
            self.sub_id[rows] = -1
            self.kw_len[rows] = 0
            self._free.extend(rows.tolist())
        return int(rows.shape[0])

    def shrink(self, sub_ids: npt.ArrayLike, radius2: npt.ArrayLike) -> int:
        """Post again the balls of subscriptions whose reported squared radius changes their
        posting (ids not in the summary are ignored); how many were posted again."""
        ids = np.asarray(sub_ids, dtype=np.int64)
        if ids.shape[0] == 0 or len(self._map) == 0:
            return 0
        rows = self._map.rows_of(ids, self.sub_id)
        found = rows >= 0
        rows, r2 = rows[found], np.asarray(radius2, dtype=np.float64)[found]
        if rows.shape[0] == 0:
            return 0
        level, window, r = self._placement(self.x[rows], self.y[rows], r2)
        moved = (level != self.level[rows]) | np.any(window != self.window[rows], axis=1)
        if not moved.any():
            return 0
        rows, level, window, r = rows[moved], level[moved], window[moved], r[moved]
        self.counts.add(self._keys(rows), -1)
        self.level[rows], self.window[rows], self.r[rows] = level, window, r
        self.counts.add(self._keys(rows), +1)
        return int(rows.shape[0])

    def _take_rows(self, n: int) -> Int64Array:
        k = min(n, len(self._free))
        taken = [self._free.pop() for _ in range(k)]
        fresh = np.arange(self._n, self._n + n - k, dtype=np.int64)
        self._n += n - k
        if self._n > self.sub_id.shape[0]:
            cap = max(self._n, self.sub_id.shape[0] + self.sub_id.shape[0] // 2)
            for name in ("sub_id", "worker", "x", "y", "r", "level", "kw_start", "kw_len"):
                old = getattr(self, name)
                new = np.full(cap, -1, dtype=old.dtype) if name == "sub_id" else np.zeros(cap, dtype=old.dtype)
                new[: old.shape[0]] = old
                setattr(self, name, new)
            window = np.zeros((cap, 4), dtype=np.int64)
            window[: self.window.shape[0]] = self.window
            self.window = window
        return np.concatenate([np.asarray(taken, dtype=np.int64), fresh])

    def _append_keywords(self, rows: Int64Array, kws: KeywordSets) -> None:
        n = int(kws.ids.shape[0])
        if self._pool_used + n > self._pool.shape[0]:
            live = np.flatnonzero(self.sub_id[: self._n] >= 0)
            kept = self._keywords(live)
            size = max(2 * (kept.ids.shape[0] + n), 64)
            pool = np.zeros(size, dtype=np.int32)
            pool[: kept.ids.shape[0]] = kept.ids
            self.kw_start[live] = kept.ptr[:-1]
            self._pool, self._pool_used = pool, int(kept.ids.shape[0])
        self._pool[self._pool_used: self._pool_used + n] = kws.ids
        self.kw_start[rows] = self._pool_used + np.asarray(kws.ptr[:-1], dtype=np.int64) - int(kws.ptr[0])
        self.kw_len[rows] = np.diff(kws.ptr).astype(np.int32)
        self._pool_used += n

    def _keywords(self, rows: Int64Array) -> KeywordSets:
        lengths = self.kw_len[rows].astype(np.int64)
        ptr = np.zeros(rows.shape[0] + 1, dtype=np.int64)
        np.cumsum(lengths, out=ptr[1:])
        offsets = np.arange(ptr[-1], dtype=np.int64) - np.repeat(ptr[:-1], lengths)
        return KeywordSets(ptr, self._pool[np.repeat(self.kw_start[rows], lengths) + offsets])

    # ------------------------------------------------------------------ postings
    def _cell(self, q: Float64Array, level: Int64Array) -> Int64Array:
        """The cell at ``level`` of the fraction ``q`` of the extent, clamped into the grid."""
        g = np.ldexp(1.0, level)
        return np.clip(np.floor(q * g), 0, g - 1).astype(np.int64)

    def _placement(self, x: Float64Array, y: Float64Array,
                   r2: Float64Array) -> tuple[npt.NDArray[np.int8], Int64Array, Float64Array]:
        """The level, cell window ``(a0, a1, b0, b1)`` and safe radius of balls (module doc)."""
        r = safe_radius(r2, x, y)
        n = x.shape[0]
        level = np.zeros(n, dtype=np.int64)
        window = np.zeros((n, 4), dtype=np.int64)
        finite = np.flatnonzero(np.isfinite(r))
        if finite.shape[0]:
            xf, yf, rf = x[finite], y[finite], r[finite]
            with np.errstate(divide="ignore", over="ignore"):
                fit = np.floor(np.log2((self.cells - 1) * min(self.w, self.h) / (2 * rf)))
            lv = np.clip(np.nan_to_num(fit, posinf=self.levels, neginf=0), 0, self.levels).astype(np.int64)
            qx0, qx1 = (xf - rf - self.x0) / self.w, (xf + rf - self.x0) / self.w
            qy0, qy1 = (yf - rf - self.y0) / self.h, (yf + rf - self.y0) / self.h
            while True:  # one pass nearly always: the estimate is exact but for rounding and W != H
                a0, a1, b0, b1 = self._cell(qx0, lv), self._cell(qx1, lv), self._cell(qy0, lv), self._cell(qy1, lv)
                wide = ((a1 - a0) >= self.cells) | ((b1 - b0) >= self.cells)
                if not wide.any():
                    break
                lv[wide] -= 1
            level[finite] = lv
            window[finite] = np.stack([a0, a1, b0, b1], axis=1)
        return level.astype(np.int8), window, r

    def _post(self, rows: Int64Array, radius2: Float64Array) -> None:
        level, window, r = self._placement(self.x[rows], self.y[rows], radius2)
        self.level[rows], self.window[rows], self.r[rows] = level, window, r
        self.counts.add(self._keys(rows), +1)

    def _keys(self, rows: Int64Array) -> Int64Array:
        """The summary's keys of the balls of ``rows`` as posted: one per keyword and cell of
        the window that the circle reaches."""
        level = self.level[rows].astype(np.int64)
        a0, a1, b0, b1 = (self.window[rows, i] for i in range(4))
        wx, wy = a1 - a0 + 1, b1 - b0 + 1
        owner, pos = _expand(np.zeros(rows.shape[0], dtype=np.int64), wx * wy)
        cx = a0[owner] + pos % wx[owner]
        cy = b0[owner] + pos // wx[owner]
        lv = level[owner]
        # Skip cells the circle misses (their nearest point is beyond the radius, with a margin).
        r = self.r[rows][owner]
        fin = np.isfinite(r)
        if fin.any():
            g = np.ldexp(1.0, lv[fin])
            xs, ys = self.x[rows][owner[fin]], self.y[rows][owner[fin]]
            xlo, xhi = self.x0 + cx[fin] / g * self.w, self.x0 + (cx[fin] + 1) / g * self.w
            ylo, yhi = self.y0 + cy[fin] / g * self.h, self.y0 + (cy[fin] + 1) / g * self.h
            # Clamped edge cells reach beyond the space.
            edge_x = (cx[fin] == 0) | (cx[fin] == g - 1)
            edge_y = (cy[fin] == 0) | (cy[fin] == g - 1)
            dx = np.where(edge_x, 0.0, np.maximum(np.maximum(xlo - xs, xs - xhi), 0.0))
            dy = np.where(edge_y, 0.0, np.maximum(np.maximum(ylo - ys, ys - yhi), 0.0))
            reach = r[fin] + self._margin
            keep = np.ones(owner.shape[0], dtype=bool)
            keep[np.flatnonzero(fin)] = dx * dx + dy * dy <= reach * reach
            owner, cx, cy, lv = owner[keep], cx[keep], cy[keep], lv[keep]
        cell = self._offsets[lv] + (cy << lv) + cx
        # Cross every kept cell of a row with the row's keywords.
        kw_len = self.kw_len[rows].astype(np.int64)
        n_per = kw_len[owner]
        entry, j = _expand(np.zeros(owner.shape[0], dtype=np.int64), n_per)
        row_of = owner[entry]
        kw = self._pool[self.kw_start[rows][row_of] + j].astype(np.int64)
        return self._key(kw, cell[entry], self.worker[rows][row_of].astype(np.int64))

    def _key(self, kw: Int64Array, cell: Int64Array, worker: Int64Array | int) -> Int64Array:
        # Keyword ids beyond the key's bits fold onto others: two keywords then share postings,
        # which only sends more objects.
        folded = kw & ((1 << self._kbits) - 1)
        return (((folded << self._cbits) | cell) << self._wbits) | worker

    # ------------------------------------------------------------------ routing
    def route(self, objects: Objects, new: NewBalls | None = None) -> BoolArray:
        """Which workers each object goes to: a boolean ``[objects, m]`` matrix. ``new``: the
        round's registrations not yet in the summary (:class:`NewBalls`)."""
        n = len(objects)
        out = np.zeros((n, self.m), dtype=bool)
        if n == 0:
            return out
        owner = objects.keywords.owners()
        kw = objects.keywords.ids.astype(np.int64)
        if kw.shape[0] and (self.counts.keys.shape[0] or self.counts.side_keys.shape[0]):
            # The finest level's cells; a coarser level's is a shift of them (floor(q·2^L) >>
            # (L - l) = floor(q·2^l), clamped alike), the cells the balls were posted with.
            top = np.full(n, self.levels, dtype=np.int64)
            cx, cy = self._cell((objects.x - self.x0) / self.w, top), self._cell((objects.y - self.y0) / self.h, top)
            prefixes = np.concatenate([
                self._key(kw, (self._offsets[lv] + ((cy >> (self.levels - lv)) << lv)
                               + (cx >> (self.levels - lv)))[owner], 0) >> self._wbits
                for lv in range(self.levels + 1)])
            owners = np.tile(owner, self.levels + 1)
            maybe = np.flatnonzero(self.counts.maybe(prefixes))
            # Distinct probes next: the objects of a round share their coarse cells.
            uniq, inverse = _unique_inverse(prefixes[maybe])
            which, workers = self.counts.lookup(uniq)
            if which.shape[0]:
                hits = np.zeros((uniq.shape[0], self.m), dtype=bool)
                hits[which, workers] = True
                probe, worker = np.nonzero(hits[inverse])
                out[owners[maybe[probe]], worker] = True
        if new is not None and new.t.shape[0]:
            self._route_new(objects, owner, kw, new, out)
        return out

    def _route_new(self, objects: Objects, owner: Int64Array, kw: Int64Array, new: NewBalls,
                   out: BoolArray) -> None:
        """Each object to the workers of the round's registrations that share one of its
        keywords and were registered at or before its time (each ``(keyword, worker)`` counted
        from its earliest registration)."""
        nkw = new.keywords.ids.astype(np.int64)
        nrow = new.keywords.owners()
        if nkw.shape[0] == 0:
            return
        nw = np.asarray(new.workers, dtype=np.int64)[nrow]
        nt = np.asarray(new.t, dtype=np.int64)[nrow]
        order = np.lexsort((nt, nw, nkw))
        nkw, nw, nt = nkw[order], nw[order], nt[order]
        first = np.concatenate([[True], (nkw[1:] != nkw[:-1]) | (nw[1:] != nw[:-1])])
        nkw, nw, nt = nkw[first], nw[first], nt[first]
        lo = np.searchsorted(nkw, kw, "left")
        hi = np.searchsorted(nkw, kw, "right")
        pair, pos = _expand(lo, hi)
        o = owner[pair]
        reach = nt[pos] <= objects.t[o]
        out[o[reach], nw[pos[reach]]] = True


def needed_objects(objects: Objects, workers: list[tuple[Int64Array, Float64Array, Float64Array, KeywordSets,
                                                        Float64Array, Int64Array]]) -> BoolArray:
    """The objects each worker needs, by brute force (the reference of the tests and of the
    minimum the routing is measured against): a boolean ``[objects, m]`` matrix.

    ``workers[w]`` is ``(sub ids, x, y, keywords, kth d², kth object id)`` of worker ``w``'s
    subscriptions live at the objects' times; object ``o`` is needed by ``w`` when one of them
    shares a keyword with it and ``(d², o.id)`` is below its k-th result's (docs/design.md §1:
    it would enter the result; an empty or short result has ``(inf, -1)``)."""
    from dkmsks.core.knn_state import enters

    out = np.zeros((len(objects), len(workers)), dtype=bool)
    o_kw, o_row = objects.keywords.ids.astype(np.int64), objects.keywords.owners()
    for w, (_, x, y, keywords, kd2, kid) in enumerate(workers):
        # Every (object, subscription) pair sharing a keyword, through the subscriptions'
        # keyword postings; a pair sharing two keywords is tested twice, which changes nothing.
        s_kw, s_row = keywords.ids.astype(np.int64), keywords.owners()
        order = np.argsort(s_kw, kind="stable")
        s_kw, s_row = s_kw[order], s_row[order]
        pair, pos = _expand(np.searchsorted(s_kw, o_kw, "left"), np.searchsorted(s_kw, o_kw, "right"))
        obj, sub = o_row[pair], s_row[pos]
        dx, dy = objects.x[obj] - x[sub], objects.y[obj] - y[sub]
        accept = enters(dx * dx + dy * dy, objects.ids[obj], kd2[sub], kid[sub])
        out[obj[accept], w] = True
    return out
