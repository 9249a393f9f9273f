"""The DkM-SKS grid's kernels (paper §4.3; :class:`~dkmsks.core.worker_index.GridIndex`): the
postings of a ball (the finest pyramid level where it spans few cells, and the outside lattice
for a ball reaching out of the data space) and an object's probe keys."""

from __future__ import annotations

from typing import Any

import numpy as np

from dkmsks.core.jit import _jit
from dkmsks.core.kernel.common import _grow
from dkmsks.core.kernel.probe import SortedProbe, _bits, _stable_by
from dkmsks.core.model import Int64Array

__all__ = ["grid_entries", "grid_probe", "grid_reindex", "grid_sorted_probe"]

@_jit
def _first_level(a0: int, a1: int, b0: int, b1: int, levels: Any, caps: Any, fallback: int) -> int:
    """First of ``levels`` where the cell range ``[a0, a1] × [b0, b1]`` spans at most
    ``caps[i]`` cells at ``levels[i]`` (each side capped first, so lattice-wide ranges cannot
    overflow)."""
    for i in range(levels.shape[0]):
        lv = levels[i]
        most = caps[i]
        nx = min((a1 >> lv) - (a0 >> lv) + 1, most + 1)
        ny = min((b1 >> lv) - (b0 >> lv) + 1, most + 1)
        if nx * ny <= most:
            return lv
    return fallback


@_jit
def _lattice(v: float, origin: float, width: float, limit: int) -> Any:
    """Fine lattice index of ``v`` (``GridIndex.cell_x``): floor, clamped to ``±limit``."""
    c = np.floor((v - origin) / width)
    if c < -limit:
        c = -limit
    elif c > limit:
        c = limit
    return np.int64(c)


@_jit
def _outside_id(lv: int, cx: int, cy: int, base: int, span: Any) -> Any:
    """``GridIndex.outside_ids`` of one cell (the same uint64 hash)."""
    h = (np.uint64(cx) * np.uint64(0x9E3779B97F4A7C15)) ^ (np.uint64(cy) * np.uint64(0xC2B2AE3D27D4EB4F)) ^ (
        (np.uint64(lv) + np.uint64(1)) * np.uint64(0x165667B19E3779F9))
    h ^= h >> np.uint64(31)
    h *= np.uint64(0xD6E8FEB86659FD93)
    h ^= h >> np.uint64(32)
    return np.int64(np.uint64(base) + h % span)


@_jit
def _grid_entries(rows, sx, sy, x0, y0, x1, y1, r, kw_start, kw_len, kw_pool,  # noqa: ANN001, PLR0913
                  levels_in, caps_in, top, G, max_cells, offset, outside_base, outside_top,
                  xmin, ymin, cw, ch, mx, my, limit, kw_bits):
    # The arrays grow here, between calls of the loop, as in _test_entries (see its doc).
    keys = np.empty(1024, dtype=np.int64)
    owners = np.empty(1024, dtype=np.int64)
    outside, i, m = 0, 0, 0
    while True:
        outside, i, m, room = _grid_fitting(outside, i, keys, owners, m, rows, sx, sy, x0, y0, x1, y1, r, kw_start,
                                            kw_len, kw_pool, levels_in, caps_in, top, G, max_cells, offset,
                                            outside_base, outside_top, xmin, ymin, cw, ch, mx, my, limit, kw_bits)
        if outside == 2:
            return keys[:m].copy(), owners[:m].copy()
        keys = _grow(keys, room)
        owners = _grow(owners, room)


@_jit
def _grid_fitting(start_outside, start, keys, owners, m, rows, sx, sy, x0, y0, x1, y1, r,  # noqa: ANN001, ANN202, PLR0913
                  kw_start, kw_len, kw_pool, levels_in, caps_in, top, G, max_cells, offset, outside_base,
                  outside_top, xmin, ymin, cw, ch, mx, my, limit, kw_bits):
    """:func:`_grid_entries`' loop from part ``start_outside`` (0 inside, 1 outside) and row
    ``start`` on, while each row's postings fit in ``keys`` (room for every cell of its box);
    returns where it stopped (part 2 when done), the new ``m`` and the room that row needs."""
    n = rows.shape[0]
    g = G - 1
    span = np.uint64((1 << kw_bits) - outside_base)
    outside_levels = np.arange(outside_top, dtype=np.int64)
    outside_caps = np.full(outside_top, max_cells, dtype=np.int64)
    # Inside parts of every row first, then the outside parts (the numpy reference's order).
    for outside in range(start_outside, 2):
        for i in range(start if outside == start_outside else 0, n):
            ri = r[i]
            finite = np.isfinite(ri)
            ux0 = _lattice(x0[i], xmin, cw, limit) if finite else 0
            ux1 = _lattice(x1[i], xmin, cw, limit) if finite else 0
            uy0 = _lattice(y0[i], ymin, ch, limit) if finite else 0
            uy1 = _lattice(y1[i], ymin, ch, limit) if finite else 0
            cx0, cx1 = min(max(ux0, 0), g), min(max(ux1, 0), g)
            cy0, cy1 = min(max(uy0, 0), g), min(max(uy1, 0), g)
            level = _first_level(cx0, cx1, cy0, cy1, levels_in, caps_in, top) if finite else top
            if outside == 0:
                bx0, bx1, by0, by1 = cx0 >> level, cx1 >> level, cy0 >> level, cy1 >> level
            else:
                if not (finite and level < top and (ux0 < 0 or ux1 > g or uy0 < 0 or uy1 > g)):
                    continue
                level = _first_level(ux0, ux1, uy0, uy1, outside_levels, outside_caps, outside_top)
                bx0, bx1, by0, by1 = ux0 >> level, ux1 >> level, uy0 >> level, uy1 >> level
            row = rows[i]
            room = m + (bx1 - bx0 + 1) * (by1 - by0 + 1) * kw_len[row]
            if room > keys.shape[0]:
                return outside, i, m, room
            is_top = level == top and outside == 0
            for cy in range(by0, by1 + 1):
                for cx in range(bx0, bx1 + 1):
                    if outside == 1 and (cx >= 0 and ((cx + 1) << level) <= G and cy >= 0
                                         and ((cy + 1) << level) <= G):
                        continue  # the inside part covers the points of this cell
                    lo_x = -np.inf if is_top or (cx << level) <= -limit else xmin + (cx << level) * cw - mx
                    hi_x = np.inf if is_top or ((cx + 1) << level) > limit else xmin + ((cx + 1) << level) * cw + mx
                    lo_y = -np.inf if is_top or (cy << level) <= -limit else ymin + (cy << level) * ch - my
                    hi_y = np.inf if is_top or ((cy + 1) << level) > limit else ymin + ((cy + 1) << level) * ch + my
                    ddx = max(max(lo_x - sx[i], 0.0), sx[i] - hi_x)
                    ddy = max(max(lo_y - sy[i], 0.0), sy[i] - hi_y)
                    if not (ddx * ddx + ddy * ddy <= ri * ri):
                        continue
                    if outside == 1:
                        cell = _outside_id(level, cx, cy, outside_base, span)
                    elif level == top:
                        cell = offset[level]
                    else:
                        cell = offset[level] + cy * (((G - 1) >> level) + 1) + cx
                    for j in range(kw_len[row]):
                        keys[m] = (cell << kw_bits) | np.int64(kw_pool[kw_start[row] + j])
                        owners[m] = row
                        m += 1
    return 2, 0, m, m


def grid_entries(
    index: Any, state: Any, rows: Int64Array, boxes: tuple[Any, ...], *, outside_top: int, lattice_limit: int,
    kw_bits: int,
) -> tuple[Int64Array, Int64Array]:
    """``GridIndex._entries``'s postings ``(keys, rows)`` of state ``rows``, compiled; ``boxes``
    are their safe ball boxes ``(xmin, ymin, xmax, ymax, r)``, the rest the grid's constants."""
    x0, y0, x1, y1, r = boxes
    sp = index.space
    return _grid_entries(
        rows, state.x[rows], state.y[rows], x0, y0, x1, y1, r, state.kw_start, state.kw_len, state.kw_pool,
        index.levels_below_top, index.caps_below_top, int(index.top), int(index.G), int(index.max_cells),
        index._offset,  # noqa: SLF001
        int(index.outside_base), int(outside_top), float(sp.xmin), float(sp.ymin), float(index.cw),
        float(index.ch), float(index._mx), float(index._my), int(lattice_limit), int(kw_bits),  # noqa: SLF001
    )


@_jit
def _grid_reindex(rows, select, in_use, k, d2, x, y, shrink, r_indexed, epoch, row_entries,  # noqa: ANN001, ANN202, PLR0913
                  kw_start, kw_len, kw_pool, levels_in, caps_in, top, G, max_cells, offset, outside_base,
                  outside_top, xmin, ymin, cw, ch, mx, my, limit, kw_bits):
    # The row choice and safe radius of GridIndex.updated (safe_radius, written in the same
    # order of operations, so the same float), the epochs of _invalidate, the boxes of
    # safe_ball_boxes, the postings of _grid_entries and the entry counts of _insert.
    n = rows.shape[0]
    chosen = np.empty(n, dtype=np.int64)
    r = np.empty(n, dtype=np.float64)
    m = 0
    for i in range(n):
        row = rows[i]
        if select and not in_use[row]:
            continue
        ri = np.sqrt(d2[row, k[row] - 1]) * (1.0 + 1e-9) + 1e-9 * (abs(x[row]) + abs(y[row])) + 1e-300
        if select and not (np.isfinite(ri) and ri < shrink * r_indexed[row]):
            continue
        chosen[m] = row
        r[m] = ri
        m += 1
    chosen, r = chosen[:m], r[:m]
    stale = 0
    if select:
        # Read every old value before writing any, so that a row given twice is bumped once
        # and its entries counted twice, as the numpy path's fancy indexing does.
        bumped = np.empty(m, dtype=np.int32)
        for i in range(m):
            stale += row_entries[chosen[i]]
            bumped[i] = epoch[chosen[i]] + 1
        for i in range(m):
            epoch[chosen[i]] = bumped[i]
            row_entries[chosen[i]] = 0
    sx = np.empty(m, dtype=np.float64)
    sy = np.empty(m, dtype=np.float64)
    for i in range(m):
        sx[i] = x[chosen[i]]
        sy[i] = y[chosen[i]]
        r_indexed[chosen[i]] = r[i]
    keys, owners = _grid_entries(chosen, sx, sy, sx - r, sy - r, sx + r, sy + r, r, kw_start, kw_len, kw_pool,
                                 levels_in, caps_in, top, G, max_cells, offset, outside_base, outside_top,
                                 xmin, ymin, cw, ch, mx, my, limit, kw_bits)
    epochs = np.empty(owners.shape[0], dtype=np.int32)
    for j in range(owners.shape[0]):
        row_entries[owners[j]] += 1
        epochs[j] = epoch[owners[j]]
    return keys, owners, epochs, stale


def grid_reindex(
    index: Any, state: Any, rows: Int64Array, *, select: bool, outside_top: int, lattice_limit: int, kw_bits: int,
) -> tuple[Int64Array, Int64Array, Any, int]:
    """``GridIndex.add`` (``select`` false: every row) or ``GridIndex.updated`` (``select``:
    the live rows whose safe radius fell below ``shrink`` times the indexed one, their old
    entries made stale) in one compiled call: updates the index's ``r_indexed``, ``epoch`` and
    ``row_entries`` in place and returns the new postings ``(keys, rows, epochs)`` and the
    number of entries made stale, for the caller to hand to the postings."""
    sp = index.space
    return _grid_reindex(
        rows, bool(select), state.in_use, state.k, state.d2, state.x, state.y, float(index.shrink),
        index.r_indexed, index.epoch, index.row_entries, state.kw_start, state.kw_len, state.kw_pool,
        index.levels_below_top, index.caps_below_top, int(index.top), int(index.G), int(index.max_cells),
        index._offset,  # noqa: SLF001
        int(index.outside_base), int(outside_top), float(sp.xmin), float(sp.ymin), float(index.cw),
        float(index.ch), float(index._mx), float(index._my), int(lattice_limit), int(kw_bits),  # noqa: SLF001
    )


@_jit
def _grid_probe(owner, kw, x, y, levels, top, G, offset, xmin, ymin, cw, ch, limit, kw_bits):  # noqa: ANN001
    n = owner.shape[0]
    cx = np.empty(n, dtype=np.int64)
    cy = np.empty(n, dtype=np.int64)
    n_inside = 0
    for i in range(n):
        cx[i] = _lattice(x[owner[i]], xmin, cw, limit)
        cy[i] = _lattice(y[owner[i]], ymin, ch, limit)
        if 0 <= cx[i] < G and 0 <= cy[i] < G:
            n_inside += 1
    total = 0
    for lv in levels:
        total += n if lv == top else n_inside
    keys = np.empty(total, dtype=np.int64)
    owners = np.empty(total, dtype=np.int64)
    m = 0
    # Level after level, as the numpy reference orders them.
    for lv in levels:
        side = ((G - 1) >> lv) + 1
        for i in range(n):
            inside = 0 <= cx[i] < G and 0 <= cy[i] < G
            if lv == top:
                cell = offset[lv]
            elif inside:
                cell = offset[lv] + (cy[i] >> lv) * side + (cx[i] >> lv)
            else:
                continue
            keys[m] = (cell << kw_bits) | kw[i]
            owners[m] = owner[i]
            m += 1
    return keys, owners, cx, cy


def grid_probe(
    index: Any, owner: Int64Array, kw: Int64Array, objects: Any, *, lattice_limit: int, kw_bits: int
) -> tuple[Int64Array, Int64Array, Int64Array, Int64Array]:
    """``GridIndex.probe``'s keys of the pyramid (inside the data space) and the top cell, in its
    order, for the ``(object, keyword)`` pairs ``owner, kw``; also each pair's lattice cell (the
    caller adds the outside lattice's keys for the rare objects outside the space)."""
    sp = index.space
    return _grid_probe(
        owner, kw, objects.x, objects.y, index.level_array, int(index.top), int(index.G),
        index._offset, float(sp.xmin), float(sp.ymin), float(index.cw), float(index.ch),  # noqa: SLF001
        int(lattice_limit), int(kw_bits))


@_jit
def _grid_sorted_probe(kw_ptr, kw_ids, x, y, levels, top, G, offset, xmin, ymin, cw, ch, limit, kw_bits):  # noqa: ANN001, ANN202
    n_obj = kw_ptr.shape[0] - 1
    n = kw_ids.shape[0]
    keys = np.empty(0, dtype=np.int64)
    ptr = np.zeros(1, dtype=np.int64)
    owners = np.empty(0, dtype=np.int64)
    cx = np.empty(n_obj, dtype=np.int64)
    cy = np.empty(n_obj, dtype=np.int64)
    for i in range(n_obj):
        cx[i] = _lattice(x[i], xmin, cw, limit)
        cy[i] = _lattice(y[i], ymin, ch, limit)
        if not (0 <= cx[i] < G and 0 <= cy[i] < G):
            return False, keys, ptr, owners  # the outside lattice's hashed cells: the general path
    pair_owner = np.empty(n, dtype=np.int64)
    kw = np.empty(n, dtype=np.int64)
    kw_max = 0
    for i in range(n_obj):
        for j in range(kw_ptr[i], kw_ptr[i + 1]):
            pair_owner[j] = i
            kw[j] = kw_ids[j]
            if kw[j] < 0:
                return False, keys, ptr, owners
            kw_max = max(kw_max, kw[j])
    # By keyword once (stable: ties keep the pairs' order), then per level stably by cell: the
    # order by (cell, keyword, pair) that a stable sort of the level's keys gives. Levels are
    # numbered in ascending blocks of cell ids, so the levels one after another are in key order.
    by_kw = _stable_by(kw, np.arange(n), _bits(kw_max))
    keys = np.empty(n * levels.shape[0], dtype=np.int64)
    owners = np.empty(n * levels.shape[0], dtype=np.int64)
    ptr = np.empty(n * levels.shape[0] + 1, dtype=np.int64)
    cell = np.empty(n, dtype=np.int64)
    m = 0
    j = 0
    for lv in levels:
        side = ((G - 1) >> lv) + 1
        if lv == top:
            order = by_kw
            for i in range(n):
                cell[i] = 0
        else:
            for i in range(n):
                o = pair_owner[i]
                cell[i] = (cy[o] >> lv) * side + (cx[o] >> lv)
            order = _stable_by(cell, by_kw, _bits(side * side - 1))
        for i in range(n):
            p = order[i]
            key = ((offset[lv] + cell[p]) << kw_bits) | kw[p]
            owners[m] = pair_owner[p]
            if j == 0 or key != keys[j - 1]:
                keys[j] = key
                ptr[j] = m
                j += 1
            m += 1
    ptr[j] = m
    return True, keys[:j].copy(), ptr[:j + 1].copy(), owners[:m].copy()


def grid_sorted_probe(index: Any, objects: Any, *, lattice_limit: int, kw_bits: int) -> SortedProbe | None:
    """``SortedProbe.of(*GridIndex.probe(objects))`` built directly: the same arrays, for
    objects inside the data space (``None`` when one is outside it, or a keyword id is
    negative: the caller takes the general path). A timestamp's ~16,000 probe keys are not
    sorted as 64-bit keys: the (object, keyword) pairs are sorted by keyword once, then by cell
    at each level, which takes a few counting passes over a fifth of the keys each."""
    sp = index.space
    kws = objects.keywords
    done, keys, ptr, owners = _grid_sorted_probe(
        kws.ptr, kws.ids, objects.x, objects.y, index.level_array, int(index.top), int(index.G), index._offset,  # noqa: SLF001
        float(sp.xmin), float(sp.ymin), float(index.cw), float(index.ch), int(lattice_limit), int(kw_bits))
    return SortedProbe(keys, ptr, owners) if done else None
