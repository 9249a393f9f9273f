"""A worker's state rows written and cleared by one compiled call each (numba).

A timestamp brings a worker a handful of insertions and deletions (at 1M/1M, m = 20: ~5 of
each). :class:`~dkmsks.core.knn_state.KnnState` writes a new subscription into a dozen columns
and the keyword pool, and clears a freed row in as many: two dozen numpy calls on arrays of
five, whose fixed costs (~1 µs each) made a worker's insertion ~40 µs and the twenty workers'
insertions and deletions ~1.5 ms of a timestamp (docs/benchmarks.md). Under the ``numba``
kernel the state makes one call of each function below instead; sizes (capacity, width, the
pool, the free-row stack) are still checked and grown by the state before the call, so these
loops grow nothing. The numpy statements of the state stay the reference:
``tests/unit/test_knn_state.py`` drives both kernels through the same sequences and compares
every column. Both functions take the state's columns as they are and the batch's columns
cast to their dtypes by the state, so each compiles once.
"""

from __future__ import annotations

import numpy as np

from dkmsks.core.jit import _jit

__all__ = ["balls_after", "check_batch", "clear_rows", "write_rows"]


@_jit
def check_batch(sid, k):  # noqa: ANN001, ANN201 - compiled
    """What :meth:`~dkmsks.core.knn_state.KnnState.add` refuses in a batch, in its order:
    ``(1, _)`` when an id occurs twice, ``(2, _)`` when some ``k < 1``, else ``(0, max k)``."""
    k_max = 0
    below = False
    for i in range(k.shape[0]):
        below |= k[i] < 1
        k_max = max(k_max, k[i])
    if sid.shape[0] > 1:
        ordered = np.sort(sid)
        for i in range(1, ordered.shape[0]):
            if ordered[i] == ordered[i - 1]:
                return 1, k_max
    return (2 if below else 0), k_max


@_jit
def write_rows(rows, sid, x, y, k, t, kw_ptr, kw_ids, kw_used, never,  # noqa: ANN001, ANN201 - compiled
               s_sub_id, s_x, s_y, s_k, s_t, s_end_t, s_in_use, s_ids, s_d2, s_kw_start, s_kw_len, kw_pool):
    """Register subscription ``i`` of a batch in state row ``rows[i]``: its columns, an empty
    result (ids ``-1``, distances ``inf``), live until ``never``, and its keywords appended to
    the pool from ``kw_used`` on (``kw_ptr`` starts at 0, the batch's CSR pointer)."""
    width = s_ids.shape[1]
    for i in range(rows.shape[0]):
        r = rows[i]
        s_sub_id[r] = sid[i]
        s_x[r] = x[i]
        s_y[r] = y[i]
        s_k[r] = k[i]
        s_t[r] = t[i]
        s_end_t[r] = never
        s_in_use[r] = True
        for j in range(width):
            s_ids[r, j] = -1
            s_d2[r, j] = np.inf
        s_kw_start[r] = kw_used + kw_ptr[i]
        s_kw_len[r] = kw_ptr[i + 1] - kw_ptr[i]
    for j in range(kw_ptr[rows.shape[0]]):
        kw_pool[kw_used + j] = kw_ids[j]


@_jit
def clear_rows(rows, never, s_sub_id, s_k, s_end_t, s_in_use, s_ids, s_d2, s_kw_len,  # noqa: ANN001, ANN201 - compiled
               stack, n_free):
    """Free the distinct state ``rows``: clear their columns and results and push them onto the
    free-row stack above its ``n_free`` rows, in descending order (the order
    the numpy path of :meth:`~dkmsks.core.knn_state.KnnState._free_rows` gives). Returns how many keyword ids
    the rows held (the pool's live count drops by as many)."""
    width = s_ids.shape[1]
    held = 0
    for i in range(rows.shape[0]):
        r = rows[i]
        s_in_use[r] = False
        s_sub_id[r] = -1
        s_k[r] = 0
        for j in range(width):
            s_ids[r, j] = -1
            s_d2[r, j] = np.inf
        s_end_t[r] = never
        held += s_kw_len[r]
        s_kw_len[r] = 0
    ascending = np.sort(rows)
    n = ascending.shape[0]
    for i in range(n):
        stack[n_free + i] = ascending[n - 1 - i]
    return held


@_jit
def balls_after(rows, every, after, s_in_use, s_t, s_sub_id, s_k, s_d2):  # noqa: ANN001, ANN201 - compiled
    """The sub id and squared ball radius (the k-th result's ``d²``) of each of ``rows`` in use
    and registered after ``after`` (or ``every`` one in use), in the order of ``rows``: what a
    worker reports to the main server's cost refresh after a timestamp."""
    ids = np.empty(rows.shape[0], dtype=np.int64)
    radius2 = np.empty(rows.shape[0], dtype=np.float64)
    n = 0
    for i in range(rows.shape[0]):
        r = rows[i]
        if s_in_use[r] and (every or s_t[r] > after):
            ids[n] = s_sub_id[r]
            radius2[n] = s_d2[r, s_k[r] - 1]
            n += 1
    return ids[:n], radius2[:n]
