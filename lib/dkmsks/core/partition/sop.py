"""SOP: space-oriented partition (paper §3.2, Eq. 2–3, quadtree, Algorithm 1 over regions)."""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np

from dkmsks.core.model import Float64Array, Int64Array, Rect, Subscriptions
from dkmsks.core.partition._common import (
    StatsLike,
    ball_boxes,
    check_int_param,
    clamp_points,
    quadrant_of,
)
from dkmsks.core.partition.greedy import algorithm1
from dkmsks.core.partition.plan import Method, PartitionPlan, SplitKind, SubsetTable

__all__ = ["sop_partition"]


def sop_partition(
    stats: StatsLike,
    radius2: Float64Array,
    subs: Subscriptions,
    space: Rect,
    *,
    m: int,
    theta: int = 20,
) -> PartitionPlan:
    """Space-oriented partition.

    The data space is split like a quadtree: starting from the whole space, the region with
    the largest ``C(S_r) = P(R) · |S_r|`` (Eq. 3, ``P(R) = |O_R| / |O_init|`` of Eq. 2, ``R``
    the MBR of the balls of ``S_r`` clipped to the data space) is cut into 4 equal quadrants,
    until there are ``n >= θ·m`` regions. Details the paper leaves open:

    - a subscription belongs to the quadrant holding its location, with half-open quadrants
      ``[min, centre)`` / ``[centre, max]`` per axis (see
      :func:`~dkmsks.core.partition._common.quadrant_of`); locations outside the data space
      are clamped to it for membership only;
    - empty quadrants are dropped, so ``n`` counts non-empty regions;
    - a region of one subscription, or whose subscriptions share one location, is a leaf; so
      is one whose split cannot shrink it any more (floating-point exhaustion). Splitting
      stops early when no region can be split;
    - ties on ``C(S_r)`` go to the shallower region, then the one earlier in quadrant order.

    The regions are then assigned by Algorithm 1 (cost descending, least-loaded worker); each
    subscription goes to its region's worker and is charged ``P(R)`` of its region, so the
    worker loads are the sums of their regions' ``C(S_r)``.

    Parameters
    ----------
    stats
        :class:`~dkmsks.core.stats.ObjectStatistics` of ``O_init``.
    radius2
        Ball radius² of each subscription in ``O_init`` (``inf`` while fewer than k results).
    subs, space
        The initial subscriptions and the data space.
    m, theta
        Number of workers and the region factor θ (both ``>= 1``).
    """
    m = check_int_param("m", m)
    theta = check_int_param("theta", theta)
    n = len(subs)
    target = theta * m
    px, py = clamp_points(subs.x, subs.y, space)
    bx0, by0, bx1, by1 = ball_boxes(subs.x, subs.y, np.asarray(radius2, dtype=np.float64), space)

    def make_nodes(
        parts: list[Int64Array], regions: list[tuple[float, float, float, float]]
    ) -> list[dict[str, Any]]:
        """Nodes for the given row sets: R, co-location and ``|O_R|·|S_r|`` (one batched query)."""
        rects = np.array(
            [(bx0[r].min(), by0[r].min(), bx1[r].max(), by1[r].max()) for r in parts],
            dtype=np.float64,
        ).reshape(-1, 4)
        counts = np.asarray(
            stats.count_in_rects(rects[:, 0].copy(), rects[:, 1].copy(), rects[:, 2].copy(),
                                 rects[:, 3].copy()),
            dtype=np.int64,
        )
        out = []
        for i, rows in enumerate(parts):
            colocated = bool(
                px[rows].min() == px[rows].max() and py[rows].min() == py[rows].max()
            )
            out.append({
                "rows": rows,
                "region": regions[i],
                "rect": tuple(rects[i]),
                "count": int(counts[i]),
                "weight": int(counts[i]) * int(rows.shape[0]),
                "leaf": rows.shape[0] < 2 or colocated,
            })
        return out

    leaves: list[tuple[int, int, tuple[int, ...], dict[str, Any]]] = []
    heap: list[tuple[int, int, tuple[int, ...], dict[str, Any]]] = []
    if n:
        root = make_nodes([np.arange(n, dtype=np.int64)], [space.as_tuple()])[0]
        (leaves if root["leaf"] else heap).append((-root["weight"], 0, (), root))
    n_regions = len(heap) + len(leaves)
    splits = 0
    # Heap key (-C(S_r), depth, quadrant path): the most expensive region first, ties to the
    # shallower one, then quadrant order — a total, deterministic order (paths are unique).
    while heap and n_regions < target:
        negw, depth, path, node = heapq.heappop(heap)
        rows = node["rows"]
        x0, y0, x1, y1 = node["region"]
        cx, cy = (x0 + x1) * 0.5, (y0 + y1) * 0.5
        q = quadrant_of(px[rows], py[rows], cx, cy)
        parts, regions, qs = [], [], []
        for qi in range(4):
            sel = rows[q == qi]
            if sel.shape[0]:
                parts.append(sel)
                regions.append((
                    cx if qi & 1 else x0, cy if qi & 2 else y0,
                    x1 if qi & 1 else cx, y1 if qi & 2 else cy,
                ))
                qs.append(qi)
        if len(parts) == 1 and regions[0] == node["region"]:
            # The centre rounds onto an edge: the split cannot make progress. A leaf.
            leaves.append((negw, depth, path, node))
            continue
        splits += 1
        for qi, child in zip(qs, make_nodes(parts, regions), strict=True):
            entry = (-child["weight"], depth + 1, (*path, qi), child)
            if child["leaf"]:
                leaves.append(entry)
            else:
                heapq.heappush(heap, entry)
        n_regions += len(parts) - 1

    final = sorted(leaves + heap, key=lambda e: e[:3])
    n_sub = len(final)
    weights = np.array([e[3]["weight"] for e in final], dtype=np.int64)
    region_workers, loads = algorithm1(weights, m)
    sub_subset = np.full(n, -1, dtype=np.int64)
    sub_weight = np.zeros(n, dtype=np.int64)
    for i, e in enumerate(final):
        sub_subset[e[3]["rows"]] = i
        sub_weight[e[3]["rows"]] = e[3]["count"]
    subsets = SubsetTable(
        rect=np.array([e[3]["rect"] for e in final], dtype=np.float64).reshape(-1, 4),
        region=np.array([e[3]["region"] for e in final], dtype=np.float64).reshape(-1, 4),
        weight=weights,
        size=np.array([e[3]["rows"].shape[0] for e in final], dtype=np.int64),
        worker=region_workers,
        kind=np.array([SplitKind.ROOT if e[1] == 0 else SplitKind.SPACE for e in final],
                      dtype=np.int8),
        depth=np.array([e[1] for e in final], dtype=np.int32),
    )
    worker = region_workers[sub_subset] if n else np.zeros(0, dtype=np.int32)
    return PartitionPlan(
        method=Method.SOP,
        m=m,
        params={"theta": theta, "target": target, "splits": splits, "regions": n_sub},
        space=space,
        n_objects=int(stats.n_objects),
        sub_ids=subs.ids,
        worker=worker,
        weight=sub_weight,
        subset=sub_subset,
        load_weight=loads,
        subsets=subsets,
    )
