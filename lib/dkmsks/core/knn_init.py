"""Exact kNN of many subscriptions within a static object set (``O_init``).

The initial phase (paper §3; docs/design.md §1 "Initial phase") needs the exact kNN within ``O_init``
of every initial subscription: it is their state at partition time and gives the balls
``B(s)`` whose rectangles ``R`` drive SOP's Eq. 2–3 and DkM-SKS's Eq. 4–7. New subscriptions
need the same query for their cost estimate (docs/design.md §2).

Result layout used across the core ("kNN matrices"): for ``n`` subscriptions and a width
``K >= max(k)``, ``ids`` is int64 ``[n, K]`` and ``d2`` float64 ``[n, K]``; row ``i`` holds
the ``min(k_i, |O(s_i)|)`` best objects ordered by ``(d², object id)``, padded with ``-1``
and ``+inf``. The ball radius² of row ``i`` is ``d2[i, k_i - 1]`` (``inf`` while not full).

How it is computed (docs/design.md §3 fact 5)
-------------------------------------
With OR semantics ``O(s)`` is the union of the keyword postings ``O_λ``, ``λ ∈ s.ψ``, so the
top-k of ``s`` is the top-k of the union of its per-keyword top-k lists. Each keyword with
many objects gets its own ``scipy.spatial.cKDTree``; all (subscription, keyword) pairs of one
keyword are answered by a single batched tree query. Keywords with few objects are brute
forced (one small dense matrix per batch), which is cheaper than a tree query.

Exactness (docs/design.md §1) needs care beyond a plain tree query:

- ``d²`` is recomputed here as ``dx*dx + dy*dy`` with ``dx = o.x - s.x`` (the oracle's float64
  expression, bit for bit); the tree's own distances are only used as a bound.
- Ties are broken by object id. A tree returns an *arbitrary* subset of the points at its
  k-th distance, and the real data has many co-located objects. So the tree is asked for a
  few more neighbours than needed, and a pair's list is accepted only when its k-th ``d²`` is
  strictly below the tree's last returned distance (with a relative margin for rounding):
  every point the tree did not return is then provably farther. Otherwise the pair falls back
  to a ball query that returns *every* point within the k-th distance, which is re-ranked.

Subscriptions are answered in chunks taken in Z-order (Morton order) of their location, so
consecutive queries of a tree touch the same nodes (~2.5x faster than random order), and the
chunks run in parallel threads.

Candidates are ranked as complex numbers ``d² + 1j·rank(id)`` because numpy sorts complex
values lexicographically (real part, then imaginary part): one plain row-wise sort gives the
``(d², id)`` order, several times cheaper than a two-key ``lexsort``.
"""

from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import numpy.typing as npt
from scipy.spatial import cKDTree

from dkmsks.core.config import thread_count
from dkmsks.core.model import Float64Array, Int64Array, Objects, Subscriptions

#: Relative slack between our ``d²`` and the tree's distance²; both are sums of two
#: correctly rounded squares of the same differences, so they agree to a few ulps. A much
#: larger slack only costs a few more ball-query fallbacks.
_REL_SLACK = 1e-9

Complex128Array = npt.NDArray[np.complex128]

#: Smallest chunk worth a thread of its own in :meth:`StaticKnnIndex.query`.
_MIN_PARALLEL_CHUNK = 16384


def _spread_bits(v: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """Move bit ``i`` of each 16-bit value to bit ``2i`` (interleaving for Morton codes)."""
    for shift, mask in ((8, 0x00FF00FF), (4, 0x0F0F0F0F), (2, 0x33333333), (1, 0x55555555)):
        v = (v | (v << np.uint64(shift))) & np.uint64(mask)
    return v


def _ranked(d2: Float64Array, ranks: Int64Array) -> Complex128Array:
    """Pack ``d²`` and rank as ``d² + 1j·rank`` (exact: ranks < 2**53) for one-pass sorting."""
    z = np.empty(d2.shape, dtype=np.complex128)
    z.real = d2
    z.imag = ranks
    return z


class StaticKnnIndex:
    """Per-keyword spatial index over a static object set (docs/design.md §3 fact 5).

    Objects are held in id order: an object's *rank* (its row in id order) is the tie-break
    key, so "smaller rank" means "smaller id".

    Parameters
    ----------
    brute_force_max
        Keywords with at most this many objects get no tree; their pairs are brute forced.
    extra
        How many neighbours beyond the largest ``k`` of a keyword's batch the tree is asked
        for; the slack that lets most pairs prove their k-th neighbour without a fallback.
    workers
        Threads for :meth:`query` (``1``: none), at least 1. Chunks of subscriptions are
        answered concurrently, each thread running its own tree queries and numpy work (both
        release the GIL). The caller says how many: the core reads nothing of the machine, so
        one per usable core is ``dkmsks.cores.usable_cores()``, passed in from outside; use a
        small value inside a Spark task.
    chunk_size
        Subscriptions answered per internal batch; bounds the temporary memory (about
        ``chunk_size · keywords per subscription · K · 16`` bytes) at little cost in speed.
    """

    def __init__(
        self,
        ids: Int64Array,
        x: Float64Array,
        y: Float64Array,
        kw_start: Int64Array,
        postings: Int64Array,
        trees: dict[int, cKDTree],
        *,
        brute_force_max: int,
        extra: int,
        workers: int,
        chunk_size: int,
    ) -> None:
        self._ids = ids  # object ids, ascending
        self._x = x
        self._y = y
        self._kw_start = kw_start  # CSR over keywords into ``postings``
        self._postings = postings  # object ranks, ascending within each keyword
        self._trees = trees  # keyword -> tree over x/y of its postings, in posting order
        self._bbox = (0.0, 0.0, 1.0, 1.0)
        if x.size:
            self._bbox = (float(x.min()), float(y.min()), float(x.max()), float(y.max()))
        self.brute_force_max = brute_force_max
        self.extra = extra
        self.workers = thread_count(workers)
        self.chunk_size = chunk_size

    @property
    def n_objects(self) -> int:
        """The number of indexed objects."""
        return int(self._ids.shape[0])

    @property
    def n_keywords(self) -> int:
        """The number of keyword ids the index covers."""
        return int(self._kw_start.shape[0] - 1)

    @classmethod
    def build(
        cls,
        objects: Objects,
        n_keywords: int,
        *,
        workers: int,
        brute_force_max: int = 32,
        extra: int = 4,
        chunk_size: int = 1 << 18,
    ) -> StaticKnnIndex:
        """Index ``objects`` (``O_init``; timestamps are ignored) for :meth:`query`.

        Parameters
        ----------
        objects
            The static object set; ids must be unique.
        n_keywords
            Vocabulary size at build time. Keyword ids ``>= n_keywords`` match nothing.
        workers, brute_force_max, extra, chunk_size
            Tuning knobs, see the class docstring; none of them changes any result.
        """
        if brute_force_max < 0 or extra < 0 or chunk_size < 1:
            raise ValueError("brute_force_max and extra must be >= 0, chunk_size >= 1")
        thread_count(workers)
        n = len(objects)
        order = np.argsort(objects.ids)  # ids are unique (checked below): any sort will do
        ids = objects.ids[order].astype(np.int64)
        if n > 1 and not (ids[1:] > ids[:-1]).all():
            raise ValueError("object ids must be unique")
        x = objects.x[order].astype(np.float64)
        y = objects.y[order].astype(np.float64)
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.arange(n, dtype=np.int64)

        kws = objects.keywords.ids.astype(np.int64)
        owner_rank = rank[objects.keywords.owners()]
        ok = (kws >= 0) & (kws < n_keywords)
        kws, owner_rank = kws[ok], owner_rank[ok]
        # Sort postings by (keyword, rank): the CSR blocks come out ascending by id, which
        # keeps the brute-force candidates in a canonical order.
        post_order = np.argsort(kws * (n + 1) + owner_rank)  # distinct keys
        postings = owner_rank[post_order]
        counts = np.bincount(kws, minlength=n_keywords)[:n_keywords]
        kw_start = np.zeros(n_keywords + 1, dtype=np.int64)
        np.cumsum(counts, out=kw_start[1:])

        trees: dict[int, cKDTree] = {}
        for kw in np.flatnonzero(counts > brute_force_max).tolist():
            members = postings[kw_start[kw] : kw_start[kw + 1]]
            # Unbalanced, non-compact trees build ~2x faster and query as fast (measured).
            trees[kw] = cKDTree(
                np.column_stack((x[members], y[members])),
                balanced_tree=False,
                compact_nodes=False,
            )
        return cls(
            ids,
            x,
            y,
            kw_start,
            postings,
            trees,
            brute_force_max=brute_force_max,
            extra=extra,
            workers=workers,
            chunk_size=chunk_size,
        )

    def keyword_counts(self, kw: npt.ArrayLike) -> Int64Array:
        """``|O_λ|`` of every keyword id in ``kw`` (ids outside the vocabulary count 0)."""
        kw = np.atleast_1d(np.asarray(kw, dtype=np.int64))
        valid = (kw >= 0) & (kw < self.n_keywords)
        safe = np.where(valid, kw, 0)
        return np.where(valid, self._kw_start[safe + 1] - self._kw_start[safe], 0)

    def query(
        self, subs: Subscriptions, *, width: int | None = None
    ) -> tuple[Int64Array, Float64Array]:
        """Exact kNN of every subscription over the indexed objects (ignores ``t``).

        Ties at equal distance are broken by object id, so the result is unique.

        Parameters
        ----------
        subs
            Subscriptions; ``k >= 1``. Keywords unseen at build time match nothing.
        width
            Columns ``K`` of the result; defaults to ``max(k)`` (0 for no subscriptions).

        Returns
        -------
        ids, d2
            int64 ``[n, K]`` and float64 ``[n, K]`` (the module's kNN-matrix layout).

        Raises
        ------
        ValueError
            If some ``k < 1`` or ``width < max(k)``.
        """
        n = len(subs)
        k = np.asarray(subs.k, dtype=np.int64)
        kmax = int(k.max()) if n else 0
        if n and int(k.min()) < 1:
            raise ValueError("every subscription needs k >= 1")
        width_ = kmax if width is None else int(width)
        if width_ < kmax:
            raise ValueError(f"width {width_} is smaller than the largest k ({kmax})")
        out_ids = np.full((n, width_), -1, dtype=np.int64)
        out_d2 = np.full((n, width_), np.inf, dtype=np.float64)
        if self.n_objects == 0:
            return out_ids, out_d2
        # Answer subscriptions in Z-order (Morton) of their location: consecutive tree
        # queries then walk the same tree nodes, measured ~2.5x faster than random order.
        order = np.argsort(self._morton(subs.x, subs.y), kind="stable")
        threads = self.workers
        chunk = self.chunk_size
        if threads > 1 and n >= 2 * _MIN_PARALLEL_CHUNK:
            # Enough work for every thread to get at least one chunk.
            chunk = min(chunk, max(_MIN_PARALLEL_CHUNK, -(-n // threads)))
        bounds = list(range(0, n, chunk))

        def run(lo: int, tree_workers: int) -> None:
            rows = order[lo : lo + chunk]
            z = self._query_chunk(subs.take(rows), kmax, tree_workers)
            filled = z.imag < self.n_objects
            ranks = np.where(filled, z.imag, 0).astype(np.int64)
            # Chunks own disjoint rows, so concurrent writes never overlap.
            out_ids[rows, :kmax] = np.where(filled, self._ids[ranks], -1)
            out_d2[rows, :kmax] = z.real

        if threads > 1 and len(bounds) > 1:
            # numpy and the tree release the GIL in their heavy loops, so whole chunks run in
            # parallel threads (each tree query single-threaded); this also parallelises the
            # numpy ranking and merging, which a threaded tree query alone would not.
            with ThreadPoolExecutor(max_workers=threads) as pool:
                for f in [pool.submit(run, lo, 1) for lo in bounds]:
                    f.result()
        else:
            for lo in bounds:
                run(lo, self.workers)
        return out_ids, out_d2

    # -- internals ---------------------------------------------------------------------------

    def _morton(self, x: Float64Array, y: Float64Array) -> npt.NDArray[np.uint64]:
        """Z-order code of each point on a 2^16 x 2^16 grid over the objects' bounding box."""
        lo_x, lo_y, hi_x, hi_y = self._bbox
        # Only an ordering heuristic: NaN/inf/outside points are clipped, never an error.
        gx = np.nan_to_num((x - lo_x) / max(hi_x - lo_x, 1e-300) * 65535.0, nan=0.0)
        gy = np.nan_to_num((y - lo_y) / max(hi_y - lo_y, 1e-300) * 65535.0, nan=0.0)
        return _spread_bits(np.clip(gx, 0, 65535).astype(np.uint64)) | (
            _spread_bits(np.clip(gy, 0, 65535).astype(np.uint64)) << np.uint64(1)
        )

    def _pad(self, shape: tuple[int, ...]) -> Complex128Array:
        """Empty slots: ``d² = inf`` and rank ``n`` (sorts after every real candidate)."""
        return np.full(shape, complex(np.inf, self.n_objects), dtype=np.complex128)

    def _query_chunk(self, subs: Subscriptions, kmax: int, tree_workers: int) -> Complex128Array:
        """``[len(subs), kmax]`` candidates ``d² + 1j·rank``, each row in ``(d², id)`` order."""
        n = len(subs)
        k = np.asarray(subs.k, dtype=np.int64)
        result = self._pad((n, kmax))
        if n == 0 or kmax == 0:
            return result
        owner = subs.keywords.owners()
        kw = subs.keywords.ids.astype(np.int64)
        counts = self.keyword_counts(kw)
        keep = counts > 0
        owner, kw, counts = owner[keep], kw[keep], counts[keep]
        n_pairs = owner.shape[0]
        # Per-pair top-k lists, one row per (subscription, keyword) pair. Every row is written
        # in full below (producers pad what they do not fill), so no upfront padding pass.
        lists = np.empty((n_pairs, kmax), dtype=np.complex128)
        small = counts <= self.brute_force_max
        self._brute_force(lists, np.flatnonzero(small), owner, kw, k, subs)
        self._tree_pairs(lists, np.flatnonzero(~small), owner, kw, k, subs, tree_workers)
        # Slots beyond a pair's own k never reach the merged top-k, blank them anyway so each
        # list holds exactly what was proven.
        cols = np.arange(kmax)
        lists[cols[None, :] >= k[owner][:, None]] = complex(np.inf, self.n_objects)
        self._merge(result, lists, owner, k)
        return result

    def _brute_force(
        self,
        lists: Complex128Array,
        pairs: Int64Array,
        owner: Int64Array,
        kw: Int64Array,
        k: Int64Array,
        subs: Subscriptions,
    ) -> None:
        """Pairs of keywords with few objects: score every posting, sort, keep the top."""
        if pairs.size == 0:
            return
        kmax = lists.shape[1]
        start = self._kw_start[kw[pairs]]
        count = self._kw_start[kw[pairs] + 1] - start
        width = int(count.max())
        cols = np.arange(width)
        present = cols[None, :] < count[:, None]
        ranks = self._postings[np.where(present, start[:, None] + cols[None, :], 0)]
        s = owner[pairs]
        dx = self._x[ranks] - subs.x[s][:, None]
        dy = self._y[ranks] - subs.y[s][:, None]
        d2 = np.where(present, dx * dx + dy * dy, np.inf)
        z = _ranked(d2, np.where(present, ranks, self.n_objects))
        z.sort(axis=1)
        take = min(width, kmax)
        lists[pairs, :take] = z[:, :take]
        if take < kmax:
            lists[pairs, take:] = complex(np.inf, self.n_objects)

    def _tree_pairs(
        self,
        lists: Complex128Array,
        pairs: Int64Array,
        owner: Int64Array,
        kw: Int64Array,
        k: Int64Array,
        subs: Subscriptions,
        tree_workers: int,
    ) -> None:
        """Pairs of keywords with a tree: one batched tree query per keyword."""
        if pairs.size == 0:
            return
        kmax = lists.shape[1]
        pairs = pairs[np.argsort(kw[pairs], kind="stable")]
        group_kw = kw[pairs]
        bounds = np.flatnonzero(np.diff(group_kw)) + 1
        starts = np.concatenate([[0], bounds])
        ends = np.concatenate([bounds, [pairs.size]])
        fallback: list[tuple[int, Int64Array]] = []
        pts = np.column_stack((subs.x, subs.y))
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
            g = pairs[a:b]
            m = g.size
            key = int(group_kw[a])
            tree = self._trees[key]
            base = int(self._kw_start[key])
            n_kw = int(tree.n)
            s = owner[g]
            kg = k[s]
            q = min(int(kg.max()) + self.extra, n_kw)
            # Threads only pay off for big batches; tiny ones would mostly spawn threads.
            dist, idx = tree.query(pts[s], k=q, workers=tree_workers if m >= 2048 else 1)
            dist = dist.reshape(m, q)
            idx = idx.reshape(m, q)
            # Coordinates and ranks from the keyword's own (small, contiguous) arrays rather
            # than the global ones: far fewer cache misses.
            data = tree.data
            dx = data[:, 0][idx] - pts[s, 0][:, None]
            dy = data[:, 1][idx] - pts[s, 1][:, None]
            d2 = dx * dx + dy * dy
            ranks = self._postings[base : base + n_kw][idx]
            # The tree returns rows by its own distance; they are already in (d², id) order
            # unless a tie (or a last-ulp difference) needs reordering: sort only those rows.
            if q > 1:
                step = d2[:, 1:] - d2[:, :-1]
                ordered = (step > 0) | ((step == 0) & (ranks[:, 1:] > ranks[:, :-1]))
                messy = np.flatnonzero(~ordered.all(axis=1))
            else:
                messy = np.zeros(0, dtype=np.int64)
            take = min(q, kmax)
            z = _ranked(d2[:, :take], ranks[:, :take])
            if messy.size:
                zm = _ranked(d2[messy], ranks[messy])
                zm.sort(axis=1)
                z[messy] = zm[:, :take]
            lists[g, :take] = z
            if take < kmax:
                lists[g, take:] = complex(np.inf, self.n_objects)
            if q < n_kw:
                # Proven complete when the pair's k-th d² is strictly below every point the
                # tree left out (those are at tree distance >= its last returned distance).
                kth = z[np.arange(m), np.minimum(kg, q) - 1].real
                bound = dist[:, -1] * dist[:, -1] * (1.0 - _REL_SLACK)
                unproven = np.flatnonzero(~(kth < bound))
                if unproven.size:
                    fallback.append((key, g[unproven]))
        for key, g in fallback:
            self._ball_fallback(lists, key, g, owner, k, subs, tree_workers)

    def _ball_fallback(
        self,
        lists: Complex128Array,
        key: int,
        g: Int64Array,
        owner: Int64Array,
        k: Int64Array,
        subs: Subscriptions,
        tree_workers: int,
    ) -> None:
        """Re-answer pairs whose k-th distance ties with points the tree may have left out.

        Every point within (slightly more than) the current k-th distance is fetched, so the
        exact ``(d², id)`` top-k is among them.
        """
        kmax = lists.shape[1]
        tree = self._trees[key]
        base = int(self._kw_start[key])
        s = owner[g]
        sx, sy = subs.x[s], subs.y[s]
        kth = lists[g, k[s] - 1].real
        radius = np.sqrt(kth) * (1.0 + _REL_SLACK) + np.finfo(np.float64).tiny
        found = tree.query_ball_point(
            np.column_stack((sx, sy)), r=radius, workers=tree_workers, return_sorted=False
        )
        lengths = np.fromiter((len(f) for f in found), dtype=np.int64, count=len(found))
        flat = np.fromiter(
            itertools.chain.from_iterable(found), dtype=np.int64, count=int(lengths.sum())
        )
        row = np.repeat(np.arange(g.size, dtype=np.int64), lengths)
        ranks = self._postings[base + flat]
        dx = self._x[ranks] - sx[row]
        dy = self._y[ranks] - sy[row]
        d2 = dx * dx + dy * dy
        order = np.lexsort((ranks, d2, row))
        row, ranks, d2 = row[order], ranks[order], d2[order]
        first = np.zeros(g.size + 1, dtype=np.int64)
        np.cumsum(lengths, out=first[1:])
        pos = np.arange(row.size, dtype=np.int64) - first[row]
        sel = pos < kmax
        fresh = self._pad((g.size, kmax))
        fresh[row[sel], pos[sel]] = _ranked(d2[sel], ranks[sel])
        lists[g] = fresh

    def _merge(
        self, result: Complex128Array, lists: Complex128Array, owner: Int64Array, k: Int64Array
    ) -> None:
        """Top-k of the union of each subscription's per-keyword lists (docs/design.md §3 fact 5)."""
        kmax = lists.shape[1]
        n = result.shape[0]
        n_lists = np.bincount(owner, minlength=n)
        first = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(n_lists, out=first[1:])  # pairs are grouped by owner, ascending
        single = np.flatnonzero(n_lists == 1)
        result[single] = lists[first[single]]
        multi = np.flatnonzero(n_lists > 1)
        if multi.size == 0:
            return
        # Group by (number of lists, k): only the first k slots of each list can matter, so
        # the rows to sort are c·k wide rather than c·K (about half on the paper's workload).
        group = n_lists[multi] * (kmax + 1) + k[multi]
        order = np.argsort(group, kind="stable")
        multi, group = multi[order], group[order]
        cuts = np.flatnonzero(np.diff(group)) + 1
        for rows in np.split(multi, cuts):
            c, kk = int(n_lists[rows[0]]), int(k[rows[0]])
            z = lists[first[rows][:, None] + np.arange(c)[None, :], :kk].reshape(rows.size, c * kk)
            z.sort(axis=1)
            # An object matching several of the keywords appears once per list, with the same
            # d² and rank, so its copies are adjacent after the sort: keep the first.
            fresh = np.ones(z.shape, dtype=np.bool_)
            fresh[:, 1:] = z[:, 1:] != z[:, :-1]
            pos = np.cumsum(fresh, axis=1) - 1
            sel = fresh & (pos < kk)
            r_idx, c_idx = np.nonzero(sel)
            result[rows[r_idx], pos[r_idx, c_idx]] = z[r_idx, c_idx]
