"""The lookup kernels: every probe key looked up in a worker's postings (sorted main part and
sorted delta), stale entries skipped by epoch, each live entry tested exactly (liveness
interval, ``d²``, the k-th result), so that no candidate pair is ever materialised (steps 1–3
of :mod:`dkmsks.core.update`).

Two shapes of the same work: :func:`_lookup` (a timestamp's probe, cold caches: rounds of keys
whose cache lines are asked for before they are read) and :func:`_lookup_warm` (a batch's
millions of keys, which keep the index in cache: key by key)."""

from __future__ import annotations

from typing import Any

import numpy as np

from dkmsks.core.jit import _inline, _jit, _prefetch
from dkmsks.core.kernel.common import _enters, _grow
from dkmsks.core.kernel.key_filter import _FILTER_SHIFT, FILTER_MUL1, _filtered
from dkmsks.core.kernel.probe import SortedProbe
from dkmsks.core.model import Float64Array, Int64Array

__all__ = ["FENCE_STRIDE", "NO_BOUND", "lookup_accept", "lookup_accept_sorted"]

#: How many probe keys ahead :func:`_lookup` asks for their filter bytes, and up to how many
#: keys in one call it does (beyond, the filter is taken to be in cache: measured at 1M/1M,
#: one timestamp's 29,826 keys gain, a 40-timestamp batch's 1.9 million keys lose ~5 %).
#: A plain probe of more keys than this is looked up by :func:`_lookup_warm` instead.
_AHEAD = 32
_COLD_KEYS = 1 << 17
#: No per-row radius bound (:func:`lookup_accept`): every entry met is tested against its result.
NO_BOUND = np.zeros(0, dtype=np.float64)


@_jit
def _grow_pairs(a_row: Any, a_oid: Any, a_d2: Any, a_ot: Any, n: int) -> Any:
    """The four arrays of accepted pairs (row, object id, d², object t), grown together to hold ``n``."""
    return _grow(a_row, n), _grow(a_oid, n), _grow(a_d2, n), _grow(a_ot, n)


@_inline
def _lower_bound(keys: Any, n: Any, key: Any) -> Any:
    """The first position of sorted ``keys[:n]`` whose key is ``>= key`` (``n`` if none), as an
    unsigned integer: ``np.searchsorted``'s left side, inlined into the loop over probe keys.

    Unsigned, so that numba adds no adjustment for negative values to each load. The step is
    written as a product with the comparison, but LLVM compiles it to a predicted branch, and
    here that is the faster form: a conditional move (LLVM's select marked unpredictable, as
    Rust's ``partition_point`` searches) halved the search on one array in cache, yet made the
    warm lookup 1-11 % slower at 1M/1M, against the Rust loop in the same runs: twenty workers'
    postings do not fit in cache, and a predicted branch lets the next step's load start before
    the comparison is known (docs/benchmarks.md)."""
    one = np.uint64(1)
    size = np.uint64(n)
    base = np.uint64(0)
    if size == 0:
        return base
    while size > one:
        half = size >> one
        # keys[base + half - 1] < key: every key up to the middle is smaller, the answer lies above.
        base += half * np.uint64(keys[base + half - one] < key)
        size -= half
    return base + np.uint64(keys[base] < key)


@_jit
def _gallop(keys: Any, lo: int, key: Any) -> int:
    """The first position ``>= lo`` of sorted ``keys`` whose key is ``>= key``.

    Doubling steps from ``lo``, then a binary search in the last step: ascending queries cost
    ``O(log gap)`` each and touch the postings in order, instead of ``O(log n)`` random reads."""
    n = keys.shape[0]
    if lo >= n or keys[lo] >= key:
        return lo
    step = 1
    hi = lo + 1
    while hi < n and keys[hi] < key:
        lo = hi
        step *= 2
        hi = lo + step
    if hi > n:
        hi = n
    # keys[lo] < key <= keys[hi] (or hi == n): the answer is in (lo, hi]. Searched by hand: a
    # slice passed to np.searchsorted is a new array whose references numba counts, two atomic
    # operations per call (~15 % of a one-timestamp lookup on warm caches, docs/benchmarks.md).
    while hi - lo > 1:
        mid = (lo + hi) >> 1
        if keys[mid] < key:
            lo = mid
        else:
            hi = mid
    return hi


#: Probe keys looked up per round of :func:`_lookup`: the cache lines a round prefetches
#: (filter bytes, postings blocks, the state of every entry met) stay in a core's L2 until used.
_ROUND = 4096
#: Entries :func:`_lookup` holds (their state asked for) before it tests them: ~9 cache lines
#: each, so that the lines asked for are still in a core's L2 when read.
_HELD = 1024
#: One fence key per this many main postings (:attr:`~dkmsks.core.postings.Postings.fences`).
FENCE_STRIDE = 32


# A batch's plain probe (millions of keys: a Spark task's catch-up) keeps the worker's index in
# cache; there the rounds of _lookup only cost (follow's 100-timestamp burst at 1M: workers
# phase ~5 % slower), so such calls search and test key by key, as before the rounds. Its exact
# test is written out as in _test_fitting on purpose: a jitted call per entry made the per-key
# loops slower (measured when both lookups were such loops: 34 -> 39 ms per timestamp, 1M/1M).
@_jit
def _lookup_warm(qkeys, qowner, present, keys, prow, prow_epoch, dkeys, drow, dep, epoch,  # noqa: ANN001
                 s_t, s_end, s_x, s_y, s_k, s_ids, s_d2, s_r, o_t, o_x, o_y, o_ids):
    # The arrays grow here, between calls of the loop, as in _test_entries (see its doc).
    tested = np.zeros(o_ids.shape[0], dtype=np.int64)
    a_row = np.empty(1024, dtype=np.int64)
    a_oid = np.empty(1024, dtype=np.int64)
    a_d2 = np.empty(1024, dtype=np.float64)
    a_ot = np.empty(1024, dtype=np.int64)
    q, n, room = 0, 0, 0
    while True:
        q, n, room = _warm_fitting(q, qkeys, qowner, present, keys, prow, prow_epoch, dkeys, drow, dep, epoch,
                                   s_t, s_end, s_x, s_y, s_k, s_ids, s_d2, s_r, o_t, o_x, o_y, o_ids, tested,
                                   a_row, a_oid, a_d2, a_ot, n)
        if q == qkeys.shape[0]:
            return a_row[:n].copy(), a_oid[:n].copy(), a_d2[:n].copy(), a_ot[:n].copy(), tested
        a_row, a_oid, a_d2, a_ot = _grow_pairs(a_row, a_oid, a_d2, a_ot, room)


@_jit
def _warm_fitting(start, qkeys, qowner, present, keys, prow, prow_epoch, dkeys, drow, dep, epoch,  # noqa: ANN001, ANN202, PLR0913
                  s_t, s_end, s_x, s_y, s_k, s_ids, s_d2, s_r, o_t, o_x, o_y, o_ids, tested,
                  a_row, a_oid, a_d2, a_ot, n):
    """:func:`_lookup_warm`'s loop over the probe keys from ``start`` on, while each key's
    entries fit in ``a_*``; returns the first key not looked up (all: ``len(qkeys)``), the new
    ``n`` and the room that key needs."""
    # Every index is unsigned: numba adjusts a signed index for negative values at each load
    # (measured against the same loop in Rust, docs/benchmarks.md).
    one = np.uint64(1)
    n_keys = np.uint64(keys.shape[0])
    n_dkeys = np.uint64(dkeys.shape[0])
    width = np.uint64(s_ids.shape[1])
    flat_ids = s_ids.reshape(-1)
    flat_d2 = s_d2.reshape(-1)
    bounded = s_r.shape[0] > 0
    for q in range(start, qkeys.shape[0]):
        key = qkeys[q]
        # Most probe keys have no posting: the filter drops them before any search.
        if not _filtered(present, key):
            continue
        # A key's entries are the run of its equal keys, in the main part and in the delta.
        lo0 = _lower_bound(keys, n_keys, key)
        hi0 = lo0
        while hi0 < n_keys and keys[hi0] == key:
            hi0 += one
        lo1 = _lower_bound(dkeys, n_dkeys, key)
        hi1 = lo1
        while hi1 < n_dkeys and dkeys[hi1] == key:
            hi1 += one
        need = n + np.int64(hi0 - lo0) + np.int64(hi1 - lo1)
        if need > a_row.shape[0]:
            return q, n, need
        obj = np.uint64(qowner[q])
        ot = o_t[obj]
        ox = o_x[obj]
        oy = o_y[obj]
        oid = o_ids[obj]
        for part in range(2):
            # (Two explicit branches: choosing the arrays by `part` inside one loop ran ~40 % slower.)
            e, hi = (lo0, hi0) if part == 0 else (lo1, hi1)
            while e < hi:
                if part == 0:
                    row = np.uint64(prow[e])
                    e += one
                    # A main entry's epoch is its row's at the last rebuild (Postings.row_epochs).
                    if prow_epoch[row] != epoch[row]:
                        continue
                else:
                    row = np.uint64(drow[e])
                    live = dep[e] == epoch[row]
                    e += one
                    if not live:
                        continue
                tested[obj] += 1
                dx = ox - s_x[row]
                dy = oy - s_y[row]
                d2 = dx * dx + dy * dy
                if bounded and d2 > s_r[row] * s_r[row]:
                    continue  # beyond the radius it was posted with: beyond the ball (lookup_accept, ``bound``)
                if not (s_t[row] <= ot and ot < s_end[row]):
                    continue
                kth = row * width + np.uint64(s_k[row]) - one
                if _enters(d2, oid, flat_d2[kth], flat_ids[kth]):
                    a_row[n] = np.int64(row)
                    a_oid[n] = oid
                    a_d2[n] = d2
                    a_ot[n] = ot
                    n += 1
    return qkeys.shape[0], n, n


@_jit
def _test_entries(e_key, e_row, n_e, uptr, uowner, csr, prow_epoch, epoch, s_t, s_end, s_x, s_y, s_k,  # noqa: ANN001, ANN202, PLR0913
                  s_ids, s_d2, s_r, o_t, o_x, o_y, o_ids, tested, a_row, a_oid, a_d2, a_ot, n):
    """The exact test of :func:`_lookup`'s held entries against each object that asked for their
    key; accepted pairs are appended to ``a_*`` from position ``n`` (returned grown, with the
    new ``n``), each live entry met counts in ``tested``.

    The arrays grow here, between calls of :func:`_test_fitting`, never inside its loops: numba
    counts references to an array variable assigned in a loop at every branch that may assign
    it, and with the growth inside the test loop each pair that reached the k-th paid eight
    atomic reference counts, ~60 % of a catch-up round's lookup (docs/benchmarks.md)."""
    done = 0
    while True:
        done, n, room = _test_fitting(done, e_key, e_row, n_e, uptr, uowner, csr, prow_epoch, epoch, s_t, s_end,
                                      s_x, s_y, s_k, s_ids, s_d2, s_r, o_t, o_x, o_y, o_ids, tested, a_row, a_oid,
                                      a_d2, a_ot, n)
        if done == n_e:
            return a_row, a_oid, a_d2, a_ot, n
        a_row, a_oid, a_d2, a_ot = _grow_pairs(a_row, a_oid, a_d2, a_ot, room)


@_jit
def _test_fitting(start, e_key, e_row, n_e, uptr, uowner, csr, prow_epoch, epoch, s_t, s_end, s_x, s_y, s_k,  # noqa: ANN001, ANN202, PLR0913
                  s_ids, s_d2, s_r, o_t, o_x, o_y, o_ids, tested, a_row, a_oid, a_d2, a_ot, n):
    """:func:`_test_entries` of the held entries from ``start`` on, while each entry's objects
    fit in ``a_*`` (room for every one of them accepted); returns the first entry not tested
    (``n_e`` when all were), the new ``n`` and the room that entry needs."""
    bounded = s_r.shape[0] > 0
    room = a_row.shape[0]
    one = np.uint64(1)
    width = np.uint64(s_ids.shape[1])
    flat_ids = s_ids.reshape(-1)
    flat_d2 = s_d2.reshape(-1)
    for i in range(start, n_e):
        # Rows and objects as unsigned indices: no adjustment for negative values at each load.
        signed_row = e_row[i]
        if signed_row < 0:
            row = np.uint64(-signed_row - 1)
        else:
            row = np.uint64(signed_row)
            if prow_epoch[row] != epoch[row]:
                continue  # stale: a main entry's epoch is its row's at the last rebuild
        u = e_key[i]
        j0, j1 = (uptr[u], uptr[u + 1]) if csr else (u, u + 1)
        if n + (j1 - j0) > room:
            return i, n, n + (j1 - j0)
        sx = s_x[row]
        sy = s_y[row]
        for j in range(j0, j1):
            obj = np.uint64(uowner[j])
            ot = o_t[obj]
            tested[obj] += 1
            dx = o_x[obj] - sx
            dy = o_y[obj] - sy
            d2 = dx * dx + dy * dy
            if bounded and d2 > s_r[row] * s_r[row]:
                continue  # beyond the radius it was posted with: beyond the ball (lookup_accept, ``bound``)
            if not (s_t[row] <= ot and ot < s_end[row]):
                continue
            kth = row * width + np.uint64(s_k[row]) - one
            oid = o_ids[obj]
            if _enters(d2, oid, flat_d2[kth], flat_ids[kth]):
                a_row[n] = np.int64(row)
                a_oid[n] = oid
                a_d2[n] = d2
                a_ot[n] = ot
                n += 1
    return n_e, n, n


@_jit
def _lookup(ukeys, uptr, uowner, ascending, present, keys, fences, prow, prow_epoch,  # noqa: ANN001, PLR0913
            dkeys, drow, dep, epoch, s_t, s_end, s_x, s_y, s_k, s_ids, s_d2, s_r, o_t, o_x, o_y, o_ids):
    # The objects of probe key u are uowner[uptr[u]:uptr[u + 1]] (a SortedProbe), or, with an
    # empty uptr, just uowner[u] (a plain probe). ``ascending``: the keys are sorted, so every
    # search can go on from the previous key's position.
    #
    # This is the driver: the accepted pairs' arrays are (re)assigned only here, by the tests of
    # held entries, never inside a loop over keys or entries. Each step is its own function
    # that only writes into arrays it is given, and no loop over keys or entries calls a jitted
    # function with array arguments: numba counts the references of an array variable that a
    # loop may reassign at every branch of that loop (see _test_entries' doc), and those of the
    # arrays passed to a call at every call. With the tests' flush inside the loop over entries,
    # as before, a one-timestamp lookup took 1.38x as long on warm caches (docs/benchmarks.md).
    n_obj = o_ids.shape[0]
    tested = np.zeros(n_obj, dtype=np.int64)
    csr = uptr.shape[0] > 0
    # A few probe keys per filter cache line find the filter cold (one timestamp of one worker
    # among many); a batch's millions of keys keep it warm, and asking ahead only costs there.
    cold_filter = ukeys.shape[0] <= _COLD_KEYS
    n_u = ukeys.shape[0]
    width = s_ids.shape[1]
    flat_ids = s_ids.reshape(-1)
    flat_d2 = s_d2.reshape(-1)
    cap = 1024
    a_row = np.empty(cap, dtype=np.int64)
    a_oid = np.empty(cap, dtype=np.int64)
    a_d2 = np.empty(cap, dtype=np.float64)
    a_ot = np.empty(cap, dtype=np.int64)
    n = 0
    per_round = min(n_u, _ROUND)
    passed = np.empty(per_round, dtype=np.int64)
    # Per passing key: its run of entries in the main part [lo0, hi0) and in the delta [lo1, hi1).
    lo0 = np.empty(per_round, dtype=np.int64)
    hi0 = np.empty(per_round, dtype=np.int64)
    lo1 = np.empty(per_round, dtype=np.int64)
    hi1 = np.empty(per_round, dtype=np.int64)
    # The entries met and not yet tested: the probe key of each and its row (a delta entry's row
    # as -row - 1: its epoch is checked already). Bounded: a key can have thousands of entries
    # (KOP's keyword postings, the top cell's unbounded balls), each asked for by many objects.
    e_key = np.empty(_HELD, dtype=np.int64)
    e_row = np.empty(_HELD, dtype=np.int64)
    f = 0  # forward cursors (ascending keys only)
    dat = 0
    for r0 in range(0, n_u, _ROUND):
        r1 = min(r0 + _ROUND, n_u)
        n_pass = _filter_round(r0, r1, ukeys, present, cold_filter, passed)
        f = _main_runs(n_pass, passed, ukeys, keys, fences, prow, ascending, f, lo0, hi0)
        dat = _delta_runs(n_pass, passed, ukeys, dkeys, ascending, dat, lo1, hi1)
        j, at = 0, 0
        while True:
            j, at, n_e = _hold_entries(j, at, n_pass, passed, lo0, hi0, lo1, hi1, prow, prow_epoch, drow, dep, epoch,
                                       e_key, e_row)
            _prefetch_held(n_e, e_row, s_t, s_end, s_x, s_y, s_k, s_r, flat_ids, flat_d2, width)
            a_row, a_oid, a_d2, a_ot, n = _test_entries(
                e_key, e_row, n_e, uptr, uowner, csr, prow_epoch, epoch, s_t, s_end, s_x, s_y, s_k, s_ids, s_d2,
                s_r, o_t, o_x, o_y, o_ids, tested, a_row, a_oid, a_d2, a_ot, n)
            if j == n_pass:
                break
    return a_row[:n].copy(), a_oid[:n].copy(), a_d2[:n].copy(), a_ot[:n].copy(), tested


@_jit
def _filter_round(r0, r1, ukeys, present, cold_filter, passed):  # noqa: ANN001, ANN202
    """Step 1 of a :func:`_lookup` round: the probe keys ``r0..r1`` that pass the filter, into
    ``passed``; their filter bytes asked for a few dozen keys ahead. Most keys stop here."""
    n_pass = 0
    for c0 in range(r0, r1 + _AHEAD, _AHEAD):
        if cold_filter:
            for u in range(c0, min(c0 + _AHEAD, r1)):
                h = np.uint64(ukeys[u])
                _prefetch(present, ((h * FILTER_MUL1) >> _FILTER_SHIFT) >> np.uint64(3))  # both bits' line
        for u in range(max(c0 - _AHEAD, r0), min(c0, r1)):
            if _filtered(present, ukeys[u]):
                passed[n_pass] = u
                n_pass += 1
    return n_pass


@_jit
def _main_runs(n_pass, passed, ukeys, keys, fences, prow, ascending, f, lo0, hi0):  # noqa: ANN001, ANN202
    """Step 2 of a :func:`_lookup` round: each passing key's run of entries in the main postings.

    Its block is found in the fences (a small array that stays cached) and asked for, the blocks
    of all keys first, so that they load at once; then the run is read: it starts in
    ``(b, b + FENCE_STRIDE]`` (``keys[b] < key <=`` the next fence, or at 0). Returns the fence
    cursor (``ascending``: the next key's search goes on from it)."""
    n_keys = keys.shape[0]
    for j in range(n_pass):
        key = ukeys[passed[j]]
        f = _gallop(fences, f, key) if ascending else np.searchsorted(fences, key)
        b = (f - 1) * FENCE_STRIDE if f > 0 else 0
        lo0[j] = b
        if b < n_keys:
            _prefetch(keys, b)
            _prefetch(keys, min(b + FENCE_STRIDE, n_keys - 1))
            _prefetch(prow, b)
    for j in range(n_pass):
        key = ukeys[passed[j]]
        lo = lo0[j]
        end = min(lo + FENCE_STRIDE, n_keys)
        while lo < end and keys[lo] < key:
            lo += 1
        lo0[j] = lo
    _run_ends(n_pass, passed, ukeys, keys, lo0, hi0)
    return f


@_jit
def _delta_runs(n_pass, passed, ukeys, dkeys, ascending, dat, lo1, hi1):  # noqa: ANN001, ANN202
    """Each passing key's run of entries in the sorted delta; returns the forward cursor."""
    for j in range(n_pass):
        key = ukeys[passed[j]]
        if ascending:
            dat = _gallop(dkeys, dat, key)
            lo1[j] = dat
        else:
            lo1[j] = np.searchsorted(dkeys, key)
    _run_ends(n_pass, passed, ukeys, dkeys, lo1, hi1)
    return dat


@_jit
def _run_ends(n_pass, passed, ukeys, keys, lo, hi):  # noqa: ANN001, ANN202
    """The end ``hi[j]`` of each passing key's run of equal ``keys`` from ``lo[j]`` on (its first)."""
    n_keys = keys.shape[0]
    for j in range(n_pass):
        key = ukeys[passed[j]]
        end = lo[j]
        while end < n_keys and keys[end] == key:
            end += 1
        hi[j] = end


@_jit
def _hold_entries(j, at, n_pass, passed, lo0, hi0, lo1, hi1, prow, prow_epoch, drow, dep, epoch,  # noqa: ANN001, ANN202, PLR0913
                  e_key, e_row):
    """Step 3 of a :func:`_lookup` round: hold the entries of the passing keys from key ``j``,
    its ``at``-th entry (main run, then delta run) on, until ``e_key``/``e_row`` are full (a
    main entry's epochs asked for: its test compares them). Returns where it stopped
    (``j == n_pass``: the round's entries are all held) and how many it holds."""
    n_e = 0
    held = e_key.shape[0]
    while j < n_pass:
        u = passed[j]
        n_main = hi0[j] - lo0[j]
        # (Two explicit loops: choosing the arrays by part inside one loop ran ~40 % slower.)
        for e in range(lo0[j] + at, hi0[j]):
            if n_e == held:
                return j, e - lo0[j], n_e
            row = np.int64(prow[e])
            _prefetch(prow_epoch, row)
            _prefetch(epoch, row)
            e_key[n_e] = u
            e_row[n_e] = row
            n_e += 1
        for e in range(lo1[j] + max(at - n_main, 0), hi1[j]):
            row = np.int64(drow[e])
            if dep[e] != epoch[row]:
                continue
            if n_e == held:
                return j, n_main + e - lo1[j], n_e
            e_key[n_e] = u
            e_row[n_e] = -row - 1
            n_e += 1
        j += 1
        at = 0
    return j, 0, n_e


@_jit
def _prefetch_held(n_e, e_row, s_t, s_end, s_x, s_y, s_k, s_r, flat_ids, flat_d2, width):  # noqa: ANN001, ANN202
    """Ask for the state lines the exact tests of the held entries will read.

    Written out here, not called per entry: a jitted call with array arguments inside a loop
    cost two atomic reference counts per array per call (docs/benchmarks.md)."""
    bounded = s_r.shape[0] > 0
    for i in range(n_e):
        row = e_row[i]
        if row < 0:
            row = -row - 1
        _prefetch(s_x, row)
        _prefetch(s_y, row)
        if bounded:
            _prefetch(s_r, row)  # most entries end at the bound: their result is not read
        else:
            _prefetch(s_t, row)
            _prefetch(s_end, row)
            _prefetch(s_k, row)
            _prefetch(flat_ids, row * width + width - 1)
            _prefetch(flat_d2, row * width + width - 1)


def lookup_accept(
    qkeys: Int64Array, qowner: Int64Array, postings: Any, epoch: Any, state: Any, objects: Any,
    bound: Float64Array = NO_BOUND,
) -> tuple[Int64Array, Int64Array, Float64Array, Int64Array, Int64Array]:
    """Look up probe keys and test every live entry exactly (module doc, steps 1–3).

    ``qowner[i]`` is the object (index into ``objects``) that asked for ``qkeys[i]``.
    Returns the accepted ``(row, object id, d², object t)`` (not deduplicated: a pair found
    through ``j`` shared keywords appears ``j`` times, as in the reference; in no particular
    order) and, per object, the number of live index entries its keys met (the
    ``pairs_tested`` counter).

    ``bound``: per state row, a radius no smaller than its ball's (the grid's radius each row
    was posted with; balls only shrink, docs/design.md §1), or empty. An entry whose object
    lies beyond it is rejected from the row's place alone, before its result is read: most
    entries met are (at 1M/1M ~85 %), and each read of a result is a few more cache lines.
    The accepted pairs and the counters are the same either way.
    """
    qkeys = np.asarray(qkeys, dtype=np.int64)
    qowner = np.asarray(qowner, dtype=np.int64)
    if qkeys.shape[0] > _COLD_KEYS:
        dk, dr, de = postings._sorted_delta()  # noqa: SLF001 - the kernel reads the index's arrays
        n = state.n_rows
        return _lookup_warm(
            qkeys, qowner, postings._present, postings.keys, postings.rows, postings.row_epochs,  # noqa: SLF001
            dk, dr, de, epoch,
            state.t[:n], state.end_t[:n], state.x[:n], state.y[:n], state.k[:n], state.ids[:n], state.d2[:n],
            _bound_of(bound, n), objects.t, objects.x, objects.y, objects.ids,
        )
    return _lookup_with(qkeys, _NO_PTR, qowner, False, postings, epoch, state, objects, bound)


def lookup_accept_sorted(
    probe: SortedProbe, postings: Any, epoch: Any, state: Any, objects: Any, bound: Float64Array = NO_BOUND,
) -> tuple[Int64Array, Int64Array, Float64Array, Int64Array, Int64Array]:
    """:func:`lookup_accept` of a :class:`SortedProbe`: the same accepted pairs and the same
    per-object counts."""
    return _lookup_with(probe.keys, probe.ptr, probe.owners, True, postings, epoch, state, objects, bound)


_NO_PTR = np.zeros(0, dtype=np.int64)


def _bound_of(bound: Float64Array, n: int) -> Float64Array:
    """The first ``n`` rows of a per-row bound (the index grows it with the state), or none."""
    if bound.shape[0] == 0:
        return bound
    if bound.shape[0] < n:
        raise ValueError(f"a bound for {bound.shape[0]} rows cannot serve a state of {n}")
    return bound[:n]


def _lookup_with(
    ukeys: Int64Array, uptr: Int64Array, uowner: Int64Array, ascending: bool, postings: Any, epoch: Any,
    state: Any, objects: Any, bound: Float64Array,
) -> tuple[Int64Array, Int64Array, Float64Array, Int64Array, Int64Array]:
    dk, dr, de = postings._sorted_delta()  # noqa: SLF001 - the kernel reads the index's arrays
    n = state.n_rows
    return _lookup(
        ukeys, uptr, uowner, ascending,
        postings._present, postings.keys, postings.fences, postings.rows, postings.row_epochs,  # noqa: SLF001
        dk, dr, de, epoch,
        state.t[:n], state.end_t[:n], state.x[:n], state.y[:n], state.k[:n], state.ids[:n], state.d2[:n],
        _bound_of(bound, n), objects.t, objects.x, objects.y, objects.ids,
    )
