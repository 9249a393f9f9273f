"""A worker's map subscription id -> row (:class:`~dkmsks.core.knn_state.KnnState`), two ways.

Both maps hold exactly the *live* subscriptions of a state: an id is mapped from its
registration until its deletion, even when its row keeps answering objects for a while after
(a retiring row, deleted inside a batch: docs/design.md §3 fact 2). Their operations take a
batch of ids each and the state's ``sub_id`` column (the id each row holds):

- :meth:`rows_of` — the row of each id, ``-1`` where it is not mapped (:meth:`first_mapped`:
  whether any is);
- :meth:`insert` — map ids that are not mapped (and distinct) to their rows;
- :meth:`pop` — unmap ids, returning the row each had; ``-1`` for an id not mapped, or
  asked again after its first occurrence in the same batch (so no row comes back twice);
- :meth:`sorted_rows` — every mapped row, ascending by id (exports; rare).

:class:`SortedSubMap` is the numpy reference: two sorted arrays, searched by binary search.
:class:`HashSubMap` is an open-addressing hash table operated by compiled functions, one call per
batch: a timestamp's few insertions and deletions per worker then cost a few microseconds, where
the sorted map's dozen numpy calls on tiny arrays cost ~100 µs (measured at 1M/1M, 20 workers;
numbers in the commit that added it). ``tests/unit/test_sub_map.py`` drives both through the
same random sequences.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from dkmsks.core.jit import _jit, _prefetch
from dkmsks.core.model import Int64Array
from dkmsks.core.sets import delete_at, has_duplicates, insert_at

__all__ = ["MAP_SMALL", "HashSubMap", "SortedSubMap", "SubMap", "sub_map"]

#: The sorted map's small part is merged into the large one once it holds more ids than this,
#: or once the large part has more deleted ids than this and an eighth of it.
MAP_SMALL = 1024


def _find(ids: Int64Array, rows: npt.NDArray[np.int32], q: Int64Array) -> Int64Array:
    """The row of each of ``q`` in the sorted map ``(ids, rows)``, ``-1`` where it is absent."""
    if ids.shape[0] == 0:
        return np.full(q.shape[0], -1, dtype=np.int64)
    pos = np.minimum(np.searchsorted(ids, q), ids.shape[0] - 1)
    return np.where(ids[pos] == q, rows[pos].astype(np.int64), -1)


class SortedSubMap:
    """The reference map: sorted arrays and binary search (numpy only).

    Rows are int32 (a worker holds far fewer than 2^31 rows), in two sorted parts: a large one,
    where a deletion only marks the row -1, and a small one of the ids registered since the two
    were last merged. A timestamp's few insertions and deletions then copy the small part or
    mark a row, not the whole map (two 50,000-entry copies per call at 1M/1M, ~2.6 ms of a
    timestamp's 20 workers; docs/benchmarks.md). The ``sub_id`` arguments are not needed here:
    the map keeps its own copy of the ids.
    """

    def __init__(self, capacity: int = 16) -> None:  # noqa: ARG002 - the signature of both maps
        self._map_ids = np.zeros(0, dtype=np.int64)
        self._map_rows = np.zeros(0, dtype=np.int32)
        self._new_ids = np.zeros(0, dtype=np.int64)
        self._new_rows = np.zeros(0, dtype=np.int32)
        self._map_dead = 0  # ids of the large part marked deleted

    def __len__(self) -> int:
        return int(self._map_ids.shape[0] - self._map_dead + self._new_ids.shape[0])

    def rows_of(self, q: Int64Array, sub_id: Int64Array) -> Int64Array:  # noqa: ARG002
        """Row of each of ``q``, ``-1`` where it is not mapped."""
        rows = _find(self._map_ids, self._map_rows, q)  # a deleted id's mark is -1 too
        if self._new_ids.shape[0]:
            miss = rows < 0
            if miss.any():
                rows[miss] = _find(self._new_ids, self._new_rows, q[miss])
        return rows

    def first_mapped(self, q: Int64Array, sub_id: Int64Array) -> int:
        """Index in ``q`` of its first mapped id, ``-1`` if none is."""
        hit = np.flatnonzero(self.rows_of(q, sub_id) >= 0)
        return int(hit[0]) if hit.shape[0] else -1

    def insert(self, sid: Int64Array, rows: Int64Array, sub_id: Int64Array) -> None:  # noqa: ARG002
        """Map ids that are not mapped (an id deleted earlier may still be marked in the large
        part; the small part answers for it)."""
        order = np.argsort(sid, kind="stable")
        sid, rows = sid[order], rows[order]
        pos = np.searchsorted(self._new_ids, sid)
        self._new_ids = insert_at(self._new_ids, pos, sid)
        self._new_rows = insert_at(self._new_rows, pos, rows.astype(np.int32))
        if self._new_ids.shape[0] > MAP_SMALL:
            self._merge()

    def pop(self, q: Int64Array, sub_id: Int64Array) -> Int64Array:
        """Unmap ``q``; the row of each, ``-1`` where not mapped or asked before in ``q``."""
        rows = self.rows_of(q, sub_id)
        held = np.flatnonzero(rows >= 0)
        if held.shape[0] > 1 and has_duplicates(q[held]):
            _, first = np.unique(q[held], return_index=True)
            again = np.ones(held.shape[0], dtype=bool)
            again[first] = False
            rows[held[again]] = -1
            held = held[~again]
        if held.shape[0]:
            self._delete(q[held])
        return rows

    def sorted_rows(self, sub_id: Int64Array) -> Int64Array:  # noqa: ARG002
        """Every mapped row, ascending by id."""
        self._merge()
        return self._map_rows.astype(np.int64)

    def _delete(self, sid: Int64Array) -> None:
        """Unmap distinct mapped ids."""
        sid = np.sort(sid)
        n = self._map_ids.shape[0]
        pos = np.searchsorted(self._map_ids, sid)
        pos_c = np.minimum(pos, max(n - 1, 0))
        big = (pos < n) & (self._map_ids[pos_c] == sid) & (self._map_rows[pos_c] >= 0) if n else pos < 0
        marked = np.unique(pos[big])
        self._map_rows[marked] = -1
        self._map_dead += int(marked.shape[0])
        small = sid[~big]
        if small.shape[0]:
            at = np.searchsorted(self._new_ids, small)
            at = at[np.concatenate([[True], at[1:] != at[:-1]])] if at.shape[0] > 1 else at
            self._new_ids = delete_at(self._new_ids, at)
            self._new_rows = delete_at(self._new_rows, at)
        if self._map_dead > max(MAP_SMALL, n // 8):
            self._merge()

    def _merge(self) -> None:
        """One sorted map again: the large part without its marked ids, the small part merged in."""
        if self._new_ids.shape[0] == 0 and self._map_dead == 0:
            return
        keep = self._map_rows >= 0
        ids, rows = self._map_ids[keep], self._map_rows[keep]
        at = np.searchsorted(ids, self._new_ids)
        self._map_ids, self._map_rows = insert_at(ids, at, self._new_ids), insert_at(rows, at, self._new_rows)
        self._new_ids = np.zeros(0, dtype=np.int64)
        self._new_rows = np.zeros(0, dtype=np.int32)
        self._map_dead = 0


# ---------------------------------------------------------------------------- the hash table
#: Fibonacci hashing: the id times 2^64 / golden ratio, whose top bits are the home slot; it
#: spreads consecutive ids (the usual case) evenly over the table.
_HASH_MUL = np.uint64(0x9E3779B97F4A7C15)
#: How many ids ahead a batch asks for their home slots' cache lines (a worker's table, 512 KB
#: at 1M/1M, is mostly out of cache when its turn comes: 20 workers' tables do not fit).
_AHEAD = 16
#: Smallest table (slots; a power of two).
_MIN_SLOTS = 16


@_jit
def _home(key, shift):  # noqa: ANN001, ANN202 - compiled
    """The home slot of ``key`` in a table of ``2^(64 - shift)`` slots."""
    return np.int64((np.uint64(key) * _HASH_MUL) >> np.uint64(shift))


@_jit
def _slot_of(slots, shift, sub_id, key):  # noqa: ANN001, ANN202 - compiled
    """The slot holding ``key``'s row, ``-1`` if none does (linear probing: the run from the home
    slot to the first empty slot holds every key whose home it passes)."""
    mask = slots.shape[0] - 1
    at = _home(key, shift)
    while True:
        row = slots[at]
        if row < 0:
            return -1
        if sub_id[row] == key:
            return at
        at = (at + 1) & mask


@_jit
def _hash_rows_of(slots, shift, sub_id, q, out):  # noqa: ANN001, ANN202 - compiled
    """``out[i]``: the row of ``q[i]``, ``-1`` if not mapped."""
    n = q.shape[0]
    for i in range(min(n, _AHEAD)):
        _prefetch(slots, _home(q[i], shift))
    for i in range(n):
        if i + _AHEAD < n:
            _prefetch(slots, _home(q[i + _AHEAD], shift))
        at = _slot_of(slots, shift, sub_id, q[i])
        out[i] = slots[at] if at >= 0 else -1


@_jit
def _hash_first_mapped(slots, shift, sub_id, q):  # noqa: ANN001, ANN202 - compiled
    """Index of the first of ``q`` that is mapped, ``-1`` if none is."""
    for i in range(q.shape[0]):
        if _slot_of(slots, shift, sub_id, q[i]) >= 0:
            return i
    return -1


@_jit
def _hash_insert(slots, shift, keys, rows):  # noqa: ANN001, ANN202 - compiled
    """Put ``rows`` (of the distinct ``keys``, none of them in the table) in the first empty
    slot from each key's home. The caller keeps the load at most 1/2, so an empty slot exists."""
    mask = slots.shape[0] - 1
    n = keys.shape[0]
    for i in range(min(n, _AHEAD)):
        _prefetch(slots, _home(keys[i], shift))
    for i in range(n):
        if i + _AHEAD < n:
            _prefetch(slots, _home(keys[i + _AHEAD], shift))
        at = _home(keys[i], shift)
        while slots[at] >= 0:
            at = (at + 1) & mask
        slots[at] = rows[i]


@_jit
def _hash_pop(slots, shift, sub_id, q, out):  # noqa: ANN001, ANN202 - compiled
    """Unmap each of ``q``: ``out[i]`` its row, ``-1`` if not mapped (or unmapped by an earlier
    ``q[j]``); returns how many were unmapped.

    Deletion by backward shift (no tombstones, so lookups never walk past dead slots): after the
    emptied slot, each row of the run moves back into the hole unless its home lies cyclically
    after the hole (it would then be unreachable from its home); the run's last hole is emptied.
    Rows keep their ``sub_id`` while in the table, so a moved row's home is recomputed from it.
    """
    mask = slots.shape[0] - 1
    n = q.shape[0]
    for i in range(min(n, _AHEAD)):
        _prefetch(slots, _home(q[i], shift))
    popped = 0
    for i in range(n):
        if i + _AHEAD < n:
            _prefetch(slots, _home(q[i + _AHEAD], shift))
        hole = _slot_of(slots, shift, sub_id, q[i])
        if hole < 0:
            out[i] = -1
            continue
        out[i] = slots[hole]
        popped += 1
        at = (hole + 1) & mask
        while True:
            row = slots[at]
            if row < 0:
                break
            home = _home(sub_id[row], shift)
            # The row may fill the hole iff the hole is on its probe path: home .. at, cyclically.
            if ((at - home) & mask) >= ((at - hole) & mask):
                slots[hole] = row
                hole = at
            at = (at + 1) & mask
        slots[hole] = -1
    return popped


@_jit
def _hash_rehash(old, slots, shift, sub_id):  # noqa: ANN001, ANN202 - compiled
    """Insert every row of the table ``old`` into the empty table ``slots``."""
    mask = slots.shape[0] - 1
    for i in range(old.shape[0]):
        row = old[i]
        if row >= 0:
            at = _home(sub_id[row], shift)
            while slots[at] >= 0:
                at = (at + 1) & mask
            slots[at] = row


class HashSubMap:
    """The compiled map: an open-addressing hash table of rows, keyed by the rows' ids.

    A slot holds an int32 row (``-1``: empty); the key of a row is ``sub_id[row]``, the state's own
    column, so the table costs 4 bytes a slot, and at load at most 1/2 (it doubles beyond) 8 to
    16 bytes a subscription (the sorted map: 12). Linear probing from a multiplicative hash,
    deletion by backward shift.

    The key is read from ``sub_id`` for rows *in the table* only, which is sound because the
    state unmaps an id (:meth:`pop`) before anything overwrites its row's ``sub_id``: a retiring
    row, deleted but still answering objects, keeps its id while out of the table, and the same
    id may meanwhile be mapped to a new row.
    """

    def __init__(self, capacity: int = 16) -> None:
        self._slots = np.full(_slots_for(capacity), -1, dtype=np.int32)
        self._shift = _shift_of(self._slots.shape[0])
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def rows_of(self, q: Int64Array, sub_id: Int64Array) -> Int64Array:
        """Row of each of ``q``, ``-1`` where it is not mapped."""
        out = np.empty(q.shape[0], dtype=np.int64)
        _hash_rows_of(self._slots, self._shift, sub_id, q, out)
        return out

    def first_mapped(self, q: Int64Array, sub_id: Int64Array) -> int:
        """Index in ``q`` of its first mapped id, ``-1`` if none is (one compiled call: the
        check of every insertion)."""
        return int(_hash_first_mapped(self._slots, self._shift, sub_id, q))

    def insert(self, sid: Int64Array, rows: Int64Array, sub_id: Int64Array) -> None:
        """Map the distinct ids ``sid``, none of them mapped, to ``rows`` (``sub_id[rows]`` must
        already be ``sid``: a later table growth rehashes by it)."""
        need = self._n + int(sid.shape[0])
        if 2 * need > self._slots.shape[0]:
            self._grow(need, sub_id)
        _hash_insert(self._slots, self._shift, sid, rows)
        self._n = need

    def pop(self, q: Int64Array, sub_id: Int64Array) -> Int64Array:
        """Unmap ``q``; the row of each, ``-1`` where not mapped or asked before in ``q``."""
        out = np.empty(q.shape[0], dtype=np.int64)
        self._n -= int(_hash_pop(self._slots, self._shift, sub_id, q, out))
        return out

    def sorted_rows(self, sub_id: Int64Array) -> Int64Array:
        """Every mapped row, ascending by id (ids are distinct: any sort gives the one order)."""
        rows = self._slots[self._slots >= 0].astype(np.int64)
        return rows[np.argsort(sub_id[rows])]

    def _grow(self, need: int, sub_id: Int64Array) -> None:
        """Rehash into a table of at least twice the slots, and of at least ``2 * need``."""
        size = max(2 * self._slots.shape[0], _slots_for(need))
        slots = np.full(size, -1, dtype=np.int32)
        shift = _shift_of(size)
        _hash_rehash(self._slots, slots, shift, sub_id)
        self._slots, self._shift = slots, shift


def _slots_for(n: int) -> int:
    """The least power of two (at least :data:`_MIN_SLOTS`) that holds ``n`` ids at load <= 1/2."""
    return max(_MIN_SLOTS, 1 << max(2 * int(n) - 1, 1).bit_length())


def _shift_of(size: int) -> int:
    """The right shift that takes a 64-bit hash to a slot of a table of ``size`` slots."""
    return 64 - (size.bit_length() - 1)


#: What :class:`~dkmsks.core.knn_state.KnnState` calls on its map.
SubMap = SortedSubMap | HashSubMap


def sub_map(kernel: str, capacity: int = 16) -> SubMap:
    """The map of a state whose worker runs ``kernel`` (a name :func:`~dkmsks.core.jit.kernel_name`
    returned): the hash table under ``numba``, the sorted reference under ``numpy``."""
    return HashSubMap(capacity) if kernel == "numba" else SortedSubMap(capacity)
