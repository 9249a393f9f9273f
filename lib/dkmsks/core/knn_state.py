"""Per-worker kNN state: the exact result ``A(s)`` of every subscription a worker holds.

The state is a set of flat numpy columns indexed by a *row* number (docs/design.md §3 fact 6: no
per-subscription Python objects). Rows hold the subscription itself (id, location, ``k``,
registration time, keywords) and its current result as one row of the "kNN matrices"
(:mod:`dkmsks.core.knn_init`): ``ids[row, :]`` int64 and ``d2[row, :]`` float64 ordered by
``(d², object id)``, padded with ``-1`` / ``+inf``.

Rows are recycled: removing a subscription frees its row for the next insertion. Indexes that
refer to rows must therefore never trust a row number alone; they keep a per-row epoch that
they bump when a row is freed (see :mod:`dkmsks.core.worker_index`).

Deletions inside a multi-timestamp batch (docs/design.md §3 fact 2) use a *liveness interval*:
``remove(ids, t=T)`` keeps the row answering objects with ``o.t < T`` and frees it once the
worker has seen objects up to ``T`` (its *watermark*).

References
----------
Paper §3 (initial phase, kNN matrices of the initial subscriptions); docs/design.md §1 (semantics).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from dkmsks.core.jit import kernel_name
from dkmsks.core.knn_state_kernel import balls_after, check_batch, clear_rows, write_rows
from dkmsks.core.model import (
    Float64Array,
    Int32Array,
    Int64Array,
    KeywordSets,
    KnnResult,
    Results,
    Subscriptions,
)
from dkmsks.core.sets import has_duplicates
from dkmsks.core.sub_map import sub_map

#: End of the liveness interval of a subscription that has not been deleted.
NEVER = np.iinfo(np.int64).max

#: Least growth of the row arrays, as a fraction of their capacity: small, because every row
#: costs the kNN matrices' width in ids and distances (doubling left up to half of them unused).
GROWTH = 1 / 32


def enters(d2: Any, oid: Any, kd2: Any, kid: Any) -> Any:
    """Whether an object at ``d2`` with id ``oid`` enters a result whose k-th is ``(kd2, kid)``
    (:meth:`KnnState.kth`): the result is not full (``kid < 0``), or the object comes before its
    k-th in the order ``(d², id)`` (docs/design.md §1, the tie-break). The exact test of every
    path: element-wise on arrays (the numpy reference), on scalars inside the compiled kernels
    (:mod:`dkmsks.core.kernel` compiles this very function)."""
    return (kid < 0) | (d2 < kd2) | ((d2 == kd2) & (oid < kid))


@dataclass(frozen=True)
class StateArrays:
    """A worker's state as plain arrays (what a Spark task reads and writes).

    Row ``i`` is one live subscription. ``ids``/``d2`` are kNN matrices of width
    ``K >= max(k)``; ``keywords`` is a CSR keyword set per row.
    """

    sub_ids: Int64Array
    x: Float64Array
    y: Float64Array
    keywords: KeywordSets
    k: Int32Array
    t: Int64Array
    ids: Int64Array
    d2: Float64Array

    def __len__(self) -> int:
        return int(self.sub_ids.shape[0])

    def subscriptions(self) -> Subscriptions:
        """The subscriptions of these arrays."""
        return Subscriptions(self.sub_ids, self.x, self.y, self.keywords, self.k, self.t)


class KnnState:
    """The subscriptions of one worker and their exact current kNN.

    Parameters
    ----------
    width
        Initial width ``K`` of the kNN matrices; grows when a subscription with a larger
        ``k`` arrives.
    capacity
        Initial number of rows; grows to what an insertion needs, and by at least
        :data:`GROWTH` of itself (so that a bulk load leaves no slack, and a stream of
        insertions little).
    kernel
        The worker's kernel (:func:`~dkmsks.core.jit.kernel_name`; default ``numba`` where it
        imports): it picks the sub id -> row map (:func:`~dkmsks.core.sub_map.sub_map`), a
        compiled hash table under ``numba``, the sorted numpy reference under ``numpy``.

    Notes
    -----
    Public arrays are views of the first :attr:`n_rows` rows; rows with ``in_use == False`` are
    free. ``end_t`` is :data:`NEVER` for a live subscription and the deletion timestamp for a
    retiring one (deleted inside the current batch, docs/design.md §3 fact 2).
    """

    def __init__(self, width: int = 1, capacity: int = 16, kernel: str | None = None) -> None:
        capacity = max(int(capacity), 1)
        self.K = max(int(width), 1)
        self._cap = capacity
        self.n_rows = 0  # high-water mark of rows ever used
        self.ids = np.full((capacity, self.K), -1, dtype=np.int64)
        self.d2 = np.full((capacity, self.K), np.inf, dtype=np.float64)
        self.k = np.zeros(capacity, dtype=np.int32)
        self.sub_id = np.full(capacity, -1, dtype=np.int64)
        self.x = np.zeros(capacity, dtype=np.float64)
        self.y = np.zeros(capacity, dtype=np.float64)
        self.t = np.zeros(capacity, dtype=np.int64)
        self.end_t = np.full(capacity, NEVER, dtype=np.int64)
        self.in_use = np.zeros(capacity, dtype=bool)
        # Keywords of row r are kw_pool[kw_start[r] : kw_start[r] + kw_len[r]]; the pool is
        # append-only and, once full, compacted into a pool GROWTH larger than its live part.
        self.kw_start = np.zeros(capacity, dtype=np.int64)
        self.kw_len = np.zeros(capacity, dtype=np.int32)
        self.kw_pool = np.zeros(max(capacity, 16), dtype=np.int32)
        self._kw_used = 0
        self._kw_live = 0
        # Free rows (below n_rows) are _free[:_n_free], each freed batch pushed in descending
        # order; insertions take rows from the top (the last freed first).
        self._free = np.zeros(16, dtype=np.int64)
        self._n_free = 0
        # sub id -> row of every live subscription (not of retiring rows). The hash table's key
        # of a row is sub_id[row]: an id is unmapped before its row's sub_id is cleared or reused.
        self.kernel = kernel_name(kernel)
        self._map = sub_map(self.kernel, capacity)
        #: Rows removed with a deletion time not yet reached (``end_t`` set, not yet freed).
        self._n_retiring = 0
        #: Largest object timestamp processed so far (frees retiring rows, see module doc).
        self.watermark = np.iinfo(np.int64).min

    # ------------------------------------------------------------------ sizes and lookups
    def __len__(self) -> int:
        """Number of live (mapped) subscriptions."""
        return len(self._map)

    @property
    def sub_ids(self) -> Int64Array:
        """Ids of the live subscriptions, ascending."""
        return self.sub_id[self.live_rows()]

    def live_rows(self) -> Int64Array:
        """Rows of the live subscriptions, in ascending sub-id order."""
        return self._map.sorted_rows(self.sub_id)

    def rows_of(self, sub_ids: npt.ArrayLike) -> Int64Array:
        """Row of each id, ``-1`` for ids that are not live here."""
        return self._map.rows_of(_id_batch(sub_ids), self.sub_id)

    def contains(self, sub_ids: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """Whether each of ``sub_ids`` is live in the state."""
        return self.rows_of(sub_ids) >= 0

    def kth(self, rows: Int64Array) -> tuple[Float64Array, Int64Array]:
        """``(d², id)`` of the k-th result of each row: ``(inf, -1)`` while not full."""
        kk = self.k[rows].astype(np.int64) - 1
        return self.d2[rows, kk], self.ids[rows, kk]

    def radius2(self, rows: Int64Array) -> Float64Array:
        """Squared ball radius of each row (``inf`` while ``|A(s)| < k``; docs/design.md §1)."""
        return self.kth(rows)[0]

    def balls_after(self, rows: Int64Array, after: int | None) -> tuple[Int64Array, Float64Array]:
        """Sub ids and squared ball radii of ``rows`` that are in use and were registered after
        ``after`` (every row in use for ``None``), in the order of ``rows``: what a worker reports
        to the main server's cost refresh (one compiled call under numba)."""
        if self.kernel == "numba":
            return balls_after(_plain(rows, np.int64), after is None, 0 if after is None else int(after), self.in_use,
                               self.t, self.sub_id, self.k, self.d2)
        rows = rows[self.in_use[rows]]
        if after is not None:
            rows = rows[self.t[rows] > after]
        return self.sub_id[rows].copy(), self.radius2(rows)

    def keywords_of(self, rows: Int64Array) -> KeywordSets:
        """Keyword sets of ``rows`` in CSR form."""
        rows = np.asarray(rows, dtype=np.int64)
        lengths = self.kw_len[rows].astype(np.int64)
        ptr = np.zeros(rows.shape[0] + 1, dtype=np.int64)
        np.cumsum(lengths, out=ptr[1:])
        offsets = np.arange(ptr[-1], dtype=np.int64) - np.repeat(ptr[:-1], lengths)
        ids = self.kw_pool[np.repeat(self.kw_start[rows], lengths) + offsets]
        return KeywordSets(ptr, ids.astype(np.int32, copy=False))

    # ------------------------------------------------------------------ growth
    def _grow_rows(self, need: int) -> None:
        if need <= self._cap:
            return
        cap = max(need, self._cap + max(int(self._cap * GROWTH), 16))

        def grow(a: np.ndarray, fill: object) -> np.ndarray:
            shape = (cap,) + a.shape[1:]
            b = np.full(shape, fill, dtype=a.dtype)
            b[: a.shape[0]] = a
            return b

        self.ids = grow(self.ids, -1)
        self.d2 = grow(self.d2, np.inf)
        self.k = grow(self.k, 0)
        self.sub_id = grow(self.sub_id, -1)
        self.x = grow(self.x, 0.0)
        self.y = grow(self.y, 0.0)
        self.t = grow(self.t, 0)
        self.end_t = grow(self.end_t, NEVER)
        self.in_use = grow(self.in_use, False)
        self.kw_start = grow(self.kw_start, 0)
        self.kw_len = grow(self.kw_len, 0)
        self._cap = cap

    def _grow_width(self, width: int) -> None:
        if width <= self.K:
            return
        pad = width - self.K
        self.ids = np.concatenate([self.ids, np.full((self._cap, pad), -1, np.int64)], axis=1)
        self.d2 = np.concatenate([self.d2, np.full((self._cap, pad), np.inf)], axis=1)
        self.K = width

    def _append_keywords(self, rows: Int64Array, kws: KeywordSets) -> None:
        n = int(kws.ids.shape[0])
        if self._kw_used + n > self.kw_pool.shape[0]:
            self._compact_keywords(extra=n)
        self.kw_pool[self._kw_used : self._kw_used + n] = kws.ids
        self.kw_start[rows] = self._kw_used + kws.ptr[:-1]
        self.kw_len[rows] = kws.lengths().astype(np.int32)
        self._kw_used += n
        self._kw_live += n

    def _compact_keywords(self, extra: int) -> None:
        # Rewrite the pool with only the rows in use, then make room for `extra` more ids.
        rows = np.flatnonzero(self.in_use[: self.n_rows])
        kws = self.keywords_of(rows)
        need = int(kws.ids.shape[0]) + extra
        size = need + max(int(need * GROWTH), 16)
        pool = np.zeros(size, dtype=np.int32)
        pool[: kws.ids.shape[0]] = kws.ids
        self.kw_pool = pool
        self.kw_start[rows] = kws.ptr[:-1]
        self._kw_used = int(kws.ids.shape[0])
        self._kw_live = self._kw_used

    def _take_rows(self, n: int) -> Int64Array:
        """``n`` rows for new subscriptions: free rows from the top of the stack first, then
        fresh ones."""
        m = min(n, self._n_free)
        taken = self._free[self._n_free - m : self._n_free][::-1]
        self._n_free -= m
        if m == n:
            return taken.copy()
        self._grow_rows(self.n_rows + n - m)
        fresh = np.arange(self.n_rows, self.n_rows + n - m, dtype=np.int64)
        self.n_rows += n - m
        return np.concatenate([taken, fresh])

    def _room_to_free(self, n: int) -> None:
        """Make room for ``n`` more rows on the free-row stack."""
        need = self._n_free + n
        if need > self._free.shape[0]:
            free = np.zeros(max(need, 2 * self._free.shape[0]), dtype=np.int64)
            free[: self._n_free] = self._free[: self._n_free]
            self._free = free

    # ------------------------------------------------------------------ add / remove
    def add(
        self,
        subs: Subscriptions,
        knn: tuple[Int64Array, Float64Array] | None = None,
    ) -> Int64Array:
        """Register subscriptions and return their rows.

        Parameters
        ----------
        subs
            The subscriptions; their ids must not be live here.
        knn
            Initial state as kNN matrices ``(ids[n, W], d2[n, W])`` (the exact kNN within
            ``O_init`` of initial subscriptions), or ``None`` for an empty result: a
            subscription registered after the initial phase starts empty (docs/design.md §1).

        Raises
        ------
        ValueError
            If an id is already live on this worker, is repeated, or ``k < 1``.
        """
        n = len(subs)
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        sid = _id_batch(subs.ids)
        if self.kernel == "numba":  # the checks below in two compiled calls
            sid = _plain(sid, np.int64)
            problem, k_max = check_batch(sid, _plain(subs.k, np.int32))
            duplicate, mapped, small = problem == 1, self._map.first_mapped(sid, self.sub_id) >= 0, problem == 2
        else:
            duplicate = has_duplicates(sid)
            mapped = not duplicate and bool(np.any(self.contains(sid)))
            small = bool(np.any(subs.k < 1))
            k_max = int(subs.k.max())
        if duplicate:
            raise ValueError("duplicate subscription ids in one add(); add each id once")
        if mapped:
            dup = sid[self.contains(sid)][:5].tolist()
            raise ValueError(f"subscriptions {dup} are already live on this worker; remove them first")
        if small:
            raise ValueError("every subscription needs k >= 1")
        self._grow_width(int(k_max))
        rows = self._take_rows(n)
        if self.kernel == "numba":
            self._write_compiled(rows, sid, subs)
        else:
            self._write(rows, sid, subs)
        if knn is not None:
            kid, kd2 = knn
            kid = np.asarray(kid, dtype=np.int64)
            kd2 = np.asarray(kd2, dtype=np.float64)
            if kid.shape[0] != n or kd2.shape != kid.shape:
                raise ValueError(f"initial kNN matrices must have {n} rows and equal shapes")
            w = min(kid.shape[1], self.K)
            # Keep only each row's k best: matrices may be wider than this row's k.
            cols = np.arange(w)[None, :]
            keep = cols < subs.k[:, None]
            self.ids[rows, :w] = np.where(keep, kid[:, :w], -1)
            self.d2[rows, :w] = np.where(keep, kd2[:, :w], np.inf)
        self._map.insert(sid, rows, self.sub_id)  # after sub_id[rows] = sid: the hash table reads it
        return rows

    def _write(self, rows: Int64Array, sid: Int64Array, subs: Subscriptions) -> None:
        """Register ``subs`` in ``rows`` with empty results (the numpy reference of
        :func:`~dkmsks.core.knn_state_kernel.write_rows`)."""
        self.sub_id[rows] = sid
        self.x[rows] = subs.x
        self.y[rows] = subs.y
        self.k[rows] = subs.k
        self.t[rows] = subs.t
        self.end_t[rows] = NEVER
        self.in_use[rows] = True
        self.ids[rows] = -1
        self.d2[rows] = np.inf
        self._append_keywords(rows, subs.keywords)

    def _write_compiled(self, rows: Int64Array, sid: Int64Array, subs: Subscriptions) -> None:
        """:meth:`_write` as one compiled call, the keyword pool grown beforehand."""
        kws = subs.keywords
        n_kw = int(kws.ptr[-1])
        if self._kw_used + n_kw > self.kw_pool.shape[0]:
            self._compact_keywords(extra=n_kw)
        write_rows(rows, sid, _plain(subs.x, np.float64), _plain(subs.y, np.float64), _plain(subs.k, np.int32),
                   _plain(subs.t, np.int64), _plain(kws.ptr, np.int64), _plain(kws.ids, np.int32), self._kw_used, NEVER,
                   self.sub_id, self.x, self.y, self.k, self.t, self.end_t, self.in_use, self.ids, self.d2,
                   self.kw_start, self.kw_len, self.kw_pool)
        self._kw_used += n_kw
        self._kw_live += n_kw

    def remove(self, sub_ids: npt.ArrayLike, t: int | npt.ArrayLike | None = None) -> Int64Array:
        """Delete subscriptions; returns their rows (ids not live here are ignored).

        With ``t=None`` the rows are freed at once. With ``t`` given (a deletion at timestamp
        ``t`` inside a batch still to be processed; one per id, or one for all), the id is
        released at once (it may be registered again) but the row keeps answering objects with
        ``o.t < t`` until the watermark reaches ``t`` (docs/design.md §3 fact 2); a row whose
        ``t`` the watermark has reached is freed at once (:attr:`in_use` tells which). An id
        asked twice counts once (its first ``t``).
        """
        q = _id_batch(sub_ids)
        rows = self._map.pop(q, self.sub_id)  # unmapped before _free_rows clears sub_id[rows]
        held = rows >= 0
        rows = rows[held]
        if rows.shape[0] == 0:
            return rows
        if t is None:
            self._free_rows(rows)
            return rows
        end = np.broadcast_to(np.asarray(t, dtype=np.int64), q.shape)[held]
        now = end <= self.watermark
        if now.any():
            self._free_rows(rows[now])
        later = np.flatnonzero(~now)
        if later.shape[0]:
            self.end_t[rows[later]] = end[later]
            self._n_retiring += int(later.shape[0])
        return rows

    def release_retired(self) -> Int64Array:
        """Free retiring rows whose deletion time the watermark has reached."""
        if self._n_retiring == 0:  # the common case: no scan of every row after each batch
            return np.zeros(0, dtype=np.int64)
        n = self.n_rows
        rows = np.flatnonzero(self.in_use[:n] & (self.end_t[:n] <= self.watermark))
        if rows.shape[0]:
            self._free_rows(rows)
            self._n_retiring -= int(rows.shape[0])
        return rows

    def advance(self, t_max: int) -> None:
        """Record that objects up to ``t_max`` have been processed."""
        self.watermark = max(self.watermark, int(t_max))

    def _free_rows(self, rows: Int64Array) -> None:
        """Clear the distinct ``rows`` and push them onto the free-row stack."""
        n = int(rows.shape[0])
        self._room_to_free(n)
        if self.kernel == "numba":
            self._kw_live -= int(clear_rows(rows, NEVER, self.sub_id, self.k, self.end_t, self.in_use, self.ids,
                                            self.d2, self.kw_len, self._free, self._n_free))
        else:
            self.in_use[rows] = False
            self.sub_id[rows] = -1
            self.k[rows] = 0
            self.ids[rows] = -1
            self.d2[rows] = np.inf
            self.end_t[rows] = NEVER
            self._kw_live -= int(self.kw_len[rows].sum())
            self.kw_len[rows] = 0
            self._free[self._n_free : self._n_free + n] = np.sort(rows)[::-1]
        self._n_free += n

    # ------------------------------------------------------------------ export / import
    def results(self) -> Results:
        """``A(s)`` of every live subscription (docs/design.md §1), keyed by subscription id."""
        out: Results = {}
        rows = self.live_rows()
        for sid, row in zip(self.sub_id[rows].tolist(), rows.tolist(), strict=True):
            kk = int(self.k[row])
            ids = self.ids[row, :kk]
            n = int(np.count_nonzero(ids >= 0))
            out[sid] = KnnResult(ids[:n].copy(), self.d2[row, :n].copy())
        return out

    def to_arrays(self, rows: Int64Array | None = None) -> StateArrays:
        """Subscriptions and their results as arrays.

        ``rows=None`` exports every live subscription, ascending by id; otherwise the given
        rows (e.g. those a batch updated, so that a caller writes only changed state), keeping
        only rows that hold a live subscription, ascending by id.
        """
        if rows is None:
            rows = self.live_rows()
        else:
            rows = np.asarray(rows, dtype=np.int64)
            # Live means mapped: a retiring row is unmapped even when its deletion time is the
            # largest timestamp (end_t then reads NEVER, as a live row's does).
            rows = rows[self.rows_of(self.sub_id[rows]) == rows]
            rows = rows[np.argsort(self.sub_id[rows], kind="stable")]
        return StateArrays(
            self.sub_id[rows].copy(),
            self.x[rows].copy(),
            self.y[rows].copy(),
            self.keywords_of(rows),
            self.k[rows].copy(),
            self.t[rows].copy(),
            self.ids[rows].copy(),
            self.d2[rows].copy(),
        )

    @classmethod
    def from_arrays(cls, arrays: StateArrays, kernel: str | None = None) -> KnnState:
        """Rebuild a state written by :meth:`to_arrays` (rows ``0..n-1`` in array order)."""
        n = len(arrays)
        width = max(int(arrays.ids.shape[1]) if arrays.ids.ndim == 2 else 1, 1)
        if n:
            width = max(width, int(arrays.k.max()))
        state = cls(width=width, capacity=max(n, 16), kernel=kernel)
        state.add(arrays.subscriptions(), (arrays.ids, arrays.d2))
        return state


def _id_batch(sub_ids: npt.ArrayLike) -> Int64Array:
    """Ids as a contiguous int64 vector (what the compiled map's functions are compiled for)."""
    return np.ascontiguousarray(np.asarray(sub_ids, dtype=np.int64).reshape(-1))


def _plain(a: npt.ArrayLike, dtype: type) -> np.ndarray:
    """``a`` as a writeable contiguous array of ``dtype``: the one type a compiled call of the
    state is compiled for (numba types a read-only array, as Arrow's zero-copy columns are,
    apart, and would compile it again inside a worker task)."""
    out: np.ndarray = np.asarray(a, dtype=dtype)
    return out if out.flags.writeable and out.flags.c_contiguous else np.array(out, dtype=dtype)
