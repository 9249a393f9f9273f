"""Set operations on id arrays by sorting, for the sizes where numpy's own are slow.

Since numpy 2.3, ``np.unique`` (and ``np.isin``, which calls it on its second argument) finds
distinct values with a hash table. On many distinct int64 ids that is several times slower
than sorting; measured with numpy 2.4.6 on this project's 2-core machine, distinct values of
random ids: 20,000 in 2.7 ms (sorting: 0.6), 1,000,000 in 0.80 s (0.05), 10,000,000 in
10.2 s (0.70). A publish checked its 1,000 object ids against the 1.16M landed ones with
``np.isin`` in ~1 s. These helpers sort instead, and only the smaller side where they can.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar, cast

import numpy as np
import numpy.typing as npt

#: An array type kept through :func:`insert_at` and :func:`delete_at` (same dtype in and out).
ArrayT = TypeVar("ArrayT", bound="np.ndarray[Any, Any]")


def member(values: npt.ArrayLike, pool: npt.ArrayLike) -> npt.NDArray[np.bool_]:
    """For each of ``values``, whether it occurs in ``pool`` (``np.isin`` by a sorted ``pool``:
    O((n + m) log m) for n values and m pool entries, so pass the smaller array as ``pool``)."""
    return in_sorted(values, np.sort(np.asarray(pool).ravel()))


def in_sorted(values: npt.ArrayLike, pool: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
    """:func:`member` for a ``pool`` that is sorted already (1-d): O(n log m), no copy of it."""
    values = np.asarray(values)
    if pool.shape[0] == 0 or values.size == 0:
        return np.zeros(values.shape, dtype=bool)
    at = np.searchsorted(pool, values)
    np.minimum(at, pool.shape[0] - 1, out=at)
    return pool[at] == values


def in_any_sorted(values: npt.ArrayLike, pools: Iterable[npt.NDArray[Any]]) -> npt.NDArray[np.bool_]:
    """For each of ``values``, whether it occurs in any of ``pools``, each sorted (1-d): the
    union of a few sorted arrays, as :meth:`dkmsks.storage.lake.Lake.sorted_values` gives it."""
    values = np.asarray(values)
    found = np.zeros(values.shape, dtype=bool)
    for pool in pools:
        found |= in_sorted(values, pool)
    return found


def has_duplicates(values: npt.ArrayLike) -> bool:
    """Whether any value of ``values`` occurs twice."""
    ordered = np.sort(np.asarray(values).ravel())
    return bool(ordered.shape[0] > 1 and np.any(ordered[1:] == ordered[:-1]))


#: Up to this many insertions or deletions, :func:`insert_at` and :func:`delete_at` copy the
#: kept runs slice by slice; beyond it, ``np.insert`` / ``np.delete`` (whose boolean-mask copy
#: has a fixed cost of a few tens of microseconds on a worker's 50,000-entry map, measured:
#: 5 insertions 34 µs against 13 µs by slices, 5 deletions 29 against 14).
SLICE_LIMIT = 32


def insert_at(a: ArrayT, pos: npt.ArrayLike, values: npt.ArrayLike) -> ArrayT:
    """``np.insert(a, pos, values)`` for ascending ``pos`` (as ``np.searchsorted`` of ascending
    values gives): a new array with ``values[j]`` placed before ``a[pos[j]]``."""
    pos = np.asarray(pos, dtype=np.int64)
    values = np.asarray(values, dtype=a.dtype)
    n = pos.shape[0]
    if n > SLICE_LIMIT:
        return cast(ArrayT, np.insert(a, pos, values))
    out = cast(ArrayT, np.empty(a.shape[0] + n, dtype=a.dtype))
    prev = 0
    for j, p in enumerate(pos.tolist()):
        out[prev + j : p + j] = a[prev:p]
        out[p + j] = values[j]
        prev = p
    out[prev + n :] = a[prev:]
    return out


def delete_at(a: ArrayT, pos: npt.ArrayLike) -> ArrayT:
    """``np.delete(a, pos)`` for ascending, distinct ``pos``: a new array without ``a[pos]``."""
    pos = np.asarray(pos, dtype=np.int64)
    n = pos.shape[0]
    if n > SLICE_LIMIT:
        return cast(ArrayT, np.delete(a, pos))
    out = cast(ArrayT, np.empty(a.shape[0] - n, dtype=a.dtype))
    prev = 0
    at = 0
    for p in pos.tolist():
        out[at : at + p - prev] = a[prev:p]
        at += p - prev
        prev = p + 1
    out[at:] = a[prev:]
    return out
