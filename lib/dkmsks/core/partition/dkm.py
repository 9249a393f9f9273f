"""DkM-SKS partitioning: cost model Eq. 4–6, Algorithm 2 (vectorised) and Algorithm 3.

How this maps to Algorithm 2
----------------------------
Algorithm 2 keeps a collection of subsets sorted by cost, repeatedly pops the most expensive
one and replaces it by the four subsets of its better split, until there are ``γ1·m`` subsets.
Two facts make that a level-synchronous array computation (docs/design.md §3 fact 3):

1. *Costs are monotone down the tree.* A child holds a subset of its parent's subscriptions
   and its balls' MBR ``R`` lies inside the parent's, so ``C(child) <= C(parent)`` (Eq. 4–6).
   With the total order ``key = (-C(S'), depth, path)`` (path = the child indices from the
   root; quadrants ``0=SW,1=SE,2=NW,3=NE``, hybrid groups ``0..3``) a child always comes after
   its parent, so the sequence of subsets Algorithm 2 pops is exactly the nodes of the
   (fully expanded) partition tree in ascending key order, and the set it splits is the
   shortest key-ordered prefix whose count ``1 + Σ (children - 1)`` reaches ``γ1·m`` (or every
   splittable node when that count is never reached). A split never depends on anything but
   the subset itself, so each node's children are the same whenever it is split.
2. *A lower bound on the final key cut prunes the expansion.* The tree is built one depth at a
   time: every candidate node of depth ``d`` is split at once with array operations (below).
   While ``1 + Σ gains`` over all split nodes is below ``γ1·m`` every splittable node is a
   candidate. Once it reaches ``γ1·m``, sorting the split nodes by key gives a cut key ``κ``
   where the count reaches the target; the true cut can only be earlier (unsplit nodes only add
   gains), so nodes with key after ``κ`` are never split and stop being candidates.
   After the last depth the exact prefix is taken over all split nodes; the nodes split
   speculatively beyond it are discarded together with their children.

The result is the same collection as the sequential algorithm with the key above as its
(deterministic) tie-break; ``tests/unit/test_partition_dkm.py`` checks this against a plain
one-subset-at-a-time implementation. At paper scale with ``|S| < γ1·m`` (1M subscriptions,
2M target) the target is unreachable and the whole tree is built, one array pass per depth.

One depth, for all its candidate nodes at once
----------------------------------------------
- *Space-only-Partition*: quadrant of each subscription (centre of its node's region); a
  stable sort by ``node*4 + quadrant`` makes every child a contiguous run; child MBRs come from
  ``np.minimum.reduceat`` / ``np.maximum.reduceat`` over the ball boxes; per-subscription costs
  (Eq. 5) from one batched ``count_keyword_in_rects`` call over the distinct
  (child, keyword) pairs; ``C(S_r)`` (Eq. 6) and ``C_s`` by ``np.add.reduceat``.
- *Hybrid-Partition* (nodes with ``|S'| <= γ2``): subscriptions sorted by (node, ``C(s)``
  desc, input order); the greedy of the paper runs as ``γ2`` vectorised steps, step ``t``
  placing the ``t``-th subscription of every node into its least-loaded group (``argmin`` over
  a ``[nodes, 4]`` load array, lower group on ties). Child MBRs and costs as above; ``C_h``.
- Space-only is chosen if ``C_s < C_h`` (Algorithm 2), hybrid otherwise; nodes larger than
  ``γ2`` always split space-only.

Decisions the paper leaves open (docs/design.md §2)
-------------------------------------------
- The root's region is the data space, a quadrant child's region its quadrant, a hybrid
  child's region its parent's region. Empty quadrants/groups are dropped.
- A subset of one subscription, or of subscriptions sharing one location, is a leaf.
- A split that makes no progress — a single non-empty quadrant whose region equals the parent's
  (the centre rounds onto an edge) or a single non-empty hybrid group (all costs zero) — is not
  available; a node with no available split stays a leaf.
- Subscription locations outside the data space are clamped to it for quadrant membership.
- Costs are integer weights ``C · |O_init|`` so ``C_s < C_h`` and all ties are exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from dkmsks.core.model import Float64Array, Int64Array, Rect, Subscriptions
from dkmsks.core.partition._common import (
    StatsLike,
    ball_boxes,
    check_int_param,
    clamp_points,
    keyword_rect_weights,
    mbr_by_group,
    quadrant_of,
    quadrant_rects,
    run_starts,
)
from dkmsks.core.partition.greedy import algorithm3
from dkmsks.core.partition.plan import Method, PartitionPlan, SplitKind, SubsetTable

__all__ = ["dkm_partition", "dkm_subsets"]

BoolArray = npt.NDArray[np.bool_]


@dataclass
class _Level:
    """All nodes of one depth, in path order (rank = row index)."""

    weight: Int64Array  # C(S') · |O_init|
    parent: Int64Array  # row of the parent in the previous level (-1 for the root)
    kind: npt.NDArray[np.int8]
    region: Float64Array  # [n, 4]
    rect: Float64Array  # [n, 4]  R
    size: Int64Array
    splittable: BoolArray  # >= 2 subscriptions, not all co-located
    start: Int64Array  # [n + 1] offsets into rows / sub_w
    rows: npt.NDArray[np.int32]  # subscription indices grouped by node
    sub_w: Int64Array  # C(s) · |O_init| of each row under its node's R (Eq. 5)
    expanded: BoolArray  # a split was computed for this node
    dead: BoolArray  # expanded, but no split makes progress
    n_children: Int64Array


@dataclass
class _Children:
    """The children of a batch of nodes split one way (quadrants or hybrid groups), sorted by
    (parent, child index); each child is a run of ``rows`` beginning at ``start``."""

    rows: Int64Array  # subscription indices grouped by child
    sub_w: Int64Array  # C(s) · |O_init| of each row under its child's R (Eq. 5)
    start: Int64Array  # first row of each child
    size: Int64Array
    rect: Float64Array  # [n, 4]  R
    region: Float64Array  # [n, 4]
    colocated: BoolArray  # every subscription of the child at one location
    weight: Int64Array  # C(child) · |O_init|
    parent: Int64Array  # the parent's position in the batch
    child: Int64Array  # quadrant (0=SW, 1=SE, 2=NW, 3=NE) or hybrid group (0..3)

    def per_parent(self, n_parents: int) -> tuple[Int64Array, Int64Array]:
        """Children count and summed cost (``C_s`` or ``C_h``) of each of ``n_parents`` parents."""
        nch = np.bincount(self.parent, minlength=n_parents).astype(np.int64)
        total = np.zeros(n_parents, dtype=np.int64)
        if self.parent.shape[0]:
            ps = run_starts(self.parent)
            total[self.parent[ps]] = np.add.reduceat(self.weight, ps)
        return nch, total


@dataclass
class _Split:
    """One way of splitting every node of a batch (Space-only- or Hybrid-Partition): the
    children, and per node whether the split is available (it makes progress), how many
    children it makes and their summed cost."""

    children: _Children
    available: BoolArray
    n_children: Int64Array
    cost: Int64Array  # C_s or C_h, times |O_init|


def _gather(start: Int64Array, sizes: Int64Array) -> Int64Array:
    """Concatenated index ranges ``[start[i], start[i] + sizes[i])``."""
    total = int(sizes.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    ptr = np.zeros(sizes.shape[0] + 1, dtype=np.int64)
    np.cumsum(sizes, out=ptr[1:])
    return np.repeat(start - ptr[:-1], sizes) + np.arange(total, dtype=np.int64)


class _Builder:
    """Algorithm 2 state: subscription columns and the per-depth node tables."""

    def __init__(self, stats: StatsLike, radius2: Float64Array, subs: Subscriptions,
                 space: Rect, gamma2: int) -> None:
        self.stats = stats
        self.kws = subs.keywords
        self.px, self.py = clamp_points(subs.x, subs.y, space)
        self.bx0, self.by0, self.bx1, self.by1 = ball_boxes(subs.x, subs.y, radius2, space)
        self.gamma2 = gamma2
        self.space = space

    def _children(self, rows: Int64Array, key: Int64Array, parent_region: Float64Array, *,
                  quadrants: bool) -> _Children:
        """Group ``rows`` by ``key = parent*4 + child`` into children with R, costs and flags;
        a child's region is its quadrant of its parent's region (``quadrants``), else the
        parent's region."""
        order = np.argsort(key, kind="stable")
        rows = rows[order]
        key = key[order]
        st = run_starts(key)
        size = np.diff(np.append(st, rows.shape[0])).astype(np.int64)
        rect = mbr_by_group(st, self.bx0[rows], self.by0[rows], self.bx1[rows], self.by1[rows])
        px, py = self.px[rows], self.py[rows]
        colocated = (np.minimum.reduceat(px, st) == np.maximum.reduceat(px, st)) & (
            np.minimum.reduceat(py, st) == np.maximum.reduceat(py, st)
        )
        group = np.repeat(np.arange(st.shape[0], dtype=np.int64), size)
        sub_w = keyword_rect_weights(self.stats, self.kws, rows, group, rect)
        weight = np.add.reduceat(sub_w, st) if st.shape[0] else np.zeros(0, dtype=np.int64)
        parent, child = key[st] // 4, key[st] % 4
        region = quadrant_rects(parent_region[parent], child) if quadrants else parent_region[parent]
        return _Children(rows=rows, sub_w=sub_w, start=st, size=size, rect=rect, region=region,
                         colocated=colocated, weight=weight.astype(np.int64), parent=parent, child=child)

    def root(self, n: int) -> _Level:
        """Depth 0: one node holding every subscription, whose region is the data space."""
        region = np.array([self.space.as_tuple()], dtype=np.float64)
        ch = self._children(np.arange(n, dtype=np.int64), np.zeros(n, dtype=np.int64), region, quadrants=False)
        return _Level(
            weight=ch.weight, parent=np.array([-1]), kind=np.array([SplitKind.ROOT], np.int8),
            region=region, rect=ch.rect, size=ch.size, splittable=(ch.size >= 2) & ~ch.colocated,
            start=np.array([0, n], dtype=np.int64), rows=ch.rows.astype(np.int32),
            sub_w=ch.sub_w, expanded=np.zeros(1, bool), dead=np.zeros(1, bool),
            n_children=np.zeros(1, dtype=np.int64),
        )

    def expand(self, lvl: _Level, cand: Int64Array) -> _Level:
        """Split every node ``cand`` of ``lvl`` at once, both ways, and keep the cheaper
        available split of each (Algorithm 2: hybrid unless space-only costs less); records
        the outcome in ``lvl`` and returns the next depth's nodes."""
        sizes = lvl.size[cand]
        idx = _gather(lvl.start[cand], sizes)
        rows = lvl.rows[idx].astype(np.int64)
        node = np.repeat(np.arange(cand.shape[0], dtype=np.int64), sizes)
        region = lvl.region[cand]
        space = self._space_split(region, rows, node)
        hybrid = self._hybrid_split(region, rows, lvl.sub_w[idx], node, sizes <= self.gamma2)

        use_h = np.zeros(cand.shape[0], dtype=bool) if hybrid is None else (
            hybrid.available & (~space.available | (space.cost >= hybrid.cost)))
        use_s = space.available & ~use_h
        lvl.expanded[cand] = True
        lvl.dead[cand] = ~use_h & ~use_s
        nch = np.where(use_s, space.n_children, 0)
        chosen = [(space.children, use_s, SplitKind.SPACE)]
        if hybrid is not None:
            nch = np.where(use_h, hybrid.n_children, nch)
            chosen.append((hybrid.children, use_h, SplitKind.HYBRID))
        lvl.n_children[cand] = nch
        return _next_level(cand, chosen)

    def _space_split(self, region: Float64Array, rows: Int64Array, node: Int64Array) -> _Split:
        """Space-only-Partition of the nodes of ``region`` (``rows``: their subscriptions,
        ``node``: the node of each): by the quadrant of its node's region holding each
        location. Not available for a node whose one non-empty quadrant is its whole region
        (the centre rounds onto an edge)."""
        cx = (region[:, 0] + region[:, 2]) * 0.5
        cy = (region[:, 1] + region[:, 3]) * 0.5
        q = quadrant_of(self.px[rows], self.py[rows], cx[node], cy[node])
        ch = self._children(rows, node * 4 + q, region, quadrants=True)
        nch, cost = ch.per_parent(region.shape[0])
        available = nch >= 2
        single = np.flatnonzero(nch == 1)
        if single.shape[0]:
            # Children are sorted by parent, so a lone child sits at its parent's position.
            first = np.searchsorted(ch.parent, single)
            available[single] = ~np.all(ch.region[first] == region[single], axis=1)
        return _Split(ch, available, nch, cost)

    def _hybrid_split(self, region: Float64Array, rows: Int64Array, sub_w: Int64Array, node: Int64Array,
                      small: BoolArray) -> _Split | None:
        """Hybrid-Partition of the ``small`` nodes (``|S'| <= γ2``; ``sub_w``: each row's
        ``C(s)``): the paper's greedy into 4 groups, one vectorised step per rank. ``None`` when
        no node is small; not available for a node that fills one group only."""
        if not small.any():
            return None
        sel = small[node]
        h_rows, h_w, h_par = rows[sel], sub_w[sel], node[sel]
        # Paper: sort S' by C(s) descending (ties: input order), greedy into 4 groups.
        order = np.lexsort((h_rows, -h_w, h_par))
        h_rows, h_w, h_par = h_rows[order], h_w[order], h_par[order]
        hst = run_starts(h_par)
        hsize = np.diff(np.append(hst, h_par.shape[0]))
        rank = np.arange(h_par.shape[0], dtype=np.int64) - np.repeat(hst, hsize)
        loads = np.zeros((region.shape[0], 4), dtype=np.int64)
        group = np.empty(h_par.shape[0], dtype=np.int64)
        by_rank = np.argsort(rank, kind="stable")
        rst = run_starts(rank[by_rank])
        bounds = np.append(rst, by_rank.shape[0])
        for t in range(rst.shape[0]):
            # Step t places the t-th subscription of every hybrid node: one row per node,
            # so the fancy-indexed += below never sees a duplicate index.
            ix = by_rank[bounds[t]:bounds[t + 1]]
            p = h_par[ix]
            g = np.argmin(loads[p], axis=1)
            loads[p, g] += h_w[ix]
            group[ix] = g
        ch = self._children(h_rows, h_par * 4 + group, region, quadrants=False)
        nch, cost = ch.per_parent(region.shape[0])
        return _Split(ch, small & (nch >= 2), nch, cost)


def _next_level(cand: Int64Array, chosen: list[tuple[_Children, BoolArray, SplitKind]]) -> _Level:
    """The next depth: the children of the nodes ``cand`` by the split each chose (``chosen``:
    per way of splitting, its children, whether each node chose it, and its kind), in path
    order (parent rank, child index)."""
    parts = [(ch, np.flatnonzero(use[ch.parent]), kind) for ch, use, kind in chosen]
    offsets = np.cumsum([0, *(ch.rows.shape[0] for ch, _, _ in parts)])
    order = np.argsort(np.concatenate([ch.parent[k] * 4 + ch.child[k] for ch, k, _ in parts]), kind="stable")

    def in_order(columns: list[np.ndarray]) -> np.ndarray:
        """One column of the chosen children, concatenated in path order."""
        return np.concatenate(columns)[order]

    size = in_order([ch.size[k] for ch, k, _ in parts])
    colocated = in_order([ch.colocated[k] for ch, k, _ in parts])
    take = _gather(in_order([ch.start[k] + offset for (ch, k, _), offset in zip(parts, offsets[:-1], strict=True)]),
                   size)
    rows = np.concatenate([ch.rows for ch, _, _ in parts])[take]
    sub_w = np.concatenate([ch.sub_w for ch, _, _ in parts])[take]
    n_new = order.shape[0]
    start = np.zeros(n_new + 1, dtype=np.int64)
    np.cumsum(size, out=start[1:])
    return _Level(
        weight=in_order([ch.weight[k] for ch, k, _ in parts]),
        parent=in_order([cand[ch.parent[k]] for ch, k, _ in parts]),
        kind=in_order([np.full(k.shape[0], kind, dtype=np.int8) for _, k, kind in parts]),
        region=in_order([ch.region[k] for ch, k, _ in parts]).reshape(-1, 4),
        rect=in_order([ch.rect[k] for ch, k, _ in parts]).reshape(-1, 4),
        size=size, splittable=(size >= 2) & ~colocated,
        start=start, rows=rows.astype(np.int32), sub_w=sub_w,
        expanded=np.zeros(n_new, bool), dead=np.zeros(n_new, bool),
        n_children=np.zeros(n_new, dtype=np.int64),
    )


def _split_prefix(levels: list[_Level], target: int) -> tuple[list[BoolArray], tuple | None]:
    """Which expanded nodes Algorithm 2 splits, and the key where the count reaches target.

    Returns per-level split flags and the cut key ``(-weight, depth, rank)`` (``None`` when the
    target is not reached by splitting every expanded node).
    """
    w, d, r, gain = [], [], [], []
    for depth, lvl in enumerate(levels):
        e = np.flatnonzero(lvl.expanded & ~lvl.dead)
        w.append(lvl.weight[e])
        d.append(np.full(e.shape[0], depth, dtype=np.int64))
        r.append(e)
        gain.append(lvl.n_children[e] - 1)
    W, D, R, G = (np.concatenate(v) for v in (w, d, r, gain))
    flags = [np.zeros(lvl.weight.shape[0], dtype=bool) for lvl in levels]
    if 1 + int(G.sum()) < target:
        for f, lvl in zip(flags, levels, strict=True):
            f[:] = lvl.expanded & ~lvl.dead
        return flags, None
    order = np.lexsort((R, D, -W))
    count = 1 + np.cumsum(G[order])
    j = int(np.argmax(count >= target))  # the pop that makes |S| reach γ1·m
    chosen = order[: j + 1]
    for depth in np.unique(D[chosen]):
        sel = chosen[D[chosen] == depth]
        flags[int(depth)][R[sel]] = True
    cut = order[j]
    return flags, (-int(W[cut]), int(D[cut]), int(R[cut]))


def dkm_subsets(
    stats: StatsLike,
    radius2: Float64Array,
    subs: Subscriptions,
    space: Rect,
    *,
    target: int,
    gamma2: int = 20,
) -> tuple[SubsetTable, Int64Array, Int64Array, dict[str, Any]]:
    """Algorithm 2: the subsets of ``subs`` (see the module docstring for the mapping).

    Returns
    -------
    subsets, sub_subset, sub_weight, info
        The subsets ordered by (cost desc, depth, path) — Algorithm 3's order — with
        ``worker = -1``; the subset row and the Eq. 5 weight of each subscription; diagnostics.
    """
    n = len(subs)
    b = _Builder(stats, np.asarray(radius2, dtype=np.float64), subs, space, gamma2)
    levels = [b.root(n)]
    cut: tuple | None = None
    while target > 1:
        lvl = levels[-1]
        depth = len(levels) - 1
        ok = lvl.splittable.copy()
        if cut is not None:
            # Only nodes with key < cut can still be popped before |S| reaches γ1·m.
            cw, cd, cr = cut
            ranks = np.arange(lvl.weight.shape[0])
            before = (-lvl.weight < cw) | ((-lvl.weight == cw) & (
                (depth < cd) | ((depth == cd) & (ranks < cr))))
            ok &= before
        cand = np.flatnonzero(ok)
        if cand.shape[0] == 0:
            break
        levels.append(b.expand(lvl, cand))
        total = 1 + sum(int((lv.n_children[lv.expanded & ~lv.dead] - 1).sum()) for lv in levels)
        if total >= target:
            _, cut = _split_prefix(levels, target)

    split, cut = _split_prefix(levels, target) if target > 1 else (
        [np.zeros(1, dtype=bool)], None)
    # Final subsets: nodes whose parent is split (root: always in the tree) but not split.
    pick_lvl, pick_idx = [], []
    in_tree = np.ones(1, dtype=bool)
    for depth, lvl in enumerate(levels):
        if depth:
            in_tree = split[depth - 1][lvl.parent]
        leaf = np.flatnonzero(in_tree & ~split[depth][: lvl.weight.shape[0]])
        pick_lvl.append(np.full(leaf.shape[0], depth, dtype=np.int64))
        pick_idx.append(leaf)
    L = np.concatenate(pick_lvl)
    IX = np.concatenate(pick_idx)
    W = np.concatenate([levels[d].weight[i] for d, i in enumerate(pick_idx)])
    order = np.lexsort((IX, L, -W))  # Algorithm 3 order: cost desc, then depth, then path
    L, IX, W = L[order], IX[order], W[order]
    ns = L.shape[0]
    rect = np.empty((ns, 4))
    region = np.empty((ns, 4))
    size = np.empty(ns, dtype=np.int64)
    kind = np.empty(ns, dtype=np.int8)
    sub_subset = np.full(n, -1, dtype=np.int64)
    sub_weight = np.zeros(n, dtype=np.int64)
    for depth, lvl in enumerate(levels):
        pos = np.flatnonzero(depth == L)
        if pos.shape[0] == 0:
            continue
        nodes = IX[pos]
        rect[pos] = lvl.rect[nodes]
        region[pos] = lvl.region[nodes]
        size[pos] = lvl.size[nodes]
        kind[pos] = lvl.kind[nodes]
        take = _gather(lvl.start[nodes], lvl.size[nodes])
        rows = lvl.rows[take].astype(np.int64)
        sub_subset[rows] = np.repeat(pos, lvl.size[nodes])
        sub_weight[rows] = lvl.sub_w[take]
    subsets = SubsetTable(
        rect=rect, region=region, weight=W, size=size,
        worker=np.full(ns, -1, dtype=np.int32), kind=kind, depth=L.astype(np.int32),
    )
    info = {
        "target": int(target),
        "splits": int(sum(int(f.sum()) for f in split)),
        "subsets": ns,
        "depth": len(levels) - 1,
        "nodes_built": int(sum(lv.weight.shape[0] for lv in levels)),
        "target_reached": cut is not None,
    }
    return subsets, sub_subset, sub_weight, info


def dkm_partition(
    stats: StatsLike,
    radius2: Float64Array,
    subs: Subscriptions,
    space: Rect,
    *,
    m: int,
    gamma1: int = 100_000,
    gamma2: int = 20,
) -> PartitionPlan:
    """DkM-SKS partition: Algorithm 2 (subsets) then Algorithm 3 (assignment).

    Costs: ``P(R,λ) = |O_{R,λ}| / |O_init|`` (Eq. 4), ``C(s) = Σ_{λ∈s.ψ} P(R,λ)`` with ``R``
    the MBR of the balls of the subset holding ``s`` (Eq. 5), ``C(S_r) = Σ C(s)`` (Eq. 6).

    Parameters
    ----------
    stats
        :class:`~dkmsks.core.stats.ObjectStatistics` of ``O_init``.
    radius2
        Ball radius² of each subscription in ``O_init`` (``inf`` while fewer than k results).
    subs, space
        The initial subscriptions and the data space.
    m
        Number of workers (``>= 1``).
    gamma1
        Algorithm 2 stops at ``γ1·m`` subsets (``>= 1``) or when nothing can be split.
    gamma2
        Subsets with at most ``γ2`` subscriptions also try Hybrid-Partition (``>= 0``).
    """
    m = check_int_param("m", m)
    gamma1 = check_int_param("gamma1", gamma1)
    gamma2 = check_int_param("gamma2", gamma2, minimum=0)
    n = len(subs)
    if n == 0:
        return PartitionPlan(
            method=Method.DKM, m=m, params={"gamma1": gamma1, "gamma2": gamma2},
            space=space, n_objects=int(stats.n_objects), sub_ids=subs.ids,
            worker=np.zeros(0, np.int32), weight=np.zeros(0, np.int64),
            subset=np.zeros(0, np.int64), load_weight=np.zeros(m, np.int64),
        )
    subsets, sub_subset, sub_weight, info = dkm_subsets(
        stats, radius2, subs, space, target=gamma1 * m, gamma2=gamma2
    )
    workers, loads = algorithm3(sub_weight, sub_subset, subsets.weight, m)
    return PartitionPlan(
        method=Method.DKM,
        m=m,
        params={"gamma1": gamma1, "gamma2": gamma2, **info},
        space=space,
        n_objects=int(stats.n_objects),
        sub_ids=subs.ids,
        worker=workers,
        weight=sub_weight,
        subset=sub_subset,
        load_weight=loads,
        subsets=subsets,
    )
