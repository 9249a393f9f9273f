"""Test helpers for the partitioners: brute-force statistics/kNN and plain reference algorithms.

Everything here is written the slow, obvious way (Python loops over subsets, full scans over
objects) and shares no code with :mod:`dkmsks.core.partition`, so the tests compare the
vectorised implementation against an independent account of the paper.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from dkmsks.core.model import Objects, Rect, Subscriptions


class BruteStats:
    """ObjectStatistics-compatible counts by full scans (closed rectangles)."""

    def __init__(self, objects: Objects) -> None:
        self.objects = objects
        self.n_objects = len(objects)
        self.x = objects.x
        self.y = objects.y
        self.kw_sets = [set(objects.keywords.row(i).tolist()) for i in range(len(objects))]

    @classmethod
    def build(cls, objects: Objects, n_keywords: int = 0) -> BruteStats:
        return cls(objects)

    def keyword_counts(self, kw):
        return np.array([sum(1 for s in self.kw_sets if int(k) in s) for k in np.atleast_1d(kw)],
                        dtype=np.int64)

    def _inside(self, x0, y0, x1, y1):
        return (self.x >= x0) & (self.x <= x1) & (self.y >= y0) & (self.y <= y1)

    def count_in_rects(self, xmin, ymin, xmax, ymax):
        return np.array([int(self._inside(a, b, c, d).sum())
                         for a, b, c, d in zip(xmin, ymin, xmax, ymax, strict=True)], dtype=np.int64)

    def count_keyword_in_rects(self, kw, xmin, ymin, xmax, ymax):
        out = []
        for k, a, b, c, d in zip(np.atleast_1d(kw), xmin, ymin, xmax, ymax, strict=True):
            ins = np.flatnonzero(self._inside(a, b, c, d))
            out.append(sum(1 for i in ins if int(k) in self.kw_sets[i]))
        return np.array(out, dtype=np.int64)


class BruteKnn:
    """StaticKnnIndex-compatible exact kNN by a full scan ((d², id) order)."""

    def __init__(self, objects: Objects) -> None:
        self.objects = objects
        self.kw_sets = [set(objects.keywords.row(i).tolist()) for i in range(len(objects))]

    def query(self, subs: Subscriptions, *, width: int | None = None):
        K = width or (int(subs.k.max()) if len(subs) else 1)
        ids = np.full((len(subs), K), -1, dtype=np.int64)
        d2 = np.full((len(subs), K), np.inf)
        o = self.objects
        for i in range(len(subs)):
            want = set(subs.keywords.row(i).tolist())
            cand = [j for j in range(len(o)) if self.kw_sets[j] & want]
            dd = [((o.x[j] - subs.x[i]) ** 2 + (o.y[j] - subs.y[i]) ** 2, int(o.ids[j])) for j in cand]
            dd.sort()
            for c, (d, oid) in enumerate(dd[: min(K, int(subs.k[i]))]):
                ids[i, c], d2[i, c] = oid, d
        return ids, d2


def random_world(rng: np.random.Generator, n_obj: int, n_sub: int, n_kw: int = 8, k_max: int = 4,
                 clustered: bool = False):
    """Random objects and subscriptions placed on objects (the paper's protocol, small)."""
    if clustered:
        centres = rng.uniform(0, 100, size=(4, 2))
        c = rng.integers(0, 4, n_obj)
        xy = centres[c] + rng.normal(0, 3, size=(n_obj, 2))
    else:
        xy = rng.uniform(0, 100, size=(n_obj, 2))
    kws = [sorted(set(rng.integers(0, n_kw, rng.integers(1, 4)).tolist())) for _ in range(n_obj)]
    objects = Objects.build(np.arange(n_obj) * 10 + 3, xy[:, 0], xy[:, 1], kws, np.zeros(n_obj))
    pick = rng.integers(0, n_obj, n_sub)
    skw = []
    for p in pick:
        base = kws[p]
        skw.append(sorted(rng.choice(base, size=rng.integers(1, len(base) + 1), replace=False).tolist()))
    subs = Subscriptions.build(np.arange(n_sub) + 1000, xy[pick, 0], xy[pick, 1], skw,
                               rng.integers(1, k_max + 1, n_sub), np.zeros(n_sub))
    return objects, subs


def space_of(objects: Objects, subs: Subscriptions) -> Rect:
    xs = np.concatenate([objects.x, subs.x])
    ys = np.concatenate([objects.y, subs.y])
    return Rect(float(xs.min()), float(ys.min()), float(xs.max()), float(ys.max()))


# ---- plain reference implementations -----------------------------------------------------

def ball_box(x: float, y: float, r2: float, space: Rect) -> tuple[float, float, float, float]:
    """The ball's box, edges one ulp outwards, clipped to the space (infinite → the space)."""
    if not math.isfinite(r2):
        return space.as_tuple()
    r = math.sqrt(r2)
    lo_x, hi_x = math.nextafter(x - r, -math.inf), math.nextafter(x + r, math.inf)
    lo_y, hi_y = math.nextafter(y - r, -math.inf), math.nextafter(y + r, math.inf)
    return (min(max(lo_x, space.xmin), space.xmax), min(max(lo_y, space.ymin), space.ymax),
            min(max(hi_x, space.xmin), space.xmax), min(max(hi_y, space.ymin), space.ymax))


def radius2_of(knn_d2: np.ndarray, subs: Subscriptions) -> list[float]:
    return [float(knn_d2[i, int(subs.k[i]) - 1]) for i in range(len(subs))]


def reference_dkm(stats, r2, subs: Subscriptions, space: Rect, target: int, gamma2: int):
    """Algorithm 2 one subset at a time with a heap on (-C, depth, path).

    Returns a list of leaves ``(weight, depth, path, rows, rect, region, kind, sub_weights)``
    and the per-subscription weights, computed with per-row brute-force counting.
    """
    boxes = [ball_box(float(subs.x[i]), float(subs.y[i]), r2[i], space) for i in range(len(subs))]
    px = np.clip(subs.x, space.xmin, space.xmax)
    py = np.clip(subs.y, space.ymin, space.ymax)

    def mbr(rows):
        return (min(boxes[i][0] for i in rows), min(boxes[i][1] for i in rows),
                max(boxes[i][2] for i in rows), max(boxes[i][3] for i in rows))

    def sub_w(i, R):
        kws = subs.keywords.row(i).tolist()
        return int(sum(stats.count_keyword_in_rects([k], [R[0]], [R[1]], [R[2]], [R[3]])[0]
                       for k in kws))

    def node(rows, region, kind, depth, path):
        R = mbr(rows)
        ws = {i: sub_w(i, R) for i in rows}
        coloc = len({(px[i], py[i]) for i in rows}) == 1
        return {"rows": rows, "R": R, "region": region, "kind": kind, "depth": depth,
                "path": path, "ws": ws, "w": sum(ws.values()),
                "splittable": len(rows) >= 2 and not coloc}

    def space_split(nd):
        x0, y0, x1, y1 = nd["region"]
        cx, cy = (x0 + x1) * 0.5, (y0 + y1) * 0.5
        kids = []
        for q in range(4):
            rows = [i for i in nd["rows"] if (1 if px[i] >= cx else 0) + (2 if py[i] >= cy else 0) == q]
            if rows:
                reg = (cx if q & 1 else x0, cy if q & 2 else y0, x1 if q & 1 else cx, y1 if q & 2 else cy)
                kids.append(node(rows, reg, 1, nd["depth"] + 1, nd["path"] + (q,)))
        ok = len(kids) >= 2 or kids[0]["region"] != nd["region"]
        return kids, ok

    def hybrid_split(nd):
        order = sorted(nd["rows"], key=lambda i: (-nd["ws"][i], i))
        loads = [0, 0, 0, 0]
        groups: list[list[int]] = [[], [], [], []]
        for i in order:
            g = min(range(4), key=lambda j: (loads[j], j))
            loads[g] += nd["ws"][i]
            groups[g].append(i)
        kids = [node(sorted(groups[g]), nd["region"], 2, nd["depth"] + 1, nd["path"] + (g,))
                for g in range(4) if groups[g]]
        return kids, len(kids) >= 2

    root = node(list(range(len(subs))), space.as_tuple(), 0, 0, ())
    heap = [(-root["w"], 0, (), root)] if root["splittable"] else []
    leaves = [] if root["splittable"] else [root]
    count = 1
    while heap and count < target:
        _, _, _, nd = heapq.heappop(heap)
        s_kids, s_ok = space_split(nd)
        chosen = s_kids if s_ok else None
        if len(nd["rows"]) <= gamma2:
            h_kids, h_ok = hybrid_split(nd)
            if h_ok and (not s_ok or sum(k["w"] for k in s_kids) >= sum(k["w"] for k in h_kids)):
                chosen = h_kids
        if chosen is None:
            leaves.append(nd)
            continue
        count += len(chosen) - 1
        for k in chosen:
            if k["splittable"]:
                heapq.heappush(heap, (-k["w"], k["depth"], k["path"], k))
            else:
                leaves.append(k)
    leaves.extend(e[3] for e in heap)
    leaves.sort(key=lambda nd: (-nd["w"], nd["depth"], nd["path"]))
    return leaves


def reference_greedy(items: list[tuple[int, int]], m: int) -> tuple[dict[int, int], list[int]]:
    """Least-loaded assignment of ``(item id, weight)`` in the given order (linear scan)."""
    loads = [0] * m
    out = {}
    for item, w in items:
        best = min(range(m), key=lambda j: (loads[j], j))
        out[item] = best
        loads[best] += w
    return out, loads
