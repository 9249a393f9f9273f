"""The numbers every benchmark reports: medians, means, percentiles and ratios that say "not
measured" (``nan``) instead of failing."""

from __future__ import annotations

import statistics
from collections.abc import Iterable


def median(values: Iterable[float]) -> float:
    """The median, ``nan`` for no values."""
    vals = list(values)
    return float(statistics.median(vals)) if vals else float("nan")


def mean(values: Iterable[float]) -> float:
    """The mean, ``nan`` for no values."""
    vals = list(values)
    return float(sum(vals) / len(vals)) if vals else float("nan")


def percentile(values: Iterable[float], q: float) -> float:
    """The ``q`` quantile (0..1) by the nearest-rank rule (no interpolation between samples)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 1))))
    return ordered[rank - 1]


def ratio(a: float, b: float) -> float:
    """``a / b``, ``nan`` when ``b`` is zero or not measured."""
    return a / b if b and b == b else float("nan")
