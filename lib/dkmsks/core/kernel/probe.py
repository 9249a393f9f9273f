"""A probe's sorted form, shared by the workers built alike: the probe keys sorted once (a
radix sort, :func:`_radix_order`), each distinct key with the objects that asked for it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dkmsks.core.jit import HAVE_NUMBA, _jit
from dkmsks.core.model import Int64Array

__all__ = ["Probe", "SortedProbe", "stable_order"]

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


#: Bits of a digit of :func:`_stable_by`: 2,048 counters (16 KiB) stay in L1.
_PASS_BITS = 11


@_jit
def _bits(v: int) -> int:
    """The number of bits of non-negative ``v`` (0 for 0)."""
    b = 0
    while v > 0:
        v >>= 1
        b += 1
    return b


@_jit
def _stable_by(values: Any, order: Any, n_bits: int) -> Any:
    """``order`` stably re-sorted by ``values[order]`` (non-negative, below ``2^n_bits``): one
    counting pass per ``_PASS_BITS`` bits, least significant first. Where the values' range is
    known and small (a level's cells, keyword ids, a worker's rows) it takes fewer passes than
    :func:`_radix_order` and counts only the digits it sorts by."""
    n = order.shape[0]
    radix = 1 << _PASS_BITS
    count = np.empty(radix, dtype=np.int64)
    order = order.copy()  # the caller's order is read again (each level starts from it)
    out = np.empty(n, dtype=np.int64)
    for shift in range(0, n_bits, _PASS_BITS):
        count[:] = 0
        for i in range(n):
            count[(values[order[i]] >> shift) & (radix - 1)] += 1
        total = 0
        for d in range(radix):
            c = count[d]
            count[d] = total
            total += c
        for i in range(n):
            d = (values[order[i]] >> shift) & (radix - 1)
            out[count[d]] = order[i]
            count[d] += 1
        order, out = out, order
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
