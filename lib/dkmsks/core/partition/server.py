"""The main server (paper §3 "Subscription insertion/deletion", §4 "Dealing with new subscriptions").

:class:`MainServer` keeps ``C(w)`` for every worker and the worker and estimated cost of every
live subscription. New subscriptions get each method's estimate and go to the least-loaded
worker; deletions subtract their cost.

Estimates for a new subscription ``s_n`` (docs/design.md §2):

- KOP: Eq. 1.
- SOP: the kNN of ``s_n`` in ``O_init`` gives its ball; ``R_n`` = the ball's box clipped to
  the data space (the whole space when fewer than ``k`` objects match); cost ``P(R_n)`` (Eq. 2,
  Eq. 3 with ``S_r = {s_n}``).
- DkM-SKS: ``R_n`` as for SOP; ``S* = argmax_{S_r} area(R ∩ R_n)`` over the plan's subsets
  (Eq. 7) through :class:`RectIndex`; cost = Eq. 5 with ``R*``, the ``R`` of ``S*``, or with
  ``R_n`` when no subset overlaps ``R_n`` with positive area. Ties are the rule, not the
  exception: every subset whose ``R`` contains ``R_n`` overlaps it by ``area(R_n)``, and a plan
  usually has whole-space subsets (a subscription with fewer than ``k`` matches makes its
  subset's ``R`` the whole space). Among equal overlaps we take the subset with the smallest
  ``R`` — the tightest rectangle around ``R_n``, the most local estimate — then the one listed
  first in the plan. (Taking the first listed would almost always pick a whole-space subset
  and turn the estimate into Eq. 1.)

The estimate only balances load: a worker must index a new subscription with its *actual*
ball (the whole space until it has ``k`` results), never with ``R_n`` (docs/design.md §2).

PS²Stream (``ps2``, docs/design.md §2.5–3.7) estimates nothing: ``C(w)`` starts as the plan's count
load ``L(w)``, a new subscription goes to the worker with the lowest count and adds ``β``, a
deletion subtracts ``β``; neither ``new_cost`` nor :meth:`MainServer.refresh` changes anything,
since counts do not depend on balls. ``ps2_new="route"`` sends a new subscription to the worker
of its home leaf instead (:func:`~dkmsks.core.partition.ps2.route_home`; decision 9 of
:mod:`dkmsks.core.partition.ps2`).

``new_cost="live"`` (ours, not the paper's): the paper's estimate describes the ball a new
subscription *would* have in ``O_init``, but its actual ball is infinite until ``k`` matching
objects have arrived (docs/design.md §1), and on real data that takes many timestamps: meanwhile every
object sharing a keyword is tested against it, exactly as under KOP. So a live estimate costs a
new subscription by its method's formula over the MBR ``R_b`` of its *actual* current ball
(clipped to the data space):

- DkM-SKS: Eq. 5 with ``R = R_b`` (``Σ_λ |O_{R_b,λ}|``; the whole space gives Eq. 1);
- SOP: ``P(R_b)`` (Eq. 2);
- KOP: Eq. 1, which does not depend on the ball (so "live" equals "paper" for KOP).

On registration the ball is infinite, so the estimate is the whole-space one. When balls shrink,
the caller reports the new radii with :meth:`MainServer.refresh` (array in, nothing else: the
engine passes the subscriptions whose result changed in a timestamp, a Spark driver the changed
rows it gets back) and ``C(w)`` moves by the difference. Initial subscriptions keep the plan's
cost (their ball was computed in ``O_init`` and already is their actual ball).

A ball shrinks a little with almost every accepted object, and re-costing (Eq. 5 over the
statistics) is the main server's biggest per-timestamp cost, so a cost is recomputed only once
the ball's squared radius has fallen to ``refresh_shrink`` (default ½) of the one it was last
costed with (the radius to 1/√2 of it) — lazy like the workers' grid, which re-indexes a ball
once its radius has halved (``GridIndex``). Measured on the Twitter stand-in (|O_init| = 1M,
|S| = 100k, m = 20, 100 timestamps): 1,603 → 158 re-costs per timestamp, cost refresh
15.9 → 4.5 ms (medians), DkM-SKS's max/mean worker work not worse (1.12 → 1.08 over the last
10 timestamps).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from dkmsks.core.config import DEFAULTS, NewCost, Ps2New
from dkmsks.core.model import (
    Float64Array,
    Int32Array,
    Int64Array,
    KeywordSets,
    Rect,
    Subscriptions,
)
from dkmsks.core.partition._common import (
    StatsLike,
    ball_boxes,
    keyword_box_weights,
    keyword_rect_weights,
    keyword_weights,
    knn_radius2,
)
from dkmsks.core.partition.greedy import assign_in_order
from dkmsks.core.partition.new_book import (
    NewSubscriptionBook,
    ball_boxes_compiled,
    pick_recosts,
    pick_recosts_numpy,
)
from dkmsks.core.partition.plan import Method, PartitionPlan
from dkmsks.core.partition.ps2 import route_home
from dkmsks.core.sets import has_duplicates

__all__ = ["MainServer", "RectIndex"]

# Relative slack that keeps a rectangle filed at level l within two cells per axis despite
# rounding in the cell arithmetic (its extent is at most (1 - _SLACK) cells).
_SLACK = 1e-6


class RectIndex:
    """Max-overlap search over many rectangles (Eq. 7), a multi-level grid in numpy.

    ``query`` returns, per query rectangle, the rectangle with the largest positive overlap
    area; among equal overlaps the one with the smallest area (the tightest rectangle, e.g.
    the smallest ``R`` containing the query), then the lowest index.

    Level ``l`` has ``2^l × 2^l`` cells over the data space. A rectangle belongs to the finest
    level whose cells are at least as large as it, but at least ``base_level``, and is filed in
    every cell of that level it touches (at most 2×2 cells at its own level; coarse rectangles
    are copied into the cells of ``base_level`` so a small query only reads the large
    rectangles that actually reach its cell). A query reads, per level, the cells its own cell
    range touches, as contiguous ranges of a key-sorted array (one range per cell row).
    Levels are searched coarse to fine; a query skips a level once its best overlap exceeds the
    largest rectangle area there (nothing there can match it). Rectangles of zero area never
    overlap positively and are not filed; of identical rectangles only the first is filed
    (it wins every tie against the others).
    """

    def __init__(
        self, rects: npt.ArrayLike, space: Rect, *, max_level: int = 20, base_level: int = 4
    ) -> None:
        r = np.asarray(rects, dtype=np.float64).reshape(-1, 4)
        self.rects = r
        self.n = r.shape[0]
        self.max_level = int(max_level)
        self.x0, self.y0 = space.xmin, space.ymin
        # A degenerate space still needs positive cell sizes to hash into.
        self.W = (space.xmax - space.xmin) or 1.0
        self.H = (space.ymax - space.ymin) or 1.0
        w = r[:, 2] - r[:, 0]
        h = r[:, 3] - r[:, 1]
        self.area = np.maximum(w, 0.0) * np.maximum(h, 0.0)
        keep = np.flatnonzero(self.area > 0)
        if keep.shape[0]:
            # First of each group of identical rectangles: a stable lexsort keeps equal rows
            # in index order (np.unique(axis=0) did the same ~4x slower on 850k rectangles).
            rk = r[keep]
            order = np.lexsort((rk[:, 3], rk[:, 2], rk[:, 1], rk[:, 0]))
            sorted_r = rk[order]
            first = np.ones(order.shape[0], dtype=bool)
            first[1:] = (sorted_r[1:] != sorted_r[:-1]).any(axis=1)
            keep = np.sort(keep[order[first]])
        lev = np.minimum(self._fit_level(w[keep], self.W), self._fit_level(h[keep], self.H))
        lev = np.maximum(lev, min(int(base_level), self.max_level))
        self.levels: list[tuple[int, Int64Array, Int32Array, float]] = []
        for lv in np.unique(lev):
            sel = keep[lev == lv]
            g = 1 << int(lv)
            ix0 = self._cell(r[sel, 0], self.x0, self.W, g)
            ix1 = self._cell(r[sel, 2], self.x0, self.W, g)
            iy0 = self._cell(r[sel, 1], self.y0, self.H, g)
            iy1 = self._cell(r[sel, 3], self.y0, self.H, g)
            nx, ny = ix1 - ix0 + 1, iy1 - iy0 + 1
            # One entry per (rectangle, touched cell).
            per = nx * ny
            owner = np.repeat(np.arange(sel.shape[0]), per)
            j = np.arange(owner.shape[0]) - np.repeat(np.cumsum(per) - per, per)
            cx = ix0[owner] + j % nx[owner]
            cy = iy0[owner] + j // nx[owner]
            key = cy * g + cx
            ids = sel[owner]
            order = np.lexsort((ids, key))
            # Rectangle numbers as int32 (a plan has far fewer than 2^31 subsets).
            self.levels.append(
                (int(lv), key[order], ids[order].astype(np.int32), float(self.area[sel].max()))
            )

    def _fit_level(self, ext: Float64Array, total: float) -> npt.NDArray[np.int64]:
        """Finest level whose cell size along one axis exceeds ``ext / (1 - slack)``."""
        L = self.max_level
        with np.errstate(divide="ignore"):
            lev = np.floor(np.log2(total * (1 - _SLACK) / np.maximum(ext, 1e-300)))
        lev = np.clip(np.nan_to_num(lev, nan=0.0, posinf=L, neginf=0), 0, L).astype(np.int64)
        for _ in range(2):  # log2 rounding: step back while the rectangle does not fit
            too_big = (lev > 0) & (ext > total / np.exp2(lev) * (1 - _SLACK))
            lev -= too_big
        return lev

    @staticmethod
    def _cell(v: Float64Array, origin: float, total: float, g: int) -> npt.NDArray[np.int64]:
        # Monotone in v, so a rectangle overlapping a query shares at least one cell with it.
        c = np.floor((v - origin) / (total / g))
        return np.clip(np.nan_to_num(c), 0, g - 1).astype(np.int64)

    def query(self, q: npt.ArrayLike) -> tuple[Int64Array, Float64Array]:
        """For each query rectangle ``[xmin, ymin, xmax, ymax]``: the rectangle with the largest
        positive overlap area (ties: smallest area, then lowest index), or ``-1``; and that
        overlap area."""
        q = np.asarray(q, dtype=np.float64).reshape(-1, 4)
        nq = q.shape[0]
        best = np.full(nq, -1, dtype=np.int64)
        best_a = np.zeros(nq, dtype=np.float64)
        best_ra = np.full(nq, np.inf)
        qa = np.maximum(q[:, 2] - q[:, 0], 0) * np.maximum(q[:, 3] - q[:, 1], 0)
        live = qa > 0
        for lv, keys, ids, max_area in self.levels:
            act = np.flatnonzero(live & (best_a <= max_area))
            if act.shape[0] == 0:
                continue
            g = 1 << lv
            qx0 = self._cell(q[act, 0], self.x0, self.W, g)
            qx1 = self._cell(q[act, 2], self.x0, self.W, g)
            qy0 = self._cell(q[act, 1], self.y0, self.H, g)
            qy1 = self._cell(q[act, 3], self.y0, self.H, g)
            # Restrict to occupied rows so huge queries at fine levels stay cheap.
            qy0 = np.maximum(qy0, int(keys[0] // g))
            qy1 = np.minimum(qy1, int(keys[-1] // g))
            nrows = np.maximum(qy1 - qy0 + 1, 0)
            n_pairs = int(nrows.sum())
            if n_pairs == 0:
                continue
            qi = np.repeat(np.arange(act.shape[0]), nrows)
            row = np.repeat(qy0 - (np.cumsum(nrows) - nrows), nrows) + np.arange(n_pairs)
            lo = np.searchsorted(keys, row * g + qx0[qi], side="left")
            hi = np.searchsorted(keys, row * g + qx1[qi], side="right")
            cnt = hi - lo
            tot = int(cnt.sum())
            if tot == 0:
                continue
            cq = np.repeat(qi, cnt)
            cand = ids[np.repeat(lo - (np.cumsum(cnt) - cnt), cnt) + np.arange(tot)]
            qq = q[act[cq]]
            rr = self.rects[cand]
            ow = np.minimum(qq[:, 2], rr[:, 2]) - np.maximum(qq[:, 0], rr[:, 0])
            oh = np.minimum(qq[:, 3], rr[:, 3]) - np.maximum(qq[:, 1], rr[:, 1])
            area = np.maximum(ow, 0.0) * np.maximum(oh, 0.0)
            pos = area > 0
            if not pos.any():
                continue
            cq, cand, area = cq[pos], cand[pos], area[pos]
            ra = self.area[cand]
            # Per query: the largest overlap, then the smallest rectangle, then the lowest index.
            order = np.lexsort((cand, ra, -area, cq))
            head = np.ones(order.shape[0], dtype=bool)
            head[1:] = cq[order][1:] != cq[order][:-1]
            first = order[head]
            tq = act[cq[first]]
            a_new, r_new, c_new = area[first], ra[first], cand[first]
            better = (a_new > best_a[tq]) | ((a_new == best_a[tq]) & (
                (r_new < best_ra[tq]) | ((r_new == best_ra[tq]) & (c_new < best[tq]))))
            tq, a_new, r_new, c_new = tq[better], a_new[better], r_new[better], c_new[better]
            best[tq], best_a[tq], best_ra[tq] = c_new, a_new, r_new
        return best, best_a


class MainServer:
    """Assignment of new subscriptions and deletions with per-worker loads ``C(w)``.

    Parameters
    ----------
    plan
        The initial :class:`PartitionPlan`; its subscriptions start live, its loads are the
        initial ``C(w)``.
    stats
        :class:`~dkmsks.core.stats.ObjectStatistics` of the same ``O_init`` (unused by
        PS²Stream, which counts and never estimates).
    knn_index
        :class:`~dkmsks.core.knn_init.StaticKnnIndex` over ``O_init`` (needed by SOP and
        DkM-SKS unless every :meth:`assign` call passes ``knn=``; KOP ignores it).

    new_cost
        ``"live"`` (the default, :data:`dkmsks.core.config.DEFAULTS`): the method's formula
        over the MBR of the subscription's actual current ball, kept up to date by
        :meth:`refresh` (module doc). ``"paper"``: the paper's estimate of a new subscription,
        from its ball in ``O_init`` (Eq. 1 / Eq. 2 / Eq. 7 + Eq. 5).

    refresh_shrink
        ``"live"`` only: re-cost a ball once its squared radius is at most this fraction of
        the one it was last costed with (module doc); ``1.0`` re-costs every change.

    ps2_new
        PS²Stream only: ``"argmin"`` (default, docs/design.md §2.5) gives a new subscription to the
        worker with the lowest count; ``"route"`` to the worker of its home leaf (the lowest
        count when no leaf shares a keyword with it).

    Costs are handled as integer weights (``cost · |O_init|``), as in the plan;
    :attr:`loads` and :meth:`lookup` convert them to the paper's probabilities.
    """

    def __init__(
        self,
        plan: PartitionPlan,
        stats: StatsLike,
        knn_index: Any = None,
        *,
        new_cost: NewCost | str = DEFAULTS.new_cost,
        refresh_shrink: float = 0.5,
        ps2_new: Ps2New | str = DEFAULTS.ps2_new,
    ) -> None:
        new_cost = NewCost.from_str(new_cost)
        if not 0.0 < refresh_shrink <= 1.0:
            raise ValueError(f"refresh_shrink must be in (0, 1], got {refresh_shrink}")
        self.ps2_new = Ps2New.from_str(ps2_new)
        self.new_cost = new_cost
        self.refresh_shrink = float(refresh_shrink)
        self.plan = plan
        self.method = plan.method
        self.stats = stats
        self.knn_index = knn_index
        self.m = plan.m
        self.space = plan.space
        self._scale = float(max(plan.n_objects, 1))
        self._load = plan.load_weight.astype(np.int64).copy()
        # Initial subscriptions in id order (searchsorted), new ones in a dict. These columns
        # are only read: when the plan already lists its subscriptions in id order (the usual
        # case), they are the plan's own arrays, not copies (memory per subscription).
        ids = plan.sub_ids
        in_order = bool(np.all(ids[1:] >= ids[:-1]))
        order = None if in_order else np.argsort(ids, kind="stable")
        self._ids = ids if order is None else ids[order]
        if self._ids.shape[0] > 1 and np.any(self._ids[1:] == self._ids[:-1]):
            raise ValueError("the plan lists a subscription id twice")
        self._worker = (plan.worker if order is None else plan.worker[order]).astype(np.int32, copy=False)
        self._weight = (plan.weight if order is None else plan.weight[order]).astype(np.int64, copy=False)
        self._alive = np.ones(self._ids.shape[0], dtype=bool)
        # Subscriptions registered later: worker, weight and (for "live" costs) ball of each.
        self._book = NewSubscriptionBook()
        self._rect_index: RectIndex | None = None
        if self.method is Method.DKM:
            self._rect_index = RectIndex(plan.subsets.rect, plan.space)
        # PS²Stream's weight of every subscription: a count, never a cost.
        self._ps2_beta = int(plan.params["beta"]) if self.method is Method.PS2 else 0

    # ---- state ---------------------------------------------------------------------------
    @property
    def load_weight(self) -> Int64Array:
        """``C(w) · |O_init|`` per worker (a copy)."""
        return self._load.copy()

    @property
    def loads(self) -> Float64Array:
        """``C(w)`` per worker."""
        return self._load / self._scale

    def __len__(self) -> int:
        return int(self._alive.sum()) + len(self._book)

    def _compiled(self) -> bool:
        """Whether the numba kernels run here (the statistics' choice, numpy without them)."""
        return getattr(self.stats, "kernel", "numpy") == "numba"

    def _search_ids(self, ids: Int64Array) -> Int64Array:
        """``np.searchsorted(self._ids, ids)``; under the numba kernels through a bucket table
        of the initial ids (built on first use), as the compiled Eq. 4 counts search: a
        timestamp's hundred deletions each wait for ~20 cold loads in a million ids otherwise."""
        if not self._compiled() or ids.shape[0] == 0:
            return np.searchsorted(self._ids, ids)
        from dkmsks.core import stats_kernel

        table = getattr(self, "_id_table", None)
        if table is None:
            table = self._id_table = stats_kernel.axis_table(self._ids)
        return stats_kernel.bounds_in_buckets(self._ids, table, np.ascontiguousarray(ids, dtype=np.int64))

    def _initial_rows(self, ids: Int64Array) -> Int64Array:
        """Row in the initial table of each id that is a live initial subscription, else -1."""
        if self._ids.shape[0] == 0:
            return np.full(ids.shape[0], -1, dtype=np.int64)
        pos = self._search_ids(ids)
        pos_c = np.minimum(pos, self._ids.shape[0] - 1)
        hit = (self._ids[pos_c] == ids) & self._alive[pos_c]
        return np.where(hit, pos_c, -1)

    def lookup(self, sub_ids: npt.ArrayLike) -> tuple[Int32Array, Float64Array]:
        """Worker and estimated cost ``C(s)`` of live subscriptions (``-1``/NaN if not live)."""
        workers, weights = self.lookup_weights(sub_ids)
        costs = np.where(workers >= 0, weights / self._scale, np.nan)
        return workers, costs

    def lookup_weights(self, sub_ids: npt.ArrayLike) -> tuple[Int32Array, Int64Array]:
        """Worker and integer weight of live subscriptions (``-1``/``-1`` if not live)."""
        _, workers, weights = self._lookup(np.atleast_1d(np.asarray(sub_ids, dtype=np.int64)))
        return workers, weights

    def _lookup(self, ids: Int64Array) -> tuple[Int64Array, Int32Array, Int64Array]:
        """:meth:`lookup_weights` and each id's live initial row (``-1``: none)."""
        rows = self._initial_rows(ids)
        workers = np.full(ids.shape[0], -1, dtype=np.int32)
        weights = np.full(ids.shape[0], -1, dtype=np.int64)
        hit = rows >= 0
        workers[hit] = self._worker[rows[hit]]
        weights[hit] = self._weight[rows[hit]]
        if len(self._book):
            miss = np.flatnonzero(~hit)
            at = self._book.find(ids[miss])
            got = at >= 0
            workers[miss[got]] = self._book.worker[at[got]]
            weights[miss[got]] = self._book.weight[at[got]]
        return rows, workers, weights

    # ---- estimates -----------------------------------------------------------------------
    def query_rects(self, subs: Subscriptions, *, knn: Any = None) -> Float64Array:
        """``R_n`` ``[n, 4]``: the box of each subscription's ball in ``O_init``, clipped to
        the data space (the whole space when fewer than ``k`` objects match)."""
        source = knn if knn is not None else self.knn_index
        if source is None:
            raise ValueError(
                f"{self.method.value} needs a StaticKnnIndex (or knn=) to estimate new subscriptions"
            )
        r2 = knn_radius2(source, subs)
        x0, y0, x1, y1 = ball_boxes(subs.x, subs.y, r2, self.space)
        return np.stack([x0, y0, x1, y1], axis=1).reshape(-1, 4)

    def estimate_weights(
        self, subs: Subscriptions, *, knn: Any = None
    ) -> tuple[Int64Array, Int64Array]:
        """Estimated ``C(s) · |O_init|`` of new subscriptions, without changing any state.

        Returns
        -------
        weights, subset
            The weights and, for DkM-SKS, the plan row of ``S*`` (Eq. 7; ``-1`` when no
            subset overlaps ``R_n`` and ``R_n`` itself was used; always ``-1`` otherwise).
            PS²Stream: ``β`` each (a count, docs/design.md §2.5).
        """
        n = len(subs)
        rows = np.arange(n, dtype=np.int64)
        none = np.full(n, -1, dtype=np.int64)
        if self.method is Method.PS2:
            return np.full(n, self._ps2_beta, dtype=np.int64), none
        if self.method is Method.KOP:
            return keyword_weights(self.stats, subs.keywords, rows), none
        rn = self.query_rects(subs, knn=knn)
        if self.method is Method.SOP:
            counts = self.stats.count_in_rects(
                rn[:, 0].copy(), rn[:, 1].copy(), rn[:, 2].copy(), rn[:, 3].copy()
            )
            return np.asarray(counts, dtype=np.int64), none
        assert self._rect_index is not None
        star, _ = self._rect_index.query(rn)
        rect = np.where((star >= 0)[:, None], self.plan.subsets.rect[np.maximum(star, 0)], rn)
        return keyword_rect_weights(self.stats, subs.keywords, rows, rows, rect), star

    def ball_weights(
        self, subs: Subscriptions, radius2: npt.ArrayLike, *, rows: npt.ArrayLike | None = None
    ) -> Int64Array:
        """The method's cost ``· |O_init|`` of each subscription over the MBR of a given ball.

        ``radius2[i]`` is the squared radius of subscription ``rows[i]``'s ball (``rows``: every
        row of ``subs`` by default; ``inf`` while it has fewer than ``k`` results: the whole
        data space). DkM-SKS: Eq. 5 with ``R`` = the ball's MBR; SOP: Eq. 2 over it; KOP: Eq. 1
        (no ball); PS²Stream: ``β`` (a count, no ball). This is the ``"live"`` estimate.
        """
        rows = np.arange(len(subs), dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
        r2 = np.broadcast_to(np.asarray(radius2, dtype=np.float64), (rows.shape[0],))
        return self._ball_weights(subs.x, subs.y, subs.keywords, rows, r2)

    def _ball_weights(self, x: Float64Array, y: Float64Array, keywords: KeywordSets, rows: Int64Array,
                      r2: Float64Array) -> Int64Array:
        """:meth:`ball_weights` of rows ``rows`` of the columns ``x``, ``y``, ``keywords``."""
        n = rows.shape[0]
        if self.method is Method.PS2:
            return np.full(n, self._ps2_beta, dtype=np.int64)
        if self.method is Method.KOP:
            return keyword_weights(self.stats, keywords, rows)
        out = np.zeros(n, dtype=np.int64)
        inf = ~np.isfinite(r2)
        fin = np.flatnonzero(~inf)
        if fin.shape[0]:
            at = rows[fin]
            boxes = ball_boxes_compiled if self._compiled() else ball_boxes
            x0, y0, x1, y1 = boxes(x[at], y[at], r2[fin].copy(), self.space)
        if self.method is Method.SOP:
            out[inf] = int(self.stats.n_objects)
            if fin.shape[0]:
                out[fin] = np.asarray(self.stats.count_in_rects(x0, y0, x1, y1), dtype=np.int64)
            return out
        if inf.any():
            # Over the whole data space Eq. 5 is Eq. 1 (O_init lies inside the space).
            out[inf] = keyword_weights(self.stats, keywords, rows[inf])
        if fin.shape[0]:
            out[fin] = keyword_box_weights(self.stats, keywords, at, x0, y0, x1, y1)
        return out

    def estimate(self, subs: Subscriptions, *, knn: Any = None) -> Float64Array:
        """Estimated ``C(s)`` of new subscriptions (probabilities), without changing state."""
        return self.estimate_weights(subs, knn=knn)[0] / self._scale

    # ---- insertions and deletions --------------------------------------------------------
    def assign(self, subs: Subscriptions, *, knn: Any = None) -> Int32Array:
        """:meth:`assign_weighted`'s workers."""
        return self.assign_weighted(subs, knn=knn)[0]

    def assign_weighted(self, subs: Subscriptions, *, knn: Any = None) -> tuple[Int32Array, Int64Array]:
        """Register new subscriptions: estimate each cost and give each, in input order, to
        the least-loaded worker (lowest index on ties), updating ``C(w)``. PS²Stream: weight
        ``β``, no estimate (or, with ``ps2_new="route"``, the home leaf's worker).

        Parameters
        ----------
        subs
            The new subscriptions (ids must not be live).
        knn
            Optional kNN matrices ``(ids, d2)`` of ``subs`` in ``O_init`` (row order of
            ``subs``), when the caller already has them; otherwise the server's index is queried.

        Returns
        -------
        int32 worker and int64 weight (what :meth:`lookup_weights` reports next) of each
        subscription.
        """
        ids = subs.ids.astype(np.int64)
        if ids.shape[0] == 0:
            return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int64)
        if has_duplicates(ids):
            raise ValueError("assign got the same subscription id twice")
        live, _ = self.lookup_weights(ids)
        if np.any(live >= 0):
            dup = ids[live >= 0][:5].tolist()
            raise ValueError(f"subscriptions already live: {dup}")
        if self.method is Method.PS2:
            weights, _ = self.estimate_weights(subs)
            workers = self._ps2_workers(subs)
        else:
            if self.new_cost == "live":
                # A new subscription starts with an empty result: its ball is the whole space.
                weights = self.ball_weights(subs, np.full(ids.shape[0], np.inf))
            else:
                weights, _ = self.estimate_weights(subs, knn=knn)
            workers, self._load = assign_in_order(
                weights, np.arange(ids.shape[0]), self.m, initial_loads=self._load
            )
        weights = np.asarray(weights, dtype=np.int64)
        self._book.add(ids, workers, weights, subs.x, subs.y, subs.keywords)
        return workers, weights

    def _ps2_workers(self, subs: Subscriptions) -> Int32Array:
        """docs/design.md §2.5: in input order, each to ``argmin C(w)`` (lowest id on ties), or to
        its home leaf's worker under ``ps2_new="route"``; ``C(w) += β`` either way."""
        n = len(subs)
        beta = self._ps2_beta
        if self.ps2_new == "argmin":
            workers, self._load = assign_in_order(
                np.full(n, beta, dtype=np.int64), np.arange(n), self.m, initial_loads=self._load
            )
            return workers
        ss = self.plan.subsets
        home = route_home(ss, self.space, subs.x, subs.y, subs.keywords)
        # (A PS²Stream plan always has a leaf: the root at least.)
        routed = np.where(home >= 0, ss.worker[np.maximum(home, 0)], -1)
        workers = np.empty(n, dtype=np.int32)
        for i, w in enumerate(routed.tolist()):
            # np.argmin returns the first minimum: the lowest worker id on ties.
            workers[i] = w if w >= 0 else int(np.argmin(self._load))
            self._load[workers[i]] += beta
        return workers

    def refresh(self, sub_ids: npt.ArrayLike, radius2: npt.ArrayLike) -> int:
        """Re-estimate live new subscriptions whose ball changed (``new_cost="live"``).

        Parameters
        ----------
        sub_ids
            Subscription ids; ids that are not live new subscriptions (initial ones, deleted
            ones, unknown ones) are ignored, and so is every id under ``new_cost="paper"``.
        radius2
            The current squared radius of each one's ball (``inf`` while it has fewer than
            ``k`` results).

        Each named subscription's cost becomes :meth:`ball_weights` of its current ball and its
        worker's ``C(w)`` moves by the difference; the worker does not change. Returns how many
        costs were recomputed: only balls that became finite or whose squared radius fell to
        ``refresh_shrink`` of the one last costed (``inf`` for a subscription never refreshed)
        are re-costed; the others keep their cost until they shrink that far. KOP, whose Eq. 1
        ignores the ball, and PS²Stream, which counts, always give 0. Deterministic; the order
        of ``sub_ids`` is irrelevant.
        """
        ids = np.atleast_1d(np.asarray(sub_ids, dtype=np.int64))
        r2 = np.broadcast_to(np.asarray(radius2, dtype=np.float64), ids.shape)
        if ids.shape[0] != r2.shape[0]:
            raise ValueError("refresh needs one radius² per subscription id")
        if self.new_cost != "live" or not len(self._book) or self.method in (Method.KOP, Method.PS2):
            return 0  # (Eq. 1 and PS²Stream's counts do not depend on the ball)
        # Only balls that became finite or shrank enough since they were last costed. Most
        # changed balls belong to initial subscriptions, which are never re-costed.
        book = self._book
        pick_in = pick_recosts if self._compiled() else pick_recosts_numpy
        repeated, pick, at = pick_in(book, ids, np.ascontiguousarray(r2), self.refresh_shrink)
        if repeated:
            raise ValueError("refresh got the same subscription id twice")
        if not pick.shape[0]:
            return 0
        r = r2[pick]
        new_w = self._ball_weights(book.x, book.y, book.keywords, at, r)
        book.costed_r2[at] = r
        # Integer loads: the order of the additions does not matter.
        np.add.at(self._load, book.worker[at], new_w - book.weight[at])
        book.weight[at] = new_w
        return int(pick.shape[0])

    def delete(self, sub_ids: npt.ArrayLike, *, missing: str = "raise") -> Int32Array:
        """Forget subscriptions and subtract their costs from their workers' ``C(w)``.

        Parameters
        ----------
        sub_ids
            Ids of live subscriptions.
        missing
            ``"raise"`` (default): a :class:`KeyError` for an id that is not live, before any
            change; ``"ignore"``: skip such ids (their worker is reported as ``-1``).

        Returns
        -------
        int32 worker each subscription was removed from.
        """
        if missing not in ("raise", "ignore"):
            raise ValueError("missing must be 'raise' or 'ignore'")
        ids = np.atleast_1d(np.asarray(sub_ids, dtype=np.int64))
        if has_duplicates(ids):
            raise ValueError("delete got the same subscription id twice")
        rows, workers, weights = self._lookup(ids)
        if missing == "raise" and np.any(workers < 0):
            raise KeyError(f"subscriptions not live: {ids[workers < 0][:5].tolist()}")
        found = workers >= 0
        np.subtract.at(self._load, workers[found], weights[found])
        self._alive[rows[rows >= 0]] = False
        self._book.remove(ids[found & (rows < 0)])
        return workers
