"""Partitioners (KOP, SOP, DkM-SKS; PS²Stream extended to kNN) and the main server (§3–§4).

Pure numpy: no Spark, no file I/O, no clock, no randomness. Entry points:

- :func:`partition` — the initial partition of ``S`` into a :class:`PartitionPlan`;
- :class:`MainServer` — assigns new subscriptions and handles deletions with ``C(w)``.

A plan travels as JSON (:meth:`PartitionPlan.to_json`) or, for tables, as
:meth:`PartitionPlan.to_tables` (a small JSON-compatible ``meta`` dict plus numpy columns per
subscription and per subset) and back with :meth:`PartitionPlan.from_tables`.

Measured on 2 shared cores, 1M real objects and 1M paper-protocol subscriptions, ``m = 20``
(the partition benchmark, in git history: ``git show 1942197:lib/dkmsks/bench/partition.py``):
KOP 0.4 s; SOP 0.6 s; DkM-SKS (Algorithm 2 + 3, 859k subsets) 16 s, plus 10 s for the initial
kNN that SOP, DkM-SKS and PS²Stream need; PS²Stream (400 leaves) 7.2 s with the machine shared with other
jobs (load average about 7).
"""

from __future__ import annotations

from typing import Any

from dkmsks.core.config import DEFAULTS, Method, PartitionConfig
from dkmsks.core.model import Objects, Rect, Subscriptions
from dkmsks.core.partition._common import StatsLike, check_int_param, knn_radius2
from dkmsks.core.partition.dkm import dkm_partition
from dkmsks.core.partition.greedy import algorithm1, algorithm3
from dkmsks.core.partition.kop import kop_partition
from dkmsks.core.partition.plan import PartitionPlan, SplitKind, SubsetTable
from dkmsks.core.partition.ps2 import ps2_partition
from dkmsks.core.partition.server import MainServer
from dkmsks.core.partition.sop import sop_partition

__all__ = [
    "Method",
    "PartitionPlan",
    "SplitKind",
    "SubsetTable",
    "MainServer",
    "partition",
    "kop_partition",
    "sop_partition",
    "dkm_partition",
    "ps2_partition",
    "algorithm1",
    "algorithm3",
]


def partition(
    method: Method | str,
    stats: StatsLike | None,
    knn: Any,
    subs: Subscriptions,
    space: Rect,
    *,
    m: int,
    theta: int = DEFAULTS.theta,
    gamma1: int = DEFAULTS.gamma1,
    gamma2: int = DEFAULTS.gamma2,
    objects: Objects | None = None,
    ps2_theta: int = DEFAULTS.ps2_theta,
    ps2_rho: float = DEFAULTS.ps2_rho,
    ps2_alpha: int = DEFAULTS.ps2_alpha,
    ps2_beta: int = DEFAULTS.ps2_beta,
) -> PartitionPlan:
    """Partition the initial subscriptions with KOP, SOP, DkM-SKS (docs/design.md §2) or PS²Stream
    extended to kNN (docs/design.md §2.5).

    Deterministic: the same inputs give an identical plan.

    Parameters
    ----------
    method
        ``"kop"``, ``"sop"``, ``"dkm"`` or ``"ps2"`` (or a :class:`Method`).
    stats
        :class:`~dkmsks.core.stats.ObjectStatistics` of ``O_init`` (``ps2`` counts objects
        itself and only checks ``stats.n_objects`` against ``objects``; it may be ``None``).
    knn
        The balls of ``subs`` in ``O_init``: a :class:`~dkmsks.core.knn_init.StaticKnnIndex`
        (queried here), or the kNN matrices ``(ids, d2)`` of ``subs`` in row order, or ``d2``.
        Ignored (may be ``None``) for KOP.
    subs
        The initial subscriptions.
    space
        The data space (:func:`dkmsks.core.model.data_space`).
    m
        Number of workers (``>= 1``).
    theta
        SOP: split until ``θ·m`` regions (``>= 1``). Defaults: :data:`dkmsks.core.config.DEFAULTS`.
    gamma1, gamma2
        DkM-SKS: Algorithm 2 targets ``γ1·m`` subsets; subsets of at most ``γ2``
        subscriptions also try Hybrid-Partition.
    objects
        PS²Stream: ``O_init`` itself (points and keyword sets), which it counts per part
        (docs/design.md §2.5). Ignored by the other methods.
    ps2_theta, ps2_rho, ps2_alpha, ps2_beta
        PS²Stream (docs/design.md §2.5): split until ``θ_ps·m`` leaves (``>= 1``); balance factor
        ``ρ`` in ``[0.5, 1)``; integer count weights ``α`` (objects) and ``β`` (subscriptions),
        ``>= 0`` and not both 0. Validated for every method.
    """
    m = check_int_param("m", m)
    # The tuning parameters are checked by their one declaration (dkmsks.core.config).
    config = PartitionConfig(method=Method.from_str(method), workers=m, theta=theta, gamma1=gamma1, gamma2=gamma2,
                             ps2_theta=ps2_theta, ps2_rho=ps2_rho, ps2_alpha=ps2_alpha, ps2_beta=ps2_beta)
    method, theta, gamma1, gamma2 = config.method, config.theta, config.gamma1, config.gamma2
    ps2_theta, ps2_rho, ps2_alpha, ps2_beta = config.ps2_theta, config.ps2_rho, config.ps2_alpha, config.ps2_beta
    if space.xmin > space.xmax or space.ymin > space.ymax:
        raise ValueError(f"data space {space} is empty")
    if method is not Method.KOP and knn is None:
        raise ValueError(f"{method.value} needs the kNN of the subscriptions in O_init")
    if method is Method.PS2:
        if objects is None:
            raise ValueError("ps2 needs objects=O_init: it counts objects per part, not from statistics")
        if stats is not None and int(stats.n_objects) != len(objects):
            raise ValueError(f"stats describe {stats.n_objects} objects but objects= holds {len(objects)}")
        return ps2_partition(objects, knn_radius2(knn, subs), subs, space, m=m, theta=ps2_theta,
                             rho=ps2_rho, alpha=ps2_alpha, beta=ps2_beta)
    if stats is None:
        raise ValueError(f"{method.value} needs the ObjectStatistics of O_init")
    if method is Method.KOP:
        return kop_partition(stats, subs, space, m=m)
    radius2 = knn_radius2(knn, subs)
    if method is Method.SOP:
        return sop_partition(stats, radius2, subs, space, m=m, theta=theta)
    return dkm_partition(stats, radius2, subs, space, m=m, gamma1=gamma1, gamma2=gamma2)
