"""The postings' key filter, compiled: a blocked two-hash Bloom filter over the keys a worker's
postings hold (:class:`~dkmsks.core.postings.Postings` sets the same bits on the numpy path), so
that a lookup drops the probe keys without postings before any search."""

from __future__ import annotations

from typing import Any

import numpy as np

from dkmsks.core.jit import _inline, _jit

__all__ = ["FILTER_BITS", "FILTER_BLOCK_BITS", "FILTER_MUL1", "FILTER_MUL2", "filter_set"]

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


@_inline
def _filtered(present: Any, key: Any) -> bool:
    """Whether both filter slots of ``key`` are set (inlined: called once per probe key)."""
    u = np.uint64(key)
    a = (u * FILTER_MUL1) >> _FILTER_SHIFT
    b = (a & _BLOCK_BASE) | ((u * FILTER_MUL2) >> _BLOCK_SHIFT)
    seven = np.uint64(7)
    three = np.uint64(3)
    return bool((present[a >> three] >> (a & seven)) & (present[b >> three] >> (b & seven)) & np.uint8(1))


@_jit
def _filter_set(bits: Any, keys: Any) -> None:
    """Set both filter slots of each of ``keys`` (postings._filter_set's bits, one loop; called by
    :func:`~dkmsks.core.kernel.merge.delta_append` and :func:`filter_set`)."""
    seven = np.uint64(7)
    three = np.uint64(3)
    one = np.uint64(1)
    for i in range(keys.shape[0]):
        u = np.uint64(keys[i])
        a = (u * FILTER_MUL1) >> _FILTER_SHIFT
        b = (a & _BLOCK_BASE) | ((u * FILTER_MUL2) >> _BLOCK_SHIFT)
        bits[a >> three] |= np.uint8(one << (a & seven))
        bits[b >> three] |= np.uint8(one << (b & seven))


def filter_set(bits: Any, keys: Any) -> None:
    """Set the filter slots of ``keys`` in the packed filter ``bits``: a postings rebuild's whole
    filter in one compiled pass (12.8 ms by way of an 8 MiB bool array for a worker's 530,000
    keys at 1M/1M; the same bits)."""
    _filter_set(bits, np.ascontiguousarray(keys, dtype=np.int64))
