"""How many cores this process may use: what defaults of "one per core" count.

``os.cpu_count()`` is the machine's count. A process in a container or a cgroup with a CPU
quota (``docker run --cpus 2``, compose's ``cpus:``, Kubernetes limits, a systemd unit's
``CPUQuota=``) or pinned to some cores (``taskset``, ``--cpuset-cpus``) gets fewer: sized by
the machine's count, follow mode would start a worker process per core of a 64-core host
inside a 2-CPU container and time-slice them (docs/design.md §10 has what that cost on two
cores). Python 3.13's ``os.process_cpu_count`` covers the affinity only; the quota is read here
from cgroup v2 (``cpu.max``) or v1 (``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``), of the
process's own cgroup and those above it.
"""

from __future__ import annotations

import functools
import math
import os
from pathlib import Path

#: Where the process's cgroup shows its CPU quota (inside a container: its own cgroup).
CGROUP_ROOT = Path("/sys/fs/cgroup")
#: Which cgroup this process is in (one line per hierarchy).
PROC_CGROUP = Path("/proc/self/cgroup")


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


def cgroup_cpu_quota(cgroup_root: Path = CGROUP_ROOT, membership: Path = PROC_CGROUP) -> float | None:
    """The tightest CPU quota, in cores (quota / period), of this process's cgroup and the
    cgroups above it, or None when none has one (or none can be read).

    ``membership`` (``/proc/self/cgroup``) names the process's cgroup: ``0::/path`` under
    cgroup v2, ``N:cpu,cpuacct:/path`` under v1. A container usually sees its own cgroup at the
    root of ``cgroup_root`` while its membership names the host's path; ancestors that do not
    exist are skipped, so the root's quota still counts."""
    v2, v1 = _member_paths(membership)
    quotas = [q for folder in _up(cgroup_root, v2) if (q := _v2_quota(folder)) is not None]
    quotas += [q for folder in _up(cgroup_root / "cpu", v1) if (q := _v1_quota(folder)) is not None]
    return min(quotas, default=None)


def _member_paths(membership: Path) -> tuple[str, str]:
    """This process's cgroup path under v2 and under v1's cpu controller ("" when unknown)."""
    v2 = v1 = ""
    try:
        for line in membership.read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controllers == "":
                v2 = path.strip().strip("/")
            elif "cpu" in controllers.split(","):
                v1 = path.strip().strip("/")
    except (OSError, ValueError):
        pass
    return v2, v1


def _up(root: Path, relative: str) -> list[Path]:
    """``root/relative`` and every folder above it up to ``root``, deepest first."""
    parts = [p for p in relative.split("/") if p and p not in (".", "..")]
    return [root.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]


def _v2_quota(folder: Path) -> float | None:
    try:  # "max 100000" (no quota) or "200000 100000" (2 cores)
        quota, period = (folder / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else _cores(int(quota), int(period))
    except (OSError, ValueError):
        return None


def _v1_quota(folder: Path) -> float | None:
    try:  # a quota of -1: none
        return _cores(int((folder / "cpu.cfs_quota_us").read_text()), int((folder / "cpu.cfs_period_us").read_text()))
    except (OSError, ValueError):
        return None


def _cores(quota: int, period: int) -> float | None:
    return quota / period if quota > 0 and period > 0 else None
