"""Compiled kernels of a worker's kNN update (numba), beside the numpy reference path.

The numpy path of :mod:`dkmsks.core.update` and :mod:`dkmsks.core.worker_index` makes a few
dozen small array calls per worker and timestamp; at the paper's scale a worker sees ~1,000
objects and accepts a few hundred pairs per timestamp, so those calls' fixed costs, not the
arithmetic, set its update time (docs/design.md §11, "Two kernels, one answer"). The kernels
below do the same work in one compiled loop each:

- :func:`lookup_accept` — steps 1–3 of :mod:`dkmsks.core.update`: every probe key is looked up
  in the postings (sorted main part and sorted delta), stale entries are skipped by epoch, and
  each live entry is tested exactly (liveness interval, ``d²``, the k-th result), so no
  candidate pair is ever materialised. It works in rounds of probe keys and asks for the
  cache lines a round will read before reading them (:func:`_lookup`): at the paper's scale a
  lookup mostly waits for memory;
- :func:`merge_accepted` — step 4: per row, the accepted objects (deduplicated, the ones
  already in the result ignored) are merged with the current result by ``(d², id)``;
- :func:`grid_entries`, :func:`grid_probe` — the DkM-SKS grid's postings of a ball and an
  object's probe keys (paper §4.3; :class:`~dkmsks.core.worker_index.GridIndex`).

Both give byte-identical results and the same work counters as the reference path
(``tests/unit/test_kernel.py`` compares them with each other and with the oracle). ``d²`` is
``dx*dx + dy*dy`` in float64 as the oracle computes it: numba does not contract it into a
fused multiply-add unless ``fastmath`` is asked for, which it is not here.

Which path runs is a parameter (``kernel=`` of :class:`~dkmsks.core.update.Worker`,
:class:`~dkmsks.core.engine.Engine` and :func:`~dkmsks.core.engine.build_engine`): ``numba`` by
default, ``numpy`` for the reference (also the default where numba cannot be imported).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dkmsks.core.knn_state import enters
from dkmsks.core.model import Float64Array, Int64Array

__all__ = ["KERNELS", "Probe", "SortedProbe", "grid_entries", "grid_probe", "kernel_name", "lookup_accept",
           "lookup_accept_sorted", "merge_accepted", "merge_sorted_into", "stable_order", "warm_up"]

#: The kernel names :func:`kernel_name` accepts.
KERNELS = ("numba", "numpy")

try:  # numba is pinned in requirements.lock; the numpy path remains the reference without it
    import numba

    _jit: Any = numba.njit(cache=True, nogil=True)
    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - exercised only on a machine without numba
    HAVE_NUMBA = False

    def _jit(fn: Any) -> Any:
        return fn


#: The exact test (:func:`~dkmsks.core.knn_state.enters`) compiled from the reference's own
#: function, so the tie-break is written once; numba inlines it into the loops below.
_enters = _jit(enters)

_prefetch: Any
if HAVE_NUMBA:
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.extending import intrinsic

    def _prefetch_typed(typingctx: Any, array: Any, index: Any) -> Any:  # noqa: ARG001 - numba's signature
        """Ask for the cache line of ``array[index]`` (LLVM's prefetch: read, keep in every level).

        Nothing is loaded into a register and no fault is raised, so the index need not be in
        bounds; the kernel's loop then finds the line in cache instead of waiting for memory.
        On a machine where 20 workers' indexes do not fit in cache, that wait is most of a
        lookup (docs/benchmarks.md, "The lookup kernel's memory waits")."""
        if not isinstance(array, types.Array) or not isinstance(index, types.Integer):
            return None
        sig = types.void(array, index)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            array_type, index_type = signature.args
            view = context.make_array(array_type)(context, builder, args[0])
            at = context.cast(builder, args[1], index_type, types.intp)
            byte = ir.IntType(8).as_pointer()
            # No bounds check: an address past the end is only a hint (see above).
            address = builder.bitcast(cgutils.get_item_pointer(context, builder, array_type, view, [at]), byte)
            i32 = ir.IntType(32)
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [byte, i32, i32, i32]),
                                                "llvm.prefetch.p0")
            builder.call(fn, [address, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
            return context.get_dummy_value()

        return sig, codegen

    _prefetch = intrinsic(_prefetch_typed)
else:  # pragma: no cover - the numpy path never calls the kernels

    def _no_prefetch(array: Any, index: Any) -> None:  # noqa: ARG001
        return None

    _prefetch = _no_prefetch


#: How many probe keys ahead :func:`_lookup` asks for their filter bytes, and up to how many
#: keys in one call it does (beyond, the filter is taken to be in cache: measured at 1M/1M,
#: one timestamp's 29,826 keys gain, a 40-timestamp batch's 1.9 million keys lose ~5 %).
#: A plain probe of more keys than this is looked up by :func:`_lookup_warm` instead.
_AHEAD = 32
_COLD_KEYS = 1 << 17
#: No per-row radius bound (:func:`lookup_accept`): every entry met is tested against its result.
NO_BOUND = np.zeros(0, dtype=np.float64)


def kernel_name(requested: str | None = None) -> str:
    """The kernel to use: ``requested``, else ``numba`` when it imports, else ``numpy``."""
    name = (requested or ("numba" if HAVE_NUMBA else "numpy")).lower()
    if name not in KERNELS:
        raise ValueError(f"unknown kernel {name!r}; valid kernels: {', '.join(KERNELS)}")
    if name == "numba" and not HAVE_NUMBA:
        raise ValueError("kernel 'numba' asked for, but numba cannot be imported; use kernel='numpy'")
    return name


#: The postings' key filter (:class:`~dkmsks.core.postings.Postings`): bits of a slot
#: index and the multipliers of its two hashes. The filter is blocked: the first hash picks
#: a slot, the second one of the 512 slots of that slot's 64-byte block, so a key's two bits
#: cost one cache line, not two (the filters of 20 workers do not stay in cache between
#: their turns; docs/benchmarks.md has the measurement).
FILTER_BITS = 23
FILTER_MUL1 = np.uint64(0x9E3779B97F4A7C15)
FILTER_MUL2 = np.uint64(0xC2B2AE3D27D4EB4F)
FILTER_BLOCK_BITS = 9  # 512 one-bit slots: one 64-byte cache line
_FILTER_SHIFT = np.uint64(64 - FILTER_BITS)
_BLOCK_SHIFT = np.uint64(64 - FILTER_BLOCK_BITS)
_BLOCK_BASE = np.uint64(~((1 << FILTER_BLOCK_BITS) - 1) & ((1 << FILTER_BITS) - 1))


@_jit
def _filtered(present: Any, key: Any) -> bool:
    """Whether both filter slots of ``key`` are set."""
    u = np.uint64(key)
    a = (u * FILTER_MUL1) >> _FILTER_SHIFT
    b = (a & _BLOCK_BASE) | ((u * FILTER_MUL2) >> _BLOCK_SHIFT)
    seven = np.uint64(7)
    three = np.uint64(3)
    return bool((present[a >> three] >> (a & seven)) & (present[b >> three] >> (b & seven)) & np.uint8(1))


@_jit
def _filter_set(bits: Any, keys: Any) -> None:
    """Set both filter slots of each of ``keys`` (postings._filter_set's bits, one loop)."""
    seven = np.uint64(7)
    three = np.uint64(3)
    one = np.uint64(1)
    for i in range(keys.shape[0]):
        u = np.uint64(keys[i])
        a = (u * FILTER_MUL1) >> _FILTER_SHIFT
        b = (a & _BLOCK_BASE) | ((u * FILTER_MUL2) >> _BLOCK_SHIFT)
        bits[a >> three] |= np.uint8(one << (a & seven))
        bits[b >> three] |= np.uint8(one << (b & seven))


def filter_set(bits: Any, keys: Int64Array) -> None:
    """Set the key filter's slots of ``keys`` in the packed filter ``bits`` (compiled)."""
    _filter_set(bits, np.ascontiguousarray(keys, dtype=np.int64))


@_jit
def _grow(a: Any, n: int) -> Any:
    out = np.empty(max(2 * a.shape[0], n, 64), dtype=a.dtype)
    out[: a.shape[0]] = a
    return out


@_jit
def _grow_pairs(a_row: Any, a_oid: Any, a_d2: Any, a_ot: Any, n: int) -> Any:
    """The four arrays of accepted pairs (row, object id, d², object t), grown together to hold ``n``."""
    return _grow(a_row, n), _grow(a_oid, n), _grow(a_d2, n), _grow(a_ot, n)


@dataclass(frozen=True)
class SortedProbe:
    """A probe's distinct keys, ascending, and the objects that asked for each (CSR: the
    objects of ``keys[i]`` are ``owners[ptr[i]:ptr[i + 1]]``).

    Built once per timestamp for all the workers that share a probe (:meth:`of`). Against
    sorted postings it turns every worker's lookups into one forward pass (:func:`_gallop`)
    instead of a binary search from scratch per key, and a key that several objects share —
    the grid's coarse cells, the common keywords; ~40 % of the keys at the paper's defaults —
    is filtered and searched once.
    """

    keys: Int64Array
    ptr: Int64Array
    owners: Int64Array

    @classmethod
    def of(cls, qkeys: Int64Array, qowner: Int64Array) -> SortedProbe:
        """The sorted form of the probe ``(qkeys, qowner)`` (``qowner[i]`` asked for ``qkeys[i]``)."""
        # Any order of the objects within one key is fine: the merge orders accepted pairs by
        # (d², id) and the per-object counters are sums. The order is the stable one anyway:
        # a radix sort where numba is there (:func:`stable_order`), numpy's otherwise. Under
        # numba the sort and the grouping are one compiled call: the engine's shared probe
        # (~16,000 keys a timestamp at 1M/1M) otherwise paid six numpy passes on cold caches.
        if HAVE_NUMBA:
            return cls(*_sorted_form(np.ascontiguousarray(qkeys, dtype=np.int64),
                                     np.ascontiguousarray(qowner, dtype=np.int64)))
        order = stable_order(qkeys)
        keys = qkeys[order]
        starts = np.ones(keys.shape[0], dtype=np.bool_)
        starts[1:] = keys[1:] != keys[:-1]
        first = np.flatnonzero(starts)
        ptr = np.empty(first.shape[0] + 1, dtype=np.int64)
        ptr[:-1] = first
        ptr[-1] = keys.shape[0]
        return cls(keys[first], ptr, np.asarray(qowner, dtype=np.int64)[order])

    def pairs(self) -> tuple[Int64Array, Int64Array]:
        """Back to ``(key, object)`` pairs (sorted by key): the probe the numpy path reads."""
        return np.repeat(self.keys, np.diff(self.ptr)), self.owners


#: Bits of a radix digit in :func:`_radix_order`: 2,048 counters per digit stay in L1.
_DIGIT_BITS = 11


@_jit
def _radix_order(keys: Any) -> Any:
    """``np.argsort(keys, kind="stable")`` of int64 keys, by a least-significant-digit radix sort.

    Keys are mapped to unsigned order (sign bit flipped) and every digit's counts are taken in
    one pass; a digit in which all keys agree is skipped, so a grid probe's keys (cell << 32 |
    keyword: the keyword's high bits and the cell's top bits are the same everywhere) take a
    few scattering passes. Each pass is stable, so equal keys keep their input order.
    """
    n = keys.shape[0]
    order = np.arange(n)
    if n < 2:
        return order
    radix = 1 << _DIGIT_BITS
    n_digits = (64 + _DIGIT_BITS - 1) // _DIGIT_BITS
    mask = np.uint64(radix - 1)
    flip = np.uint64(1) << np.uint64(63)
    u = np.empty(n, dtype=np.uint64)
    count = np.zeros((n_digits, radix), dtype=np.int64)
    for i in range(n):
        v = np.uint64(keys[i]) ^ flip
        u[i] = v
        for j in range(n_digits):
            count[j, (v >> np.uint64(j * _DIGIT_BITS)) & mask] += 1
    u_next = np.empty(n, dtype=np.uint64)
    order_next = np.empty(n, dtype=np.int64)
    for j in range(n_digits):
        sh = np.uint64(j * _DIGIT_BITS)
        if count[j, (u[0] >> sh) & mask] == n:
            continue  # every key has the same digit here
        total = 0
        for d in range(radix):
            c = count[j, d]
            count[j, d] = total
            total += c
        for i in range(n):
            d = (u[i] >> sh) & mask
            at = count[j, d]
            count[j, d] = at + 1
            u_next[at] = u[i]
            order_next[at] = order[i]
        u, u_next = u_next, u
        order, order_next = order_next, order
    return order


@_jit
def _sorted_form(qkeys: Any, qowner: Any) -> Any:
    """:meth:`SortedProbe.of` compiled: the stable order of ``qkeys``, then the distinct keys,
    where each starts and the owners in that order, in one pass."""
    order = _radix_order(qkeys)
    n = qkeys.shape[0]
    keys = np.empty(n, dtype=np.int64)
    ptr = np.empty(n + 1, dtype=np.int64)
    owners = np.empty(n, dtype=np.int64)
    j = 0
    for i in range(n):
        o = order[i]
        k = qkeys[o]
        owners[i] = qowner[o]
        if j == 0 or k != keys[j - 1]:
            keys[j] = k
            ptr[j] = i
            j += 1
    ptr[j] = n
    return keys[:j], ptr[:j + 1], owners


def stable_order(keys: Int64Array) -> Int64Array:
    """The stable sorting order of int64 ``keys`` (as ``np.argsort(kind="stable")``): compiled
    where numba is there. Measured on the engine at 1M/1M: docs/benchmarks.md, "The probe's sort
    and the main server's re-costs"."""
    keys = np.ascontiguousarray(keys, dtype=np.int64)
    if not HAVE_NUMBA:
        return np.argsort(keys, kind="stable")
    return _radix_order(keys)


#: A probe as the index computes it (``(keys, object of each)``) or in its sorted form.
Probe = tuple[Int64Array, Int64Array] | SortedProbe


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
    n_keys = keys.shape[0]
    n_dkeys = dkeys.shape[0]
    bounded = s_r.shape[0] > 0
    for q in range(start, qkeys.shape[0]):
        key = qkeys[q]
        # Most probe keys have no posting: the filter drops them before any search.
        if not _filtered(present, key):
            continue
        # A key's entries are the run of its equal keys, in the main part and in the delta.
        lo0 = np.searchsorted(keys, key)
        hi0 = lo0
        while hi0 < n_keys and keys[hi0] == key:
            hi0 += 1
        lo1 = np.searchsorted(dkeys, key)
        hi1 = lo1
        while hi1 < n_dkeys and dkeys[hi1] == key:
            hi1 += 1
        if n + (hi0 - lo0) + (hi1 - lo1) > a_row.shape[0]:
            return q, n, n + (hi0 - lo0) + (hi1 - lo1)
        obj = qowner[q]
        ot = o_t[obj]
        ox = o_x[obj]
        oy = o_y[obj]
        oid = o_ids[obj]
        for part in range(2):
            # (Two explicit branches: choosing the arrays by `part` inside one loop ran ~40 % slower.)
            lo, hi = (lo0, hi0) if part == 0 else (lo1, hi1)
            for e in range(lo, hi):
                if part == 0:
                    row = prow[e]
                    # A main entry's epoch is its row's at the last rebuild (Postings.row_epochs).
                    if prow_epoch[row] != epoch[row]:
                        continue
                else:
                    row = drow[e]
                    if dep[e] != epoch[row]:
                        continue
                tested[obj] += 1
                dx = ox - s_x[row]
                dy = oy - s_y[row]
                d2 = dx * dx + dy * dy
                if bounded and d2 > s_r[row] * s_r[row]:
                    continue  # beyond the radius it was posted with: beyond the ball (module doc)
                if not (s_t[row] <= ot and ot < s_end[row]):
                    continue
                kk = s_k[row] - 1
                kid = s_ids[row, kk]
                kd2 = s_d2[row, kk]
                if _enters(d2, oid, kd2, kid):
                    a_row[n] = row
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
    for i in range(start, n_e):
        row = e_row[i]
        if row < 0:
            row = -row - 1
        elif prow_epoch[row] != epoch[row]:
            continue  # stale: a main entry's epoch is its row's at the last rebuild
        u = e_key[i]
        j0, j1 = (uptr[u], uptr[u + 1]) if csr else (u, u + 1)
        if n + (j1 - j0) > room:
            return i, n, n + (j1 - j0)
        for j in range(j0, j1):
            obj = uowner[j]
            ot = o_t[obj]
            tested[obj] += 1
            dx = o_x[obj] - s_x[row]
            dy = o_y[obj] - s_y[row]
            d2 = dx * dx + dy * dy
            if bounded and d2 > s_r[row] * s_r[row]:
                continue  # beyond the radius it was posted with: beyond the ball (module doc)
            if not (s_t[row] <= ot and ot < s_end[row]):
                continue
            kk = s_k[row] - 1
            kid = s_ids[row, kk]
            kd2 = s_d2[row, kk]
            oid = o_ids[obj]
            if _enters(d2, oid, kd2, kid):
                a_row[n] = row
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


@_jit
def _merge_sorted_into(keys, rows, epochs, n_old, new_keys, new_rows, new_epochs):  # noqa: ANN001, ANN202
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


def merge_sorted_into(keys: Int64Array, rows: Any, epochs: Any, n_old: int, new_keys: Int64Array, new_rows: Any,
                      new_epochs: Any) -> None:
    """Merge sorted entries ``(new_keys, new_rows, new_epochs)`` into the first ``n_old``
    (sorted) entries of ``keys``/``rows``/``epochs``, which have room for them, in place; a new
    entry goes before the old entries of an equal key (the order ``np.searchsorted``'s left
    side gives the reference path)."""
    if keys.shape[0] < n_old + new_keys.shape[0]:
        raise ValueError(f"no room: {keys.shape[0]} entries for {n_old} + {new_keys.shape[0]}")
    _merge_sorted_into(keys, rows, epochs, n_old, new_keys, new_rows, new_epochs)


@_jit
def _merge_accepted(s_ids, s_d2, s_k, all_rows, all_oid, all_d2):  # noqa: ANN001
    # Only pairs inside the row's ball as it stands can land or count (merge_accepted's doc);
    # in a catch-up round most are not (docs/benchmarks.md), so they go before the sort.
    inside = np.empty(all_rows.shape[0], dtype=np.int64)
    n = 0
    for i in range(all_rows.shape[0]):
        row = all_rows[i]
        kk = s_k[row] - 1
        kid = s_ids[row, kk]
        kd2 = s_d2[row, kk]
        if _enters(all_d2[i], all_oid[i], kd2, kid):
            inside[n] = i
            n += 1
    rows, oid, d2 = all_rows[inside[:n]], all_oid[inside[:n]], all_d2[inside[:n]]
    # Any order of a row's pairs will do (each row's group is sorted by (d², id) below). The
    # probe's radix sort, not numba's quicksort: its partitions are calls taking the arrays, two
    # atomic reference counts each (the radix sort took ~15 % less of this kernel on one-timestamp
    # merges at 1M/1M; the quicksort had taken ~20 % less than the mergesort; docs/benchmarks.md).
    order = _radix_order(rows)
    K = s_ids.shape[1]
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


def warm_up(requested: str | None = None) -> None:
    """Compile (or load from numba's cache) every kernel by running a tiny worker through one
    insertion, one re-index and one update, and a tiny main server's count: a process's first
    timestamp then pays no compile time (a cold compile takes ~10 s; the image build runs this
    once, docs/deployment.md).
    Nothing to do when the kernel in use (:func:`kernel_name` of ``requested``) is numpy."""
    if kernel_name(requested) != "numba":
        return
    from dkmsks.core.model import KeywordSets, Objects, Rect, Subscriptions
    from dkmsks.core.update import Worker

    kws = KeywordSets.from_lists([[0], [0, 1]])
    worker = Worker("dkm", Rect(0.0, 0.0, 1.0, 1.0), kernel="numba")
    worker.add(Subscriptions(np.array([1, 2]), np.array([0.2, 0.8]), np.array([0.2, 0.8]), kws,
                             np.array([1, 1], dtype=np.int32), np.zeros(2, dtype=np.int64)))
    objects = Objects(np.array([10, 11]), np.array([0.25, 0.7]), np.array([0.25, 0.7]), kws, np.ones(2, dtype=np.int64))
    worker.process(objects)
    worker.process(objects, SortedProbe.of(*worker.index.probe(objects)))  # a replay: no change
    filter_set(np.zeros(64, dtype=np.uint8), np.zeros(1, dtype=np.int64))
    one32 = np.zeros(1, dtype=np.int32)
    merge_sorted_into(np.zeros(2, dtype=np.int64), np.zeros(2, dtype=np.int32), np.zeros(2, dtype=np.int32), 1,
                      np.ones(1, dtype=np.int64), one32, one32)
    # A batch-sized plain probe takes _lookup_warm (a key without postings: nothing changes).
    many = np.full(_COLD_KEYS + 1, -1, dtype=np.int64)
    index: Any = worker.index  # a GridIndex: its postings and epochs
    lookup_accept(many, np.zeros(many.shape[0], dtype=np.int64), index.postings, index.epoch, worker.state, objects)
    list(worker.process_stepwise(Objects(np.array([12]), np.array([0.21]), np.array([0.21]),
                                         KeywordSets.from_lists([[0]]), np.full(1, 2, dtype=np.int64))))
    # The main server's compiled paths: small batches of Eq. 4 counts and their per-row sums,
    # Eq. 1 sums, the id search (dkmsks.core.stats_kernel), the refresh's pick and boxes
    # (dkmsks.core.partition.new_book).
    from dkmsks.core import stats_kernel
    from dkmsks.core.partition import new_book
    from dkmsks.core.stats import ObjectStatistics

    unit = np.array([0.0]), np.array([1.0])
    stats = ObjectStatistics.build(objects, 2, workers=1)
    stats.count_keyword_in_rects([0], unit[0], unit[0], unit[1], unit[1])
    rows = np.array([1])
    stats.keyword_sums_in_rects(kws, rows, unit[0], unit[0], unit[1], unit[1])
    stats.keyword_sums(kws, rows)
    ids = np.array([3, 5], dtype=np.int64)
    stats_kernel.bounds_in_buckets(ids, stats_kernel.axis_table(ids), ids)
    book = new_book.NewSubscriptionBook()
    book.add(ids, np.zeros(2, dtype=np.int32), np.zeros(2, dtype=np.int64), np.zeros(2), np.zeros(2), kws)
    new_book.pick_recosts(book, ids, np.ones(2), 0.5)
    new_book.ball_boxes_compiled(np.zeros(2), np.zeros(2), np.ones(2), Rect(0.0, 0.0, 1.0, 1.0))


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
