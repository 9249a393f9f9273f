"""Postings: the sorted multimap ``key → (row, epoch)`` every worker index is built on
(:mod:`dkmsks.core.worker_index`), with its key filter and its unsorted delta.

An index kind only decides the keys (a keyword, a subset and a keyword, a grid cell and a
keyword); storing, merging, filtering and answering them is the same for all and lives here.
The compiled lookup (:mod:`dkmsks.core.kernel`) reads these arrays directly.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise

import numpy as np
import numpy.typing as npt

from dkmsks.core import kernel
from dkmsks.core.kernel import kernel_name
from dkmsks.core.model import Int64Array
from dkmsks.core.sets import insert_at

#: Candidate pairs are produced in chunks of at most this many (bounds peak memory).
DEFAULT_BUDGET = 1 << 22


def expand_ranges(lo: Int64Array, hi: Int64Array) -> tuple[Int64Array, Int64Array]:
    """For ranges ``[lo_i, hi_i)`` return (owner ``i`` of each position, the positions)."""
    counts = hi - lo
    total = int(counts.sum())
    owner = np.repeat(np.arange(lo.shape[0], dtype=np.int64), counts)
    if total == 0:
        return owner, np.zeros(0, dtype=np.int64)
    starts = np.zeros(lo.shape[0], dtype=np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    pos = np.arange(total, dtype=np.int64) - np.repeat(starts - lo, counts)
    return owner, pos


#: Bits of the key filter's slot index: 2^23 one-bit slots, 1 MiB per index, two hash functions
#: (a Bloom filter). Packed bits, not bools: every object's probe keys hit the filter at random,
#: and a filter near a core's L2 cache size answers them several times faster than a larger one;
#: the second hash cuts the false positives that each cost a binary search (docs/benchmarks.md).
_FILTER_BITS = kernel.FILTER_BITS


def _filter_slots(keys: Int64Array) -> tuple[Int64Array, Int64Array]:
    """The two filter slots of each key: the top bits of a multiplicative hash, and a slot of
    the first one's 512-slot block from the top bits of a second hash (kernel.FILTER_BLOCK_BITS)."""
    u = keys.astype(np.uint64)
    first = (u * kernel.FILTER_MUL1) >> np.uint64(64 - _FILTER_BITS)
    block = np.uint64(kernel.FILTER_BLOCK_BITS)
    second = ((first >> block) << block) | ((u * kernel.FILTER_MUL2) >> np.uint64(64 - kernel.FILTER_BLOCK_BITS))
    return first.astype(np.int64), second.astype(np.int64)


def _filter_set(bits: npt.NDArray[np.uint8], keys: Int64Array) -> None:
    """Set the filter slots of ``keys`` in the packed filter ``bits`` (little bit order)."""
    for slot in _filter_slots(keys):
        np.bitwise_or.at(bits, slot >> 3, (1 << (slot & 7)).astype(np.uint8))


def _filter_test(bits: npt.NDArray[np.uint8], keys: Int64Array) -> npt.NDArray[np.bool_]:
    """Whether both filter slots of each key are set (``False``: the key has no posting)."""
    s1, s2 = _filter_slots(keys)
    first = bits[s1 >> 3] >> (s1 & 7).astype(np.uint8)
    second = bits[s2 >> 3] >> (s2 & 7).astype(np.uint8)
    return ((first & second) & 1).astype(np.bool_)


def _filter_bytes(bits: npt.NDArray[np.uint8] | None = None) -> npt.NDArray[np.uint8]:
    """An empty packed filter (or a copy of ``bits``) whose blocks start on 64-byte boundaries,
    so that a block is one cache line (large numpy arrays start 16 bytes into a page)."""
    n = 1 << (_FILTER_BITS - 3)
    raw = np.zeros(n + 64, dtype=np.uint8)
    skip = -raw.ctypes.data % 64
    out = raw[skip : skip + n]
    if bits is not None:
        out[:] = bits
    return out


def _filter_of(keys: Int64Array) -> npt.NDArray[np.uint8]:
    """A packed filter holding ``keys``."""
    present = np.zeros(1 << _FILTER_BITS, dtype=np.bool_)
    for slot in _filter_slots(keys):
        present[slot] = True
    return _filter_bytes(np.packbits(present, bitorder="little"))


class Postings:
    """A multimap ``int64 key → (row, epoch)``: a sorted main part plus an unsorted delta.

    The main part is two columns, one entry per position, ascending by key: ``keys`` and
    ``rows``. The entries of a key are the run of its equal keys, found with two binary
    searches; no CSR offsets, since nearly every key of the DkM-SKS grid (a cell and a keyword)
    has one or two entries, an offset per key would cost as much as the key. Rows are int32 (a
    worker holds far fewer than 2^31 rows): 12 bytes per entry.

    Every entry has an epoch; an entry whose epoch differs from the index's current epoch of its
    row is stale and is skipped by :meth:`pairs` (docs/design.md §3 fact 1: stale entries only
    ever add candidates that the caller would reject anyway — here they are even filtered
    before the distance test). A delta entry stores its epoch; the main part holds only the
    entries that were live at the last :meth:`rebuild`, so the epoch of a main entry is its
    row's epoch at that rebuild, kept once per row in ``row_epochs``.
    """

    def __init__(self, kernel_in_use: str | None = None) -> None:
        #: ``numba``: new entries go into the delta's buffers and set their filter bits in one
        #: compiled call, and a lookup sorts them in another (the same bits and arrays).
        self.compiled = kernel_name(kernel_in_use) == "numba"
        self.keys = np.zeros(0, dtype=np.int64)  # ascending, one per entry
        self.rows = np.zeros(0, dtype=np.int32)
        self.row_epochs = np.zeros(0, dtype=np.int32)  # each row's epoch at the last rebuild
        #: Every FENCE_STRIDE-th main key (kernel.FENCE_STRIDE): the compiled lookup finds a
        #: key's block in this small array and reads one block of the large one.
        self.fences = np.zeros(0, dtype=np.int64)
        # The delta: entries posted since the last merge, unsorted (lists of what each insert
        # gave), plus the part of them sorted by key by an earlier lookup (_sorted_delta), held
        # in buffers with room to grow: its first _n_sorted entries. Compiled, the unsorted
        # entries follow those in the same buffers (_n_pending of them), the lists stay empty.
        self._dk: list[Int64Array] = []
        self._dr: list[npt.NDArray[np.int32]] = []
        self._de: list[npt.NDArray[np.int32]] = []
        self._release_buffers()
        self._n_sorted = 0
        self._n_pending = 0
        self.n_delta = 0
        self.n_stale = 0
        # A blocked two-hash Bloom filter (_filter_slots) over every key inserted since the last
        # rebuild: most probe keys (an object's fine cells under its keywords) have no posting,
        # and dropping them before the binary searches halves a worker's update time.
        self._present = _filter_bytes()

    def __setstate__(self, state: dict[str, object]) -> None:
        # An unpickled array starts wherever the allocator put it: align the filter again.
        self.__dict__.update(state)
        self.__dict__.setdefault("_n_pending", 0)
        self._present = _filter_bytes(self._present)

    @property
    def n_main(self) -> int:
        """The number of entries in the sorted main part."""
        return int(self.rows.shape[0])

    def __len__(self) -> int:
        return self.n_main + self.n_delta

    def insert(self, keys: Int64Array, rows: Int64Array, epochs: npt.NDArray[np.int32]) -> None:
        """Add entries ``(key, row, epoch)`` to the unsorted delta part."""
        if keys.shape[0] == 0:
            return
        if self.compiled:
            # One compiled call into the buffers, after the entries already there: a worker
            # posts a few hundred entries a timestamp, where three list appends, their later
            # concatenation and sort cost more calls than the entries (docs/benchmarks.md).
            at = self._n_sorted + self._n_pending
            self._reserve(at + keys.shape[0])
            kernel.delta_append(self._sk, self._sr, self._se, at, keys, rows, epochs, self._present)
            self._n_pending += int(keys.shape[0])
            self.n_delta += int(keys.shape[0])
            return
        _filter_set(self._present, keys)
        self._dk.append(keys.astype(np.int64, copy=False))
        self._dr.append(rows.astype(np.int32, copy=False))
        self._de.append(epochs.astype(np.int32, copy=False))
        self.n_delta += int(keys.shape[0])

    def _release_buffers(self) -> None:
        """Empty delta buffers (keys, rows, epochs); :meth:`_reserve` grows them when needed."""
        self._sk = np.zeros(0, dtype=np.int64)
        self._sr = np.zeros(0, dtype=np.int32)
        self._se = np.zeros(0, dtype=np.int32)

    def _reserve(self, n: int) -> None:
        """Room for ``n`` delta entries in the buffers (grown by half, keeping those held)."""
        if n <= self._sk.shape[0]:
            return
        cap = max(n, int(self._sk.shape[0] * 1.5), 1024)
        used = self._n_sorted + self._n_pending
        for name in ("_sk", "_sr", "_se"):
            old = getattr(self, name)
            grown = np.empty(cap, dtype=old.dtype)
            grown[:used] = old[:used]
            setattr(self, name, grown)

    def pending(self) -> tuple[Int64Array, npt.NDArray[np.int32], npt.NDArray[np.int32]]:
        """Copies of the entries inserted since the last lookup (or rebuild), in insertion order."""
        if self.compiled:
            held = slice(self._n_sorted, self._n_sorted + self._n_pending)
            return self._sk[held].copy(), self._sr[held].copy(), self._se[held].copy()
        if not self._dk:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32)
        return np.concatenate(self._dk), np.concatenate(self._dr), np.concatenate(self._de)

    def _sorted_delta(self) -> tuple[Int64Array, npt.NDArray[np.int32], npt.NDArray[np.int32]]:
        """The delta sorted by key (views of buffers that the next call may change)."""
        if self._n_pending:
            # Compiled: sorted and merged in place, each new entry before the old ones of an
            # equal key, new entries of an equal key in insertion order (as below).
            kernel.merge_pending(self._sk, self._sr, self._se, self._n_sorted, self._n_pending)
            self._n_sorted += self._n_pending
            self._n_pending = 0
        if self._dk:
            # The delta grows by a few thousand entries a timestamp up to an eighth of the main
            # part: only the entries new since the last call are sorted, then merged into the
            # part sorted before (linear), each new entry before the old ones of an equal key.
            # Order within a key is irrelevant (see rebuild); a stable sort keeps the compiled
            # path's order, so that both kernels hold the same arrays.
            k, r, e = self.pending()
            order = np.argsort(k, kind="stable")
            k, r, e = k[order], r[order], e[order]
            self._dk, self._dr, self._de = [], [], []
            n_old = self._n_sorted
            at = np.searchsorted(self._sk[:n_old], k)
            self._sk = insert_at(self._sk[:n_old], at, k)
            self._sr = insert_at(self._sr[:n_old], at, r)
            self._se = insert_at(self._se[:n_old], at, e)
            self._n_sorted = n_old + k.shape[0]
        n = self._n_sorted
        return self._sk[:n], self._sr[:n], self._se[:n]

    def rebuild(self, current_epoch: npt.NDArray[np.int32]) -> None:
        """Merge the delta into the sorted part and drop stale entries."""
        # The main part and the delta, each sorted (the delta's new entries merged in first):
        # numpy's stable sort of int64 keys is a timsort, which merges two sorted runs in linear
        # time, where the default sort sorted them from scratch (1.6 against 9.6 ms for a
        # worker's 530,000 entries at 1M/1M, docs/benchmarks.md). Within a key the main part's
        # entries come first; that order is irrelevant to every caller (candidates are merged
        # by (row, d², id)), and both kernels hold the same arrays.
        dk, dr, de = self._sorted_delta()
        keys = np.concatenate([self.keys, dk])
        rows = np.concatenate([self.rows, dr])
        eps = np.concatenate([self.row_epochs[self.rows], de])
        valid = eps == current_epoch[rows]
        del eps
        keys, rows = keys[valid], rows[valid]
        order = np.argsort(keys, kind="stable")
        self.keys, self.rows = keys[order], rows[order]
        self.fences = self.keys[:: kernel.FENCE_STRIDE].copy()
        self.row_epochs = current_epoch.copy()
        del keys, rows, order
        self._n_sorted = 0  # the buffers stay, for the next delta, unless far larger than one:
        if self._sk.shape[0] > max(1024, self.n_main // 4):
            # The index's first build posts every entry through the delta, so its buffers would
            # keep the size of the whole index: half of a worker's index memory at 1M/1M
            # (docs/benchmarks.md, "The memory target lost"). A delta is merged long before it
            # reaches a quarter of the main part; the next insertion grows the buffers again.
            self._release_buffers()
        self.n_delta = 0
        self.n_stale = 0
        if self.compiled:  # the filter's bits set in one compiled pass (the same bits)
            self._present = _filter_bytes()
            kernel.filter_set(self._present, self.keys)
        else:
            self._present = _filter_of(self.keys)

    def pairs(
        self,
        qkeys: Int64Array,
        qowner: Int64Array,
        current_epoch: npt.NDArray[np.int32],
        budget: int = DEFAULT_BUDGET,
    ) -> Iterator[tuple[Int64Array, Int64Array]]:
        """Yield ``(owner, row)`` for every live entry under each query key, in chunks.

        ``qowner[i]`` is the object index that asked for ``qkeys[i]``; a chunk holds at most
        ``budget`` raw entries unless one query key alone has more.
        """
        if qkeys.shape[0] == 0:
            return
        hit = _filter_test(self._present, qkeys)
        qkeys, qowner = qkeys[hit], qowner[hit]
        if qkeys.shape[0] == 0:
            return
        # Sorted needles make searchsorted several times faster (each search starts from the
        # previous result); candidate order does not matter to the caller.
        order = np.argsort(qkeys)
        qkeys, qowner = qkeys[order], qowner[order]
        # Main part and delta: each key's entries are a run of equal keys.
        m_lo = np.searchsorted(self.keys, qkeys, side="left")
        m_hi = np.searchsorted(self.keys, qkeys, side="right")
        dk, dr, de = self._sorted_delta()
        d_lo = np.searchsorted(dk, qkeys, side="left")
        d_hi = np.searchsorted(dk, qkeys, side="right")
        counts = (m_hi - m_lo) + (d_hi - d_lo)
        cum = np.cumsum(counts)
        total = int(cum[-1]) if cum.shape[0] else 0
        if total == 0:
            return
        # Chunk boundaries over query keys so that each chunk expands to ~budget entries.
        marks = np.arange(budget, total, budget, dtype=np.int64)
        cuts = np.unique(np.concatenate([[0], np.searchsorted(cum, marks, side="left") + 1, [qkeys.shape[0]]]))
        for a, b in pairwise(cuts.tolist()):
            if a >= b:
                continue
            own_m, p_m = expand_ranges(m_lo[a:b], m_hi[a:b])
            own_d, p_d = expand_ranges(d_lo[a:b], d_hi[a:b])
            rows = np.concatenate([self.rows[p_m], dr[p_d]]).astype(np.int64)
            eps = np.concatenate([self.row_epochs[self.rows[p_m]], de[p_d]])
            owner = qowner[a:b][np.concatenate([own_m, own_d])]
            live = eps == current_epoch[rows]
            if not live.all():
                rows, owner = rows[live], owner[live]
            if rows.shape[0]:
                yield owner, rows
