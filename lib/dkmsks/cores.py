"""How many cores this process may use: what defaults of "one per core" count.

``os.cpu_count()`` is the machine's count. A process in a container or a cgroup with a CPU
quota (``docker run --cpus 2``, compose's ``cpus:``, Kubernetes limits) or pinned to some cores
(``taskset``, ``--cpuset-cpus``) gets fewer: sized by the machine's count, follow mode would
start a worker process per core of a 64-core host inside a 2-CPU container and time-slice them
(docs/design.md §10 has what that cost on two cores). Python 3.13's ``os.process_cpu_count``
covers the affinity only; the quota is read here from cgroup v2 (``cpu.max``) or v1
(``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``).
"""

from __future__ import annotations

import functools
import math
import os
from pathlib import Path

#: Where the process's cgroup shows its CPU quota (inside a container: its own cgroup).
CGROUP_ROOT = Path("/sys/fs/cgroup")


def usable_cores(cgroup_root: Path | None = None) -> int:
    """The cores this process may run on (its CPU affinity), at most its cgroup's CPU quota
    rounded up; at least 1. Read once per process (a kNN initialisation asks at every call,
    and the look costs ~30 us) unless ``cgroup_root`` names another cgroup folder."""
    return _this_process() if cgroup_root is None else _usable(cgroup_root)


@functools.cache
def _this_process() -> int:
    return _usable(CGROUP_ROOT)


def _usable(cgroup_root: Path) -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    quota = cgroup_cpu_quota(cgroup_root)
    if quota is not None:
        cores = min(cores, math.ceil(quota))
    return max(1, cores)


def cgroup_cpu_quota(cgroup_root: Path = CGROUP_ROOT) -> float | None:
    """The CPU quota of this process's cgroup in cores (quota / period), or None when there is
    none or it cannot be read."""
    v2 = cgroup_root / "cpu.max"  # "max 100000" (no quota) or "200000 100000" (2 cores)
    v1 = (cgroup_root / "cpu" / "cpu.cfs_quota_us", cgroup_root / "cpu" / "cpu.cfs_period_us")
    try:
        if v2.is_file():
            quota, period = v2.read_text().split()[:2]
            return None if quota == "max" else _cores(int(quota), int(period))
        if v1[0].is_file() and v1[1].is_file():
            return _cores(int(v1[0].read_text()), int(v1[1].read_text()))  # quota -1: none
    except (OSError, ValueError):
        return None
    return None


def _cores(quota: int, period: int) -> float | None:
    return quota / period if quota > 0 and period > 0 else None
