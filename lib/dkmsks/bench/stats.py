"""The numbers every benchmark reports: medians, means and ratios that say "not measured"
(``nan``) instead of failing, and the timing of repeated runs."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


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


@dataclass(frozen=True)
class Timing:
    """Medians over repeated runs of the wall time (what a user waits) and of the CPU time of
    all threads (the steadier figure on a shared machine), in seconds."""

    wall: float
    cpu: float
    runs: int

    def __format__(self, spec: str) -> str:
        return f"{self.wall:{spec or '.2f'}}s (cpu {self.cpu:.2f}s)"


def timed(fn: Callable[[], T], runs: int) -> tuple[Timing, T]:
    """Run ``fn`` ``runs`` times; the :class:`Timing` and the last run's result."""
    walls, cpus = [], []
    for _ in range(max(runs, 1)):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return Timing(median(walls), median(cpus), len(walls)), out
