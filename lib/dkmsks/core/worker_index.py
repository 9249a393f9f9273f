"""Worker indexes: candidate (object, subscription) pairs for a batch of new objects.

One kind per partitioning method (docs/design.md §2, paper §3.1, §3.2, §4.3; docs/design.md §2.5):

- :class:`KopIndex` — one inverted file keyword → subscription rows (paper §3.1, "kNN update");
- :class:`SopIndex` — per region subset its rectangle ``R`` and an inverted file; an object
  probes only the subsets whose ``R`` contains it (paper §3.2);
- :class:`Ps2Index` — PS²Stream: SOP's layout with one part per home leaf and one overflow
  part for new subscriptions (docs/design.md §2.5);
- :class:`GridIndex` — DkM-SKS: a ``G × G`` grid over the data space, per cell an inverted file
  of every subscription whose ball overlaps the cell (paper §4.3), with coarser levels for
  large balls.

All of them are flat numpy structures built on :class:`~dkmsks.core.postings.Postings`
(entries sorted by key, answered with ``searchsorted``) plus a small unsorted *delta* for
recent insertions, merged into the sorted part when it grows. None is ever allowed to *under*-approximate a ball; they
may over-approximate it (docs/design.md §3 fact 1), which is what makes every maintenance step lazy:

- deleting a subscription only bumps its row's *epoch*: entries carrying an older epoch are
  dropped at lookup time and physically removed at the next merge;
- a ball that shrank leaves the subscription in too many or too coarse cells (grid) or a
  too-large ``R`` (SOP); the grid re-indexes a row only once its radius has halved, SOP
  recomputes its rectangles after each batch.

Points outside the data space (docs/design.md §1) are not clamped into its boundary cells: the grid
keeps a second, hashed lattice for them (see :class:`GridIndex`), so a region the stream reaches
only later (e.g. Alaska when ``O_init`` held none of it) is not collapsed into one corner cell
whose inverted file then holds every subscription there. Every radius used for indexing is
inflated by a few ulps so that float rounding can never push an in-ball object out of an
indexed cell.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol

import numpy as np
import numpy.typing as npt

from dkmsks.core import kernel
from dkmsks.core.config import DEFAULTS
from dkmsks.core.kernel import kernel_name
from dkmsks.core.knn_state import GROWTH, KnnState
from dkmsks.core.model import Float64Array, Int64Array, Objects, Rect
from dkmsks.core.postings import DEFAULT_BUDGET, Postings, expand_ranges

#: Default ``G`` of the DkM-SKS grid (declared with the other tuning parameters) and most
#: cells per ball per level. A fine grid matters on real data: a coarse one puts a whole city
#: in one cell, so every ball there meets every object of the city (docs/benchmarks.md).
DEFAULT_GRID = DEFAULTS.grid
DEFAULT_MAX_CELLS = 25
#: The pyramid's layout (GridIndex): every third level from the top, and up to 64 cells a ball
#: at the levels of at most 64 cells a side (docs/design.md §2.3, measured in docs/benchmarks.md).
DEFAULT_LEVEL_STEP = 3
DEFAULT_WIDE_CELLS = 64
DEFAULT_WIDE_SIDE = 64

#: A posting key is ``(prefix << 32) | keyword`` (prefix: subset or pyramid cell).
_KW_BITS = 32

#: Grid lattice coordinates are clamped to ``[-_LATTICE_LIMIT, _LATTICE_LIMIT]`` (far beyond any
#: real coordinate; keeps ``cell << level`` inside int64).
_LATTICE_LIMIT = 1 << 40
#: Coarsest level of the lattice outside the data space (2^41 fine cells per cell).
_OUTSIDE_TOP = 41


def safe_radius(r2: Float64Array, x: Float64Array, y: Float64Array) -> Float64Array:
    """A radius ``>=`` the true one with a margin for float rounding (``inf`` stays ``inf``).

    An object with ``d² <= r²`` (computed as ``dx*dx + dy*dy``) satisfies ``|dx| <= sqrt(r²)``
    up to a relative error of a few ulps of ``r`` and of the coordinates; the margin covers
    that with many orders of magnitude to spare, so bounding boxes never under-approximate.
    """
    r = np.sqrt(r2)
    return r * (1.0 + 1e-9) + 1e-9 * (np.abs(x) + np.abs(y)) + 1e-300


def safe_ball_boxes(
    state: KnnState, rows: Int64Array
) -> tuple[Float64Array, Float64Array, Float64Array, Float64Array, Float64Array]:
    """Safe bounding boxes ``(xmin, ymin, xmax, ymax, r)`` of the balls of ``rows``.

    Not the partitioners' ``ball_boxes`` (``core/partition/_common.py``): those feed cost
    estimates and are clipped to the data space with a one-ulp margin, where an error moves a
    cost a little. These decide which cells hold a subscription, so they may only err outwards
    (docs/design.md §3 fact 1): the radius gets a relative and an absolute margin
    (:func:`safe_radius`) and the boxes are not clipped to a data space.
    """
    x, y = state.x[rows], state.y[rows]
    r = safe_radius(state.radius2(rows), x, y)
    return x - r, y - r, x + r, y + r, r


def _object_keyword_pairs(objects: Objects, obj_idx: Int64Array | None = None) -> tuple[Int64Array, Int64Array]:
    """``(object index, keyword)`` for every keyword of every object (or of ``obj_idx``)."""
    if obj_idx is None:
        return objects.keywords.owners(), objects.keywords.ids.astype(np.int64)
    kws = objects.keywords.take(obj_idx)
    return obj_idx[kws.owners()], kws.ids.astype(np.int64)


class WorkerIndex(Protocol):
    """What :class:`dkmsks.core.update.Worker` needs from an index."""

    kind: str

    def add(self, state: KnnState, rows: Int64Array, groups: Int64Array | None = None) -> None:
        """Index the subscriptions of state ``rows`` (``groups``: their SOP subsets, if any)."""

    def forget(self, rows: Int64Array) -> None:
        """Drop the subscriptions of state ``rows`` from the index."""

    #: Whether :meth:`probe` depends on the objects and the index's parameters only (not on the
    #: subscriptions it holds), so that workers built alike can share one probe.
    shared_probe: bool

    def candidates(
        self, state: KnnState, objects: Objects, budget: int = DEFAULT_BUDGET,
        probe: tuple[Int64Array, Int64Array] | None = None,
    ) -> Iterator[tuple[Int64Array, Int64Array]]:
        """The candidate ``(object, row)`` pairs of ``objects``, in slices of about ``budget`` pairs."""

    def entries(self, state: KnnState, rows: Int64Array) -> tuple[Int64Array, Int64Array]:
        """The index keys of state ``rows`` and the row of each."""

    def probe(self, objects: Objects) -> tuple[Int64Array, Int64Array]:
        """The probe keys of ``objects`` and the object of each."""

    def sorted_probe(self, objects: Objects) -> kernel.SortedProbe:
        """:meth:`probe` in the sorted form workers built alike share (:class:`kernel.SortedProbe`)."""

    def lookup_accept(
        self, state: KnnState, objects: Objects, probe: kernel.Probe | None = None
    ) -> tuple[Int64Array, Int64Array, Float64Array, Int64Array, Int64Array]:
        """Candidates and their exact test in one compiled pass (:mod:`dkmsks.core.kernel`)."""

    def updated(self, state: KnnState, rows: Int64Array) -> None:
        """Note that the results (balls) of state ``rows`` changed."""

    def maintain(self, state: KnnState, force: bool = False) -> None:
        """Housekeeping between timestamps (merges, refreshes); ``force`` does it all now."""

    def size(self) -> dict[str, int]:
        """The index's sizes, by part."""

    def radius_bound(self) -> Float64Array:
        """Per state row, a radius no smaller than its live entries' ball, or an empty array."""


class _PostingsIndex:
    """Shared plumbing: per-row epochs and entry counts, merge policy, lookups.

    Every kind is defined by two pure key functions, which also let a caller keep the
    postings elsewhere (e.g. a table keyed by ``key``) and join on them:

    - ``entries(state, rows) -> (keys, rows)``: the postings of subscriptions;
    - ``probe(objects) -> (keys, object index)``: the keys a batch of objects looks up.

    An (object, subscription) pair is a candidate iff they share a key.
    """

    kind = "base"
    shared_probe = True  # SOP and PS²Stream probe their own subsets' rectangles

    def __init__(self, *, merge_fraction: float = 0.125, merge_min: int = 1 << 16, kernel: str | None = None) -> None:
        #: ``numba`` or ``numpy``: how postings of new balls are computed (:mod:`dkmsks.core.kernel`).
        self.kernel = kernel_name(kernel)
        self.postings = Postings(self.kernel)
        self.epoch = np.zeros(16, dtype=np.int32)
        self.row_entries = np.zeros(16, dtype=np.int32)  # live entries per row
        self.merge_fraction = merge_fraction
        self.merge_min = merge_min

    def entries(self, state: KnnState, rows: Int64Array) -> tuple[Int64Array, Int64Array]:
        """The postings ``(keys, rows)`` of state ``rows``; each kind defines its own."""
        raise NotImplementedError

    def probe(self, objects: Objects) -> tuple[Int64Array, Int64Array]:
        """The keys ``objects`` look up and the object index of each; each kind defines its own."""
        raise NotImplementedError

    def sorted_probe(self, objects: Objects) -> kernel.SortedProbe:
        """:meth:`probe` in the sorted form workers built alike share (:class:`kernel.SortedProbe`)."""
        return kernel.SortedProbe.of(*self.probe(objects))

    def _ensure(self, n: int) -> None:
        if n <= self.epoch.shape[0]:
            return
        # Grown like the state's rows (KnnState.GROWTH), not doubled: per-row arrays scale with |S|.
        cap = max(n, self.epoch.shape[0] + max(int(self.epoch.shape[0] * GROWTH), 16))
        self.epoch = np.concatenate([self.epoch, np.zeros(cap - self.epoch.shape[0], np.int32)])
        self.row_entries = np.concatenate([self.row_entries, np.zeros(cap - self.row_entries.shape[0], np.int32)])

    def _insert(self, keys: Int64Array, rows: Int64Array) -> None:
        self.postings.insert(keys, rows, self.epoch[rows])
        if rows.shape[0] > 4096:  # a bulk load: one bincount beats a scattered add
            counts = np.bincount(rows, minlength=self.row_entries.shape[0])
            self.row_entries += counts[: self.row_entries.shape[0]].astype(np.int32)
        else:
            np.add.at(self.row_entries, rows, 1)

    def _invalidate(self, rows: Int64Array) -> None:
        # Bumping the epoch turns every existing entry of these rows into a stale entry.
        self.epoch[rows] += 1
        self.postings.n_stale += int(self.row_entries[rows].sum())
        self.row_entries[rows] = 0

    def forget(self, rows: Int64Array) -> None:
        """Rows freed by the state (distinct): their entries become stale (removed at the next merge)."""
        rows = np.asarray(rows, dtype=np.int64)
        if self.kernel == "numba":
            stale = kernel.invalidate_rows(rows, self.epoch, self.row_entries)
            if stale >= 0:
                self.postings.n_stale += stale
                return
        self._ensure(int(rows.max()) + 1 if rows.shape[0] else 0)
        self._invalidate(rows)

    def radius_bound(self) -> Float64Array:
        """Per row, a radius no smaller than the ball its live entries were posted for (balls
        only shrink), which the compiled lookup tests first; empty where the index keeps none."""
        return kernel.NO_BOUND

    def maintain(self, state: KnnState, force: bool = False) -> None:
        """Merge the delta / purge stale entries once they are a sizeable fraction."""
        p = self.postings
        limit = max(self.merge_min, int(self.merge_fraction * p.n_main))
        if force or p.n_delta > limit or p.n_stale > max(self.merge_min, len(p) // 2):
            self._ensure(state.n_rows)
            p.rebuild(self.epoch)

    def size(self) -> dict[str, int]:
        p = self.postings
        return {"entries": len(p), "delta": p.n_delta, "stale": p.n_stale}

    def updated(self, state: KnnState, rows: Int64Array) -> None:  # noqa: ARG002 - no-op
        return None

    def candidates(
        self, state: KnnState, objects: Objects, budget: int = DEFAULT_BUDGET,
        probe: tuple[Int64Array, Int64Array] | None = None,
    ) -> Iterator[tuple[Int64Array, Int64Array]]:
        """Candidate ``(object index, row)`` pairs in chunks of about ``budget`` pairs
        (``probe``: :meth:`probe` of ``objects``, computed once for several workers)."""
        self._ensure(state.n_rows)
        for keys, owner in self._slices(objects, probe):
            yield from self.postings.pairs(keys, owner, self.epoch, budget)

    def _slices(
        self, objects: Objects, probe: tuple[Int64Array, Int64Array] | None
    ) -> Iterator[tuple[Int64Array, Int64Array]]:
        return iter([probe]) if probe is not None else self.probe_slices(objects)

    def probe_slices(self, objects: Objects) -> Iterator[tuple[Int64Array, Int64Array]]:
        """:meth:`probe` in slices that bound memory (one slice unless a kind needs more);
        what the compiled kernel (:mod:`dkmsks.core.kernel`) looks up."""
        yield self.probe(objects)

    def lookup_accept(
        self, state: KnnState, objects: Objects, probe: kernel.Probe | None = None
    ) -> tuple[Int64Array, Int64Array, Float64Array, Int64Array, Int64Array]:
        """:meth:`candidates` and the exact test in one compiled pass (:func:`kernel.lookup_accept`):
        the accepted ``(row, object id, d², object t)`` and the live entries met per object.
        ``probe``: :meth:`probe` of ``objects``, or its :class:`~dkmsks.core.kernel.SortedProbe`,
        computed once for several workers."""
        self._ensure(state.n_rows)
        bound = self.radius_bound()
        if isinstance(probe, kernel.SortedProbe):
            return kernel.lookup_accept_sorted(probe, self.postings, self.epoch, state, objects, bound)
        parts = [kernel.lookup_accept(keys, owner, self.postings, self.epoch, state, objects, bound)
                 for keys, owner in self._slices(objects, probe)]
        if len(parts) == 1:
            return parts[0]
        if not parts:
            z = np.zeros(0, dtype=np.int64)
            return z, z, np.zeros(0), z, np.zeros(len(objects), dtype=np.int64)
        return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
                np.concatenate([p[2] for p in parts]), np.concatenate([p[3] for p in parts]),
                np.sum([p[4] for p in parts], axis=0))


class KopIndex(_PostingsIndex):
    """KOP worker index: one inverted file ``keyword → rows`` (paper §3.1, kNN update)."""

    kind = "kop"

    def entries(self, state: KnnState, rows: Int64Array) -> tuple[Int64Array, Int64Array]:
        """Key = keyword."""
        rows = np.asarray(rows, dtype=np.int64)
        kws = state.keywords_of(rows)
        return kws.ids.astype(np.int64), rows[kws.owners()]

    def probe(self, objects: Objects) -> tuple[Int64Array, Int64Array]:
        """The probe keys (keyword ids) of ``objects`` and the object of each."""
        owner, kw = _object_keyword_pairs(objects)
        return kw, owner

    def add(self, state: KnnState, rows: Int64Array, groups: Int64Array | None = None) -> None:
        """Index the subscriptions of state ``rows``."""
        self._ensure(state.n_rows)
        self._insert(*self.entries(state, rows))


class SopIndex(_PostingsIndex):
    """SOP worker index: per region subset its ``R`` and an inverted file (paper §3.2).

    ``R`` of a subset is the MBR of its members' balls (docs/design.md §1). It is *not* clipped to the
    data space here: the index must also find objects outside the data space that fall in a
    ball (clipping matters only for the cost model). A new subscription's ball is infinite, so
    its subset's ``R`` becomes the whole plane until :meth:`maintain` recomputes it from the
    current balls.

    Parameters
    ----------
    refresh_every
        Recompute the rectangles of subsets with changed members every this many
        :meth:`maintain` calls (1 = after every batch).
    """

    kind = "sop"
    shared_probe = False  # an object probes the subsets whose R (this worker's balls) holds it

    def __init__(self, *, refresh_every: int = 1, **kw: float) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.group = np.full(16, -1, dtype=np.int64)  # local subset of each row
        self.labels: list[int] = []  # plan's subset id of each local subset
        self._label_of: dict[int, int] = {}
        self.rect = np.zeros((0, 4), dtype=np.float64)  # xmin, ymin, xmax, ymax per subset
        self._dirty = np.zeros(0, dtype=bool)
        self.refresh_every = max(int(refresh_every), 1)
        self._calls = 0

    def _ensure(self, n: int) -> None:
        super()._ensure(n)
        if self.group.shape[0] < self.epoch.shape[0]:
            self.group = np.concatenate(
                [self.group, np.full(self.epoch.shape[0] - self.group.shape[0], -1, np.int64)]
            )

    def _local(self, label: int) -> int:
        g = self._label_of.get(label)
        if g is None:
            g = len(self.labels)
            self._label_of[label] = g
            self.labels.append(label)
            self.rect = np.vstack([self.rect, [np.inf, np.inf, -np.inf, -np.inf]])
            self._dirty = np.append(self._dirty, False)
        return g

    def _choose(self, state: KnnState, rows: Int64Array) -> Int64Array:
        """Subset for new subscriptions: the smallest ``R`` holding the location, else the
        nearest ``R`` (any choice is exact; this one keeps rectangles tight)."""
        if not self.labels:
            self._local(-1)
        x, y = state.x[rows][:, None], state.y[rows][:, None]
        r = self.rect
        inside = (r[:, 0] <= x) & (x <= r[:, 2]) & (r[:, 1] <= y) & (y <= r[:, 3])
        with np.errstate(invalid="ignore"):
            area = (r[:, 2] - r[:, 0]) * (r[:, 3] - r[:, 1])
        area = np.where(np.isfinite(area), area, np.inf)
        dx = np.maximum(np.maximum(r[:, 0] - x, 0.0), x - r[:, 2])
        dy = np.maximum(np.maximum(r[:, 1] - y, 0.0), y - r[:, 3])
        dist = np.where(np.isfinite(dx * dx + dy * dy), dx * dx + dy * dy, np.inf)
        # Containing subsets first (smaller area preferred: score in [-1, 0]), then distance.
        score = np.where(inside, np.where(np.isfinite(area), -1.0 / (1.0 + area), -0.0), dist + 1.0)
        return np.argmin(score, axis=1).astype(np.int64)

    def add(self, state: KnnState, rows: Int64Array, groups: Int64Array | None = None) -> None:
        """Index ``rows``; ``groups`` are the plan's subset ids (``None``: choose locally)."""
        rows = np.asarray(rows, dtype=np.int64)
        self._ensure(state.n_rows)
        if rows.shape[0] == 0:
            return
        if groups is None:
            local = self._choose(state, rows)
        else:
            local = np.fromiter((self._local(int(g)) for g in np.asarray(groups).tolist()), np.int64, rows.shape[0])
        self.group[rows] = local
        self._insert(*self.entries(state, rows))
        # Grow each R to cover the new balls at once (correctness); shrink later (lazily).
        x0, y0, x1, y1, _ = safe_ball_boxes(state, rows)
        np.minimum.at(self.rect[:, 0], local, x0)
        np.minimum.at(self.rect[:, 1], local, y0)
        np.maximum.at(self.rect[:, 2], local, x1)
        np.maximum.at(self.rect[:, 3], local, y1)

    def forget(self, rows: Int64Array) -> None:
        """Drop state ``rows`` and mark their groups for a rectangle refresh."""
        super().forget(rows)
        rows = np.asarray(rows, dtype=np.int64)
        g = self.group[rows]
        self._dirty[g[g >= 0]] = True
        self.group[rows] = -1

    def updated(self, state: KnnState, rows: Int64Array) -> None:
        """Mark the groups of state ``rows`` for a rectangle refresh."""
        g = self.group[np.asarray(rows, dtype=np.int64)]
        self._dirty[g[g >= 0]] = True

    def refresh_rects(self, state: KnnState) -> None:
        """Recompute ``R`` of every dirty subset as the MBR of its members' current balls."""
        if not self._dirty.any():
            return
        n = state.n_rows
        rows = np.flatnonzero(state.in_use[:n] & (self.group[:n] >= 0))
        rows = rows[self._dirty[self.group[rows]]]
        dirty = np.flatnonzero(self._dirty)
        self.rect[dirty] = [np.inf, np.inf, -np.inf, -np.inf]
        g = self.group[rows]
        x0, y0, x1, y1, _ = safe_ball_boxes(state, rows)
        np.minimum.at(self.rect[:, 0], g, x0)
        np.minimum.at(self.rect[:, 1], g, y0)
        np.maximum.at(self.rect[:, 2], g, x1)
        np.maximum.at(self.rect[:, 3], g, y1)
        self._dirty[:] = False

    def maintain(self, state: KnnState, force: bool = False) -> None:
        """The postings' housekeeping, and a refresh of the group rectangles every ``refresh_every`` calls."""
        super().maintain(state, force)
        self._calls += 1
        if force or self._calls % self.refresh_every == 0:
            self.refresh_rects(state)

    def entries(self, state: KnnState, rows: Int64Array) -> tuple[Int64Array, Int64Array]:
        """Key = (local subset, keyword); rows must already belong to a subset."""
        rows = np.asarray(rows, dtype=np.int64)
        kws = state.keywords_of(rows)
        owners = kws.owners()
        return (self.group[rows][owners] << _KW_BITS) | kws.ids.astype(np.int64), rows[owners]

    def probe(self, objects: Objects) -> tuple[Int64Array, Int64Array]:
        """Keys of the subsets whose current ``R`` holds each object."""
        parts = list(self.probe_slices(objects))
        if not parts:
            z = np.zeros(0, dtype=np.int64)
            return z, z
        return np.concatenate([k for k, _ in parts]), np.concatenate([o for _, o in parts])

    def probe_slices(self, objects: Objects) -> Iterator[tuple[Int64Array, Int64Array]]:
        """:meth:`probe` in slices of objects (the containment matrix is objects × subsets)."""
        n_groups = len(self.labels)
        if n_groups == 0 or len(objects) == 0:
            return
        r = self.rect
        step = max(1, (1 << 20) // n_groups)  # objects per containment-matrix slice
        for a in range(0, len(objects), step):
            ox = objects.x[a : a + step, None]
            oy = objects.y[a : a + step, None]
            inside = (r[:, 0] <= ox) & (ox <= r[:, 2]) & (r[:, 1] <= oy) & (oy <= r[:, 3])
            oi, gi = np.nonzero(inside)
            if oi.shape[0] == 0:
                continue
            oi = oi.astype(np.int64) + a
            # (object, subset) pairs x object keywords -> (subset, keyword) keys.
            lengths = objects.keywords.lengths()[oi]
            owner = np.repeat(np.arange(oi.shape[0], dtype=np.int64), lengths)
            offs = np.arange(owner.shape[0], dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
            kw = objects.keywords.ids[objects.keywords.ptr[oi][owner] + offs].astype(np.int64)
            keys = (gi.astype(np.int64)[owner] << _KW_BITS) | kw
            yield keys, oi[owner]


class Ps2Index(SopIndex):
    """PS²Stream worker index (docs/design.md §2.5): SOP's layout over the subscriptions' balls.

    Initial subscriptions are grouped by their home leaf (the plan's ``subset``, passed as
    ``groups``); every subscription added without a group — all new ones (§3.6), and initial
    ones restored without their leaf — goes to one overflow part, label :attr:`OVERFLOW`.
    Each part has an inverted file and ``R``, the MBR of its members' current balls, which is
    *not* the leaf's cell: balls reach past cells. As in :class:`SopIndex`, ``R`` grows at
    once when a ball is added and shrinks lazily, and is not clipped to the data space so that
    objects outside it still find the balls that reach them (docs/design.md §3 fact 1).
    """

    kind = "ps2"

    #: Label of the overflow part (plan subset ids are ``>= 0``).
    OVERFLOW = -1

    def _choose(self, state: KnnState, rows: Int64Array) -> Int64Array:
        return np.full(rows.shape[0], self._local(self.OVERFLOW), dtype=np.int64)


class GridIndex(_PostingsIndex):
    """DkM-SKS worker index: a ``G × G`` grid, per cell an inverted file (paper §4.3).

    A subscription is posted, under each of its keywords, in every cell its (safe) ball
    overlaps. To keep large balls from filling thousands of cells, the grid is the finest
    level of a pyramid: level ``l`` merges ``2^l × 2^l`` fine cells (cell index ``c >> l``), up
    to a top level with a single cell covering the whole plane. The pyramid keeps every
    ``level_step``-th level counted down from the top. A ball is posted at the finest kept
    level where it overlaps at most ``max_cells`` cells (``wide_cells`` at levels of at most
    ``wide_side`` cells a side); an object probes its cell at every kept level. A coarse cell
    is the union of the fine cells under it, so posting there is an over-approximation of
    posting in the fine cells (docs/design.md §3 fact 1). The infinite ball of a subscription
    with fewer than ``k`` results goes to the top cell ("all cells", docs/design.md §1).
    ``levels="flat"`` keeps only the finest level and the top cell (the paper's plain grid,
    with balls above ``max_cells`` cells treated as all cells).

    Outside the data space the fine lattice continues (coordinates clamped only at ±2^40) with
    its own pyramid of levels 0–41, whose cells get hashed ids ``outside_base + hash(level,
    cx, cy)`` in the id range left up to 2^32 (two outside cells sharing an id only merge
    postings: extra candidates, never a lost one; docs/design.md §3 fact 1). A ball is posted inside
    the space exactly as if the space were all there is (its part inside, at the finest level
    where that part spans at most ``max_cells`` cells), and, if it reaches outside, also in the
    outside cells it overlaps at the finest outside level where its whole range spans at most
    ``max_cells`` cells. An object inside the space probes the pyramid; an object outside
    probes the outside lattice; every object probes the top cell (the whole plane).

    After a batch, a subscription is re-indexed only when its radius fell below ``shrink``
    times the radius it was indexed with (its old entries become stale).

    Parameters
    ----------
    space
        The data space (docs/design.md §1); points outside it map to the nearest boundary cell.
    grid
        ``G``, the number of fine cells per axis.
    max_cells
        Most cells a ball may be posted in at one level.
    shrink
        Re-index threshold on the radius ratio (``0 < shrink < 1``).
    levels
        ``"pyramid"`` (default) or ``"flat"``.
    level_step
        The pyramid keeps levels ``top, top - level_step, ...`` down to level 0 or above (1:
        every level). Fewer levels mean fewer probe keys per object (nearly all of which find
        nothing) against more cells per ball at the level it lands on.
    wide_cells, wide_side
        At levels of at most ``wide_side`` cells a side, a ball may span up to ``wide_cells``
        cells: the few wide balls (new subscriptions start empty, docs/design.md §1) then cover
        their region more tightly, for few extra entries.
    """

    kind = "dkm"

    def __init__(
        self,
        space: Rect,
        grid: int = DEFAULT_GRID,
        *,
        max_cells: int = DEFAULT_MAX_CELLS,
        shrink: float = 0.5,
        levels: str = "pyramid",
        level_step: int = DEFAULT_LEVEL_STEP,
        wide_cells: int = DEFAULT_WIDE_CELLS,
        wide_side: int = DEFAULT_WIDE_SIDE,
        **kw: float,
    ) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        if grid < 1:
            raise ValueError(f"grid must be >= 1, got {grid}")
        if levels not in ("pyramid", "flat"):
            raise ValueError(f"levels must be 'pyramid' or 'flat', got {levels!r}")
        if int(level_step) < 1:
            raise ValueError(f"level_step must be >= 1, got {level_step}")
        self.space = space
        self.G = int(grid)
        self.max_cells = max(int(max_cells), 1)
        self.shrink = float(shrink)
        #: Top level: every fine cell index shifted by ``top`` is 0 (one cell, the plane).
        self.top = (self.G - 1).bit_length()
        # Cells are numbered level after level; a key is (cell << 32) | keyword, so the
        # whole pyramid (about 4/3 G² cells) must fit in 32 bits.
        sides = np.array([((self.G - 1) >> lv) + 1 for lv in range(self.top + 1)], dtype=np.int64)
        self._offset = np.concatenate([[0], np.cumsum(sides * sides)]).astype(np.int64)
        if self._offset[-1] >= 1 << (_KW_BITS - 1):
            raise ValueError(f"grid {grid} is too fine for 32-bit cell ids: grid must be at most 32768")
        #: Ids ``[outside_base, 2^32)`` are the hashed cells outside the data space.
        self.outside_base = int(self._offset[-1])
        self.level_step = int(level_step)
        self.levels = (
            sorted(range(self.top, -1, -self.level_step)) if levels == "pyramid" else sorted({0, self.top})
        )
        # The same levels as arrays, for the compiled kernels (built once, not per call).
        self.level_array = np.asarray(self.levels, dtype=np.int64)
        self.levels_below_top = self.level_array[self.level_array != self.top]
        #: Most cells a ball may span at each level below the top: ``max_cells``, or
        #: ``wide_cells`` at levels of at most ``wide_side`` cells a side.
        wide = sides[self.levels_below_top] <= int(wide_side)
        self.caps_below_top = np.where(wide, max(int(wide_cells), self.max_cells), self.max_cells).astype(np.int64)
        w = space.xmax - space.xmin
        h = space.ymax - space.ymin
        self.cw = (w if w > 0 else 1.0) / self.G
        self.ch = (h if h > 0 else 1.0) / self.G
        self.r_indexed = np.zeros(16, dtype=np.float64)
        # Slack added to cell rectangles in the circle test (covers rounding in cell lookup).
        self._mx = 1e-6 * self.cw + 1e-12 * (abs(space.xmin) + abs(space.xmax))
        self._my = 1e-6 * self.ch + 1e-12 * (abs(space.ymin) + abs(space.ymax))

    def _ensure(self, n: int) -> None:
        super()._ensure(n)
        if self.r_indexed.shape[0] < self.epoch.shape[0]:
            self.r_indexed = np.concatenate(
                [self.r_indexed, np.zeros(self.epoch.shape[0] - self.r_indexed.shape[0])]
            )

    def cell_x(self, x: Float64Array) -> Int64Array:
        """Fine lattice column of each x (``< 0`` or ``>= G`` outside the space; clamped only
        at ±2^40; monotone in x, so ranges and lookups agree)."""
        c = np.floor((x - self.space.xmin) / self.cw)
        return np.clip(c, -_LATTICE_LIMIT, _LATTICE_LIMIT).astype(np.int64)

    def cell_y(self, y: Float64Array) -> Int64Array:
        """The lattice row of each ``y`` (clipped to the lattice's range)."""
        c = np.floor((y - self.space.ymin) / self.ch)
        return np.clip(c, -_LATTICE_LIMIT, _LATTICE_LIMIT).astype(np.int64)

    def dense_ids(self, level: int | Int64Array, cx: Int64Array, cy: Int64Array) -> Int64Array:
        """Id of the pyramid cell ``(cx, cy)`` of the data space at ``level`` (coordinates
        already shifted; the top level's single cell is the whole plane)."""
        lv = np.asarray(level, dtype=np.int64)
        side = ((self.G - 1) >> lv) + 1
        top = lv == self.top
        return self._offset[lv] + np.where(top, 0, cy * side + cx)

    def outside_ids(self, level: int | Int64Array, cx: Int64Array, cy: Int64Array) -> Int64Array:
        """Id of the outside-lattice cell ``(cx, cy)`` at ``level``: a hash into
        ``[outside_base, 2^32)`` (deterministic across processes, unlike Python's ``hash``)."""
        lv = np.broadcast_to(np.asarray(level, dtype=np.int64), np.shape(cx))
        h = (np.asarray(cx).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ (
            np.asarray(cy).astype(np.uint64) * np.uint64(0xC2B2AE3D27D4EB4F)
        ) ^ ((lv.astype(np.uint64) + np.uint64(1)) * np.uint64(0x165667B19E3779F9))
        h ^= h >> np.uint64(31)
        h *= np.uint64(0xD6E8FEB86659FD93)
        h ^= h >> np.uint64(32)
        span = np.uint64((1 << _KW_BITS) - self.outside_base)
        return (np.uint64(self.outside_base) + h % span).astype(np.int64)

    def add(self, state: KnnState, rows: Int64Array, groups: Int64Array | None = None) -> None:
        """Index the subscriptions of state ``rows`` at the finest level their balls fit."""
        rows = np.asarray(rows, dtype=np.int64)
        self._ensure(state.n_rows)
        if rows.shape[0] == 0:
            return
        if self.kernel == "numba":
            self._reindex(state, rows, select=False)
            return
        keys, owners, r = self._entries(state, rows)
        self.r_indexed[rows] = r
        self._insert(keys, owners)

    def _reindex(self, state: KnnState, rows: Int64Array, *, select: bool) -> None:
        """:meth:`add` (or, with ``select``, :meth:`updated`) in one compiled call: a worker
        re-indexes a few dozen rows a timestamp, where the numpy path's few dozen small array
        calls cost more than the postings themselves (docs/benchmarks.md)."""
        keys, owners, epochs, stale = kernel.grid_reindex(self, state, rows, select=select, outside_top=_OUTSIDE_TOP,
                                                          lattice_limit=_LATTICE_LIMIT, kw_bits=_KW_BITS)
        self.postings.n_stale += int(stale)
        self.postings.insert(keys, owners, epochs)

    def radius_bound(self) -> Float64Array:
        """The safe radius each row was last posted with (``inf`` for an unbounded ball): a
        live entry's ball lies inside it, since the row is posted again whenever its radius
        falls below ``shrink`` times that one, and balls only shrink in between."""
        return self.r_indexed

    def entries(self, state: KnnState, rows: Int64Array) -> tuple[Int64Array, Int64Array]:
        """Key = (pyramid cell, keyword) for every cell the ball is posted in."""
        keys, owners, _ = self._entries(state, np.asarray(rows, dtype=np.int64))
        return keys, owners

    def _finest_level(self, cx0: Int64Array, cx1: Int64Array, cy0: Int64Array, cy1: Int64Array,
                      todo: npt.NDArray[np.bool_], levels: Iterable[int], caps: Iterable[int],
                      fallback: int) -> Int64Array:
        """First of ``levels`` where the cell range spans at most the level's cap of cells
        (``fallback`` where none does)."""
        level = np.full(cx0.shape[0], fallback, dtype=np.int64)
        todo = todo.copy()
        for lv, most in zip(levels, caps, strict=True):
            if not todo.any():
                break
            # Each side is capped before the product so that lattice-wide ranges cannot overflow.
            n_cells = (np.minimum((cx1 >> lv) - (cx0 >> lv) + 1, most + 1)
                       * np.minimum((cy1 >> lv) - (cy0 >> lv) + 1, most + 1))
            ok = todo & (n_cells <= most)
            level[ok] = lv
            todo &= ~ok
        return level

    def _entries(self, state: KnnState, rows: Int64Array) -> tuple[Int64Array, Int64Array, Float64Array]:
        """Postings of ``rows``: the part of each ball inside the data space at the finest level
        where it spans at most ``max_cells`` cells of the space (so a ball hanging over the
        edge is not pushed to a coarser level), and, for a ball reaching outside the space,
        the lattice cells outside it at the finest level where the whole ball's cell range
        spans at most ``max_cells`` cells."""
        x0, y0, x1, y1, r = safe_ball_boxes(state, rows)
        if self.kernel == "numba":
            keys, owners = kernel.grid_entries(self, state, rows, (x0, y0, x1, y1, r), outside_top=_OUTSIDE_TOP,
                                               lattice_limit=_LATTICE_LIMIT, kw_bits=_KW_BITS)
            return keys, owners, r
        finite = np.isfinite(r)
        zero = np.zeros(rows.shape[0], dtype=np.int64)
        ux0 = np.where(finite, self.cell_x(np.where(finite, x0, 0.0)), zero)
        ux1 = np.where(finite, self.cell_x(np.where(finite, x1, 0.0)), zero)
        uy0 = np.where(finite, self.cell_y(np.where(finite, y0, 0.0)), zero)
        uy1 = np.where(finite, self.cell_y(np.where(finite, y1, 0.0)), zero)
        g = self.G - 1
        cx0, cx1 = np.clip(ux0, 0, g), np.clip(ux1, 0, g)
        cy0, cy1 = np.clip(uy0, 0, g), np.clip(uy1, 0, g)
        level_in = self._finest_level(cx0, cx1, cy0, cy1, finite, self.levels_below_top.tolist(),
                                      self.caps_below_top.tolist(), self.top)
        spill = finite & (level_in < self.top) & ((ux0 < 0) | (ux1 > g) | (uy0 < 0) | (uy1 > g))
        # Outside levels run up to 2^41 fine cells per cell, where the whole clamped lattice
        # spans at most 2 x 2 cells: a level is always found.
        level_out = self._finest_level(ux0, ux1, uy0, uy1, spill, range(_OUTSIDE_TOP),
                                       [self.max_cells] * _OUTSIDE_TOP, _OUTSIDE_TOP)
        sp = np.flatnonzero(spill)
        idx = np.concatenate([np.arange(rows.shape[0], dtype=np.int64), sp])
        outside = np.concatenate([np.zeros(rows.shape[0], dtype=bool), np.ones(sp.shape[0], dtype=bool)])
        level = np.concatenate([level_in, level_out[sp]])
        bx0 = np.concatenate([cx0, ux0[sp]]) >> level
        bx1 = np.concatenate([cx1, ux1[sp]]) >> level
        by0 = np.concatenate([cy0, uy0[sp]]) >> level
        by1 = np.concatenate([cy1, uy1[sp]]) >> level
        nx, ny = bx1 - bx0 + 1, by1 - by0 + 1
        ncell = nx * ny
        part = np.repeat(np.arange(idx.shape[0], dtype=np.int64), ncell)
        off = np.arange(part.shape[0], dtype=np.int64) - np.repeat(np.cumsum(ncell) - ncell, ncell)
        own = idx[part]
        lv = level[part]
        cx = bx0[part] + off % nx[part]
        cy = by0[part] + off // nx[part]
        # The outside part skips cells holding no point outside the space (the inside part
        # covers those points).
        out = outside[part]
        if out.any():
            fully_inside = (cx >= 0) & (((cx + 1) << lv) <= self.G) & (cy >= 0) & (((cy + 1) << lv) <= self.G)
            keep = ~(out & fully_inside)
            own, lv, cx, cy, out = own[keep], lv[keep], cx[keep], cy[keep], out[keep]
        # Distance from the centre to the (slightly enlarged) cell; the outermost lattice cells
        # (clamped at ±2^40) and the top cell (the whole plane) are open towards the outside.
        top = (lv == self.top) & ~out
        lim = _LATTICE_LIMIT
        lo_x = np.where(top | ((cx << lv) <= -lim), -np.inf, self.space.xmin + (cx << lv) * self.cw - self._mx)
        hi_x = np.where(top | (((cx + 1) << lv) > lim), np.inf, self.space.xmin + ((cx + 1) << lv) * self.cw + self._mx)
        lo_y = np.where(top | ((cy << lv) <= -lim), -np.inf, self.space.ymin + (cy << lv) * self.ch - self._my)
        hi_y = np.where(top | (((cy + 1) << lv) > lim), np.inf, self.space.ymin + ((cy + 1) << lv) * self.ch + self._my)
        sx, sy = state.x[rows][own], state.y[rows][own]
        ddx = np.maximum(np.maximum(lo_x - sx, 0.0), sx - hi_x)
        ddy = np.maximum(np.maximum(lo_y - sy, 0.0), sy - hi_y)
        rr = r[own]
        keep = ddx * ddx + ddy * ddy <= rr * rr  # always true for an infinite ball
        own, lv, cx, cy, out = own[keep], lv[keep], cx[keep], cy[keep], out[keep]
        cell = np.where(out, self.outside_ids(lv, cx, cy), self.dense_ids(np.where(out, 0, lv), cx, cy))
        # (row, cell) x row keywords.
        kws = state.keywords_of(rows)
        kw_owner, kw_pos = expand_ranges(kws.ptr[own], kws.ptr[own + 1])
        keys = (cell[kw_owner] << _KW_BITS) | kws.ids[kw_pos].astype(np.int64)
        return keys, rows[own[kw_owner]], r

    def updated(self, state: KnnState, rows: Int64Array) -> None:
        """Re-index rows whose ball shrank below ``shrink`` × the indexed radius."""
        rows = np.asarray(rows, dtype=np.int64)
        if self.kernel == "numba":
            if rows.shape[0]:
                self._ensure(state.n_rows)
                self._reindex(state, rows, select=True)
            return
        rows = rows[state.in_use[rows]]
        if rows.shape[0] == 0:
            return
        r_now = safe_radius(state.radius2(rows), state.x[rows], state.y[rows])
        old = self.r_indexed[rows]
        redo = rows[np.isfinite(r_now) & (r_now < self.shrink * old)]
        if redo.shape[0]:
            self._invalidate(redo)
            self.add(state, redo)

    def sorted_probe(self, objects: Objects) -> kernel.SortedProbe:
        """:meth:`probe` in its sorted form; under numba built directly (the same arrays) when
        every object lies inside the data space (:func:`kernel.grid_sorted_probe`)."""
        if self.kernel == "numba":
            probe = kernel.grid_sorted_probe(self, objects, lattice_limit=_LATTICE_LIMIT, kw_bits=_KW_BITS)
            if probe is not None:
                return probe
        return super().sorted_probe(objects)

    def probe(self, objects: Objects) -> tuple[Int64Array, Int64Array]:
        """Each object's cell at every level, under each of its keywords."""
        owner, kw = _object_keyword_pairs(objects)
        keys, owners = [], []
        if self.kernel == "numba":
            pyramid_keys, pyramid_owners, cx, cy = kernel.grid_probe(self, owner, kw, objects,
                                                                     lattice_limit=_LATTICE_LIMIT, kw_bits=_KW_BITS)
            keys.append(pyramid_keys)
            owners.append(pyramid_owners)
            inside = (cx >= 0) & (cx < self.G) & (cy >= 0) & (cy < self.G)
        else:
            cx, cy = self.cell_x(objects.x)[owner], self.cell_y(objects.y)[owner]
            inside = (cx >= 0) & (cx < self.G) & (cy >= 0) & (cy < self.G)
            # Inside the space: the pyramid; every object: the top cell (the whole plane).
            for lv in self.levels:
                rows = slice(None) if lv == self.top else inside
                cell = self.dense_ids(lv, cx[rows] >> lv, cy[rows] >> lv)
                keys.append((cell << _KW_BITS) | kw[rows])
                owners.append(owner[rows])
        # Outside it: the outside lattice, every level (such objects are rare).
        if not inside.all():
            o = ~inside
            for lv in range(_OUTSIDE_TOP + 1):
                cell = self.outside_ids(lv, cx[o] >> lv, cy[o] >> lv)
                keys.append((cell << _KW_BITS) | kw[o])
                owners.append(owner[o])
        return np.concatenate(keys), np.concatenate(owners)


def make_index(method: str, space: Rect, *, grid: int = DEFAULT_GRID, **kw: float) -> WorkerIndex:
    """The worker index of a partitioning method: ``kop``, ``sop``, ``dkm`` (docs/design.md §2) or
    ``ps2`` (docs/design.md §2.5)."""
    m = method.lower()
    if m == "kop":
        return KopIndex(**kw)  # type: ignore[arg-type]
    if m == "sop":
        return SopIndex(**kw)  # type: ignore[arg-type]
    if m == "dkm":
        return GridIndex(space, grid, **kw)  # type: ignore[arg-type]
    if m == "ps2":
        return Ps2Index(**kw)  # type: ignore[arg-type]
    raise ValueError(f"unknown method {method!r}; valid methods: kop, sop, dkm, ps2")
