"""KOP: keyword-oriented partition (paper §3.1, Eq. 1 and Algorithm 1)."""

from __future__ import annotations

from typing import Any

import numpy as np

from dkmsks.core.model import Rect, Subscriptions
from dkmsks.core.partition._common import StatsLike, check_int_param, keyword_weights
from dkmsks.core.partition.greedy import algorithm1
from dkmsks.core.partition.plan import Method, PartitionPlan

__all__ = ["kop_partition"]


def kop_partition(stats: StatsLike, subs: Subscriptions, space: Rect, *, m: int) -> PartitionPlan:
    """Keyword-oriented partition.

    Cost (Eq. 1): ``C(s) = Σ_{λ ∈ s.ψ} P(λ)`` with ``P(λ) = |O_λ| / |O_init|``; assignment by
    Algorithm 1 (cost descending, least-loaded worker, ties: lower worker index, input order).
    KOP has no subsets: every ``subset`` entry of the plan is ``-1``.

    Parameters
    ----------
    stats
        :class:`~dkmsks.core.stats.ObjectStatistics` of ``O_init``.
    subs
        The initial subscriptions.
    space
        The data space (stored in the plan; KOP itself ignores space).
    m
        Number of workers (``>= 1``).
    """
    m = check_int_param("m", m)
    n = len(subs)
    weights = keyword_weights(stats, subs.keywords, np.arange(n, dtype=np.int64))
    workers, loads = algorithm1(weights, m)
    params: dict[str, Any] = {}
    return PartitionPlan(
        method=Method.KOP,
        m=m,
        params=params,
        space=space,
        n_objects=int(stats.n_objects),
        sub_ids=subs.ids,
        worker=workers,
        weight=weights,
        subset=np.full(n, -1, dtype=np.int64),
        load_weight=loads,
    )
