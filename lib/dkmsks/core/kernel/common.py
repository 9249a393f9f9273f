"""What several kernels share: the exact test compiled from the reference's own function, and
growing an output array between calls of a loop."""

from __future__ import annotations

from typing import Any

import numpy as np

from dkmsks.core.jit import _jit
from dkmsks.core.knn_state import enters

#: The exact test (:func:`~dkmsks.core.knn_state.enters`) compiled from the reference's own
#: function, so the tie-break is written once; numba inlines it into the loops below.
_enters = _jit(enters)


@_jit
def _grow(a: Any, n: int) -> Any:
    out = np.empty(max(2 * a.shape[0], n, 64), dtype=a.dtype)
    out[: a.shape[0]] = a
    return out
