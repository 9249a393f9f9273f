"""Statistics of ``O_init`` used by the cost models (paper Eq. 1, 2 and 4).

STUB: the interface below is the contract; the implementation is being written.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from dkmsks.core.model import Float64Array, Int64Array, Objects


class ObjectStatistics:
    """Exact counting structure over ``O_init``.

    Answers, for millions of queries at a time:
    - ``keyword_counts(kw)``: ``|O_λ|`` (Eq. 1 numerator);
    - ``count_in_rects(xmin, ymin, xmax, ymax)``: ``|O_R|`` for closed rectangles (Eq. 2);
    - ``count_keyword_in_rects(kw, xmin, ymin, xmax, ymax)``: ``|O_{R,λ}|`` per (keyword, rect)
      pair (Eq. 4).
    Probabilities are the counts divided by ``n_objects``. Keywords never seen in ``O_init``
    (ids >= the vocabulary size at build time) count zero.
    """

    n_objects: int

    @classmethod
    def build(cls, objects: Objects, n_keywords: int) -> ObjectStatistics:
        raise NotImplementedError

    def keyword_counts(self, kw: npt.ArrayLike) -> Int64Array:
        raise NotImplementedError

    def count_in_rects(
        self, xmin: Float64Array, ymin: Float64Array, xmax: Float64Array, ymax: Float64Array
    ) -> Int64Array:
        raise NotImplementedError

    def count_keyword_in_rects(
        self,
        kw: npt.ArrayLike,
        xmin: Float64Array,
        ymin: Float64Array,
        xmax: Float64Array,
        ymax: Float64Array,
    ) -> Int64Array:
        raise NotImplementedError


def keyword_probability(stats: ObjectStatistics, kw: npt.ArrayLike) -> Float64Array:
    """``P(λ) = |O_λ| / |O_init|`` (Eq. 1)."""
    return np.asarray(stats.keyword_counts(kw), dtype=np.float64) / max(stats.n_objects, 1)
