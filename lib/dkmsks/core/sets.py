"""Set operations on id arrays by sorting, for the sizes where numpy's own are slow.

Since numpy 2.3, ``np.unique`` (and ``np.isin``, which calls it on its second argument) finds
distinct values with a hash table. On many distinct int64 ids that is several times slower
than sorting; measured with numpy 2.4.6 on this project's 2-core machine, distinct values of
random ids: 20,000 in 2.7 ms (sorting: 0.6), 1,000,000 in 0.80 s (0.05), 10,000,000 in
10.2 s (0.70). A publish checked its 1,000 object ids against the 1.16M landed ones with
``np.isin`` in ~1 s. These helpers sort instead, and only the smaller side where they can.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


def member(values: npt.ArrayLike, pool: npt.ArrayLike) -> npt.NDArray[np.bool_]:
    """For each of ``values``, whether it occurs in ``pool`` (``np.isin`` by a sorted ``pool``:
    O((n + m) log m) for n values and m pool entries, so pass the smaller array as ``pool``)."""
    values = np.asarray(values)
    pool = np.sort(np.asarray(pool).ravel())
    if pool.shape[0] == 0 or values.size == 0:
        return np.zeros(values.shape, dtype=bool)
    at = np.searchsorted(pool, values)
    np.minimum(at, pool.shape[0] - 1, out=at)
    return pool[at] == values


def has_duplicates(values: npt.ArrayLike) -> bool:
    """Whether any value of ``values`` occurs twice."""
    ordered = np.sort(np.asarray(values).ravel())
    return bool(ordered.shape[0] > 1 and np.any(ordered[1:] == ordered[:-1]))

