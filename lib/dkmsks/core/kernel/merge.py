"""The merge kernels: accepted pairs merged into the kNN matrices by ``(d², id)`` (step 4 of
:mod:`dkmsks.core.update`), and a sorted run of new postings merged into the postings' sorted
delta in place."""

from __future__ import annotations

from typing import Any

import numpy as np

from dkmsks.core.jit import _jit, _prefetch
from dkmsks.core.kernel.common import _enters
from dkmsks.core.kernel.key_filter import _filter_set
from dkmsks.core.kernel.probe import _bits, _stable_by
from dkmsks.core.model import Float64Array, Int64Array

__all__ = ["delta_append", "invalidate_rows", "merge_accepted", "merge_pending"]

@_jit
def _merge_sorted_into(keys, rows, epochs, n_old, new_keys, new_rows, new_epochs):  # noqa: ANN001, ANN202
    # Merge sorted entries (new_keys, new_rows, new_epochs) into the first n_old (sorted) entries
    # of keys/rows/epochs, which have room for them, in place; a new entry goes before the old
    # entries of an equal key (the order np.searchsorted's left side gives the numpy path).
    # From the back: each entry is moved once and nothing is overwritten before it is read;
    # once the new entries are placed, the old ones left are in place already.
    i = n_old - 1
    j = new_keys.shape[0] - 1
    o = n_old + j
    while j >= 0:
        if i >= 0 and keys[i] >= new_keys[j]:
            keys[o] = keys[i]
            rows[o] = rows[i]
            epochs[o] = epochs[i]
            i -= 1
        else:
            keys[o] = new_keys[j]
            rows[o] = new_rows[j]
            epochs[o] = new_epochs[j]
            j -= 1
        o -= 1


@_jit
def _delta_append(keys, rows, epochs, at, new_keys, new_rows, new_epochs, present):  # noqa: ANN001, ANN202
    _filter_set(present, new_keys)
    for i in range(new_keys.shape[0]):
        keys[at + i] = new_keys[i]
        rows[at + i] = new_rows[i]
        epochs[at + i] = new_epochs[i]


def delta_append(keys: Int64Array, rows: Any, epochs: Any, at: int, new_keys: Int64Array, new_rows: Any,
                 new_epochs: Any, present: Any) -> None:
    """Write new postings' entries at position ``at`` of the delta's buffers (which have room
    for them; the rows and epochs as int32) and set their bits in the key filter ``present``:
    :meth:`~dkmsks.core.postings.Postings.insert` in one compiled call."""
    if keys.shape[0] < at + new_keys.shape[0]:
        raise ValueError(f"no room: {keys.shape[0]} entries for {at} + {new_keys.shape[0]}")
    _delta_append(keys, rows, epochs, at, np.ascontiguousarray(new_keys, dtype=np.int64), new_rows, new_epochs,
                  present)


@_jit
def _invalidate_rows(rows, epoch, row_entries):  # noqa: ANN001, ANN202
    for i in range(rows.shape[0]):
        if rows[i] < 0 or rows[i] >= epoch.shape[0]:
            return -1
    stale = 0
    for i in range(rows.shape[0]):
        r = rows[i]
        epoch[r] += 1
        stale += row_entries[r]
        row_entries[r] = 0
    return stale


def invalidate_rows(rows: Int64Array, epoch: Any, row_entries: Any) -> int:
    """Turn every posting of the distinct ``rows`` stale: bump each row's epoch, zero its count
    of live entries and return how many entries that made stale (the index's
    :meth:`~dkmsks.core.worker_index._PostingsIndex.forget` in one compiled call); ``-1``,
    changing nothing, when a row lies beyond the per-row arrays (the caller grows them)."""
    return int(_invalidate_rows(rows, epoch, row_entries))


@_jit
def _merge_pending(keys, rows, epochs, n_old, n_new):  # noqa: ANN001, ANN202
    # The new entries are copied out (their place is the merge's room), put in key order by a
    # stable sort (the numpy path's np.argsort(kind="stable") order: the same arrays), merged in.
    order = np.argsort(keys[n_old:n_old + n_new], kind="mergesort")
    new_keys = np.empty(n_new, dtype=keys.dtype)
    new_rows = np.empty(n_new, dtype=rows.dtype)
    new_epochs = np.empty(n_new, dtype=epochs.dtype)
    for i in range(n_new):
        j = n_old + order[i]
        new_keys[i] = keys[j]
        new_rows[i] = rows[j]
        new_epochs[i] = epochs[j]
    _merge_sorted_into(keys, rows, epochs, n_old, new_keys, new_rows, new_epochs)


def merge_pending(keys: Int64Array, rows: Any, epochs: Any, n_old: int, n_new: int) -> None:
    """Sort the ``n_new`` entries that follow the first ``n_old`` (sorted) entries of the delta's
    buffers by key, stably, and merge them in place (a new entry before the old ones of an
    equal key: the order ``np.searchsorted``'s left side gives the numpy path): the delta's
    sort in one compiled call."""
    if keys.shape[0] < n_old + n_new:
        raise ValueError(f"no room: {keys.shape[0]} entries for {n_old} + {n_new}")
    _merge_pending(keys, rows, epochs, n_old, n_new)


#: How many accepted pairs ahead :func:`_merge_accepted` asks for a pair's row of the state.
_MERGE_AHEAD = 16


@_jit
def _merge_accepted(s_ids, s_d2, s_k, all_rows, all_oid, all_d2):  # noqa: ANN001
    # Only pairs inside the row's ball as it stands can land or count (merge_accepted's doc);
    # in a catch-up round most are not (docs/benchmarks.md), so they go before the sort.
    inside = np.empty(all_rows.shape[0], dtype=np.int64)
    n = 0
    K = s_ids.shape[1]
    flat_ids = s_ids.reshape(-1)
    flat_d2 = s_d2.reshape(-1)
    n_all = all_rows.shape[0]
    row_max = 0
    for i in range(n_all):
        # The rows' lines are asked for _MERGE_AHEAD pairs ahead: the pairs come in the lookup's
        # order, their rows scattered over the state, and each test waits for k, then the k-th
        # result; the per-row merge below then finds the same lines in cache.
        if i + _MERGE_AHEAD < n_all:
            ahead = all_rows[i + _MERGE_AHEAD]
            _prefetch(s_k, ahead)
            _prefetch(flat_ids, ahead * K)
            _prefetch(flat_ids, ahead * K + K - 1)
            _prefetch(flat_d2, ahead * K)
            _prefetch(flat_d2, ahead * K + K - 1)
        row = all_rows[i]
        kk = s_k[row] - 1
        kid = s_ids[row, kk]
        kd2 = s_d2[row, kk]
        if _enters(all_d2[i], all_oid[i], kd2, kid):
            inside[n] = i
            n += 1
            row_max = max(row_max, row)
    rows, oid, d2 = all_rows[inside[:n]], all_oid[inside[:n]], all_d2[inside[:n]]
    # Any order of a row's pairs will do (each row's group is sorted by (d², id) below). A radix
    # sort, not numba's quicksort: its partitions are calls taking the arrays, two atomic
    # reference counts each (the probe's radix sort took ~15 % less of this kernel on
    # one-timestamp merges at 1M/1M; the quicksort had taken ~20 % less than the mergesort;
    # docs/benchmarks.md); over the rows' own bits only (a worker's rows need two passes).
    order = _stable_by(rows, np.arange(n), _bits(row_max))
    new_ids = np.empty(K, dtype=np.int64)
    new_d2 = np.empty(K, dtype=np.float64)
    g_oid = np.empty(max(n, 1), dtype=np.int64)
    g_d2 = np.empty(max(n, 1), dtype=np.float64)
    touched = np.empty(n, dtype=np.int64)
    changed = np.zeros(n, dtype=np.bool_)
    n_touched = 0
    n_distinct = 0
    a = 0
    while a < n:
        row = rows[order[a]]
        b = a
        while b < n and rows[order[b]] == row:
            b += 1
        # The group's accepted objects, sorted by (d², id) with an insertion sort (groups are
        # a handful of entries), duplicates (same object through several keywords) dropped.
        m = 0
        for i in range(a, b):
            j = order[i]
            vd, vo = d2[j], oid[j]
            p = m
            while p > 0 and (g_d2[p - 1] > vd or (g_d2[p - 1] == vd and g_oid[p - 1] > vo)):
                p -= 1
            if p > 0 and g_oid[p - 1] == vo and g_d2[p - 1] == vd:
                continue
            for q in range(m, p, -1):
                g_d2[q] = g_d2[q - 1]
                g_oid[q] = g_oid[q - 1]
            g_d2[p] = vd
            g_oid[p] = vo
            m += 1
        n_distinct += m
        a = b
        # Objects already in the row's result (a replayed batch) are ignored.
        kept = 0
        for i in range(m):
            present = False
            for c in range(K):
                if s_ids[row, c] == g_oid[i]:
                    present = True
                    break
            if not present:
                g_oid[kept] = g_oid[i]
                g_d2[kept] = g_d2[i]
                kept += 1
        if kept == 0:
            continue
        touched[n_touched] = row
        # Two-way merge of the current result and the accepted objects into the first k slots.
        k = s_k[row]
        ci = 0
        ai = 0
        landed = False
        for pos in range(K):
            new_ids[pos] = -1
            new_d2[pos] = np.inf
        for pos in range(k):
            has_c = ci < K and s_ids[row, ci] >= 0
            has_a = ai < kept
            if not has_c and not has_a:
                break
            if has_c and (not has_a or s_d2[row, ci] < g_d2[ai]
                          or (s_d2[row, ci] == g_d2[ai] and s_ids[row, ci] < g_oid[ai])):
                new_ids[pos] = s_ids[row, ci]
                new_d2[pos] = s_d2[row, ci]
                ci += 1
            else:
                new_ids[pos] = g_oid[ai]
                new_d2[pos] = g_d2[ai]
                ai += 1
                landed = True
        for pos in range(K):
            s_ids[row, pos] = new_ids[pos]
            s_d2[row, pos] = new_d2[pos]
        changed[n_touched] = landed
        n_touched += 1
    return touched[:n_touched].copy(), changed[:n_touched].copy(), n_distinct


def merge_accepted(
    state: Any, rows: Int64Array, oid: Int64Array, d2: Float64Array
) -> tuple[Int64Array, Any, int]:
    """Merge accepted pairs into the state's kNN matrices in place (module doc, step 4).

    Pairs whose object is not inside the row's ball as the state stands (``(d², id)`` not
    before its k-th) are dropped first: accepted against an older state (the later timestamps
    of a probe group), they can neither enter the result nor count. Returns the rows that
    received at least one object inside their ball and not already in their result
    (ascending), whether each one's result changed, and the number of distinct ``(row,
    object)`` pairs inside the balls (``pairs_accepted``, :mod:`dkmsks.core.update`).
    """
    if rows.shape[0] == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.bool_), 0
    touched, changed, distinct = _merge_accepted(state.ids, state.d2, state.k, rows, oid, d2)
    return touched, changed, int(distinct)
