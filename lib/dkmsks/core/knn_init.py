"""Exact kNN of many subscriptions within a static object set (``O_init``).

STUB: the interface below is the contract; the implementation is being written.

Result layout used across the core ("kNN matrices"): for ``n`` subscriptions and a width
``K >= max(k)``, ``ids`` is int64 ``[n, K]`` and ``d2`` float64 ``[n, K]``; row ``i`` holds
the ``min(k_i, |O(s_i)|)`` best objects ordered by ``(d², object id)``, padded with ``-1``
and ``+inf``. The ball radius² of row ``i`` is ``d2[i, k_i - 1]`` (``inf`` while not full).
"""

from __future__ import annotations

from dkmsks.core.model import Float64Array, Int64Array, Objects, Subscriptions


class StaticKnnIndex:
    """Per-keyword spatial index over a static object set (DESIGN §3 fact 5)."""

    @classmethod
    def build(cls, objects: Objects, n_keywords: int) -> StaticKnnIndex:
        raise NotImplementedError

    def query(self, subs: Subscriptions, *, width: int | None = None) -> tuple[Int64Array, Float64Array]:
        """Exact kNN of every subscription over the indexed objects (ignores ``t``).

        Ties at equal distance are broken by object id, so the result is unique.
        """
        raise NotImplementedError
