"""Cores this process may use: its CPU affinity and its cgroup's CPU quota (dkmsks.cores)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import missing_prerequisite
from dkmsks.cores import cgroup_cpu_quota, usable_cores

pytestmark = pytest.mark.unit


def _v2(root, text):
    (root / "cpu.max").write_text(text)
    return root


def _v1(root, quota, period):
    (root / "cpu").mkdir()
    (root / "cpu" / "cpu.cfs_quota_us").write_text(f"{quota}\n")
    (root / "cpu" / "cpu.cfs_period_us").write_text(f"{period}\n")
    return root


def test_cgroup_v2_quota(tmp_path):
    assert cgroup_cpu_quota(_v2(tmp_path, "max 100000\n")) is None
    assert cgroup_cpu_quota(_v2(tmp_path, "150000 100000\n")) == 1.5
    assert cgroup_cpu_quota(_v2(tmp_path, "garbage\n")) is None  # unreadable: as if none


def test_cgroup_v1_quota(tmp_path):
    (tmp_path / "none").mkdir()
    assert cgroup_cpu_quota(_v1(tmp_path / "none", -1, 100000)) is None  # -1: no quota
    assert cgroup_cpu_quota(_v1(tmp_path, 50000, 100000)) == 0.5


def test_the_tightest_quota_of_the_own_cgroup_and_those_above_it(tmp_path):
    root = tmp_path / "cg"
    (root / "a" / "b").mkdir(parents=True)
    (root / "cpu.max").write_text("max 100000\n")
    (root / "a" / "cpu.max").write_text("300000 100000\n")
    (root / "a" / "b" / "cpu.max").write_text("max 100000\n")
    member = tmp_path / "cgroup"
    member.write_text("0::/a/b\n")
    assert cgroup_cpu_quota(root, member) == 3.0  # the parent's, where the own cgroup has none
    (root / "a" / "b" / "cpu.max").write_text("150000 100000\n")
    assert cgroup_cpu_quota(root, member) == 1.5
    member.write_text("0::/elsewhere\n")  # a sibling's quotas do not count
    assert cgroup_cpu_quota(root, member) is None


def test_a_container_sees_its_own_cgroup_at_the_root(tmp_path):
    # The membership names the host's path; inside the container that folder does not exist.
    member = tmp_path / "cgroup"
    member.write_text("0::/system.slice/docker-0123.scope\n")
    assert cgroup_cpu_quota(_v2(tmp_path, "100000 100000"), member) == 1.0


def test_a_cgroup_v1_cpu_controller_path(tmp_path):
    root = tmp_path / "cg"
    unit = root / "cpu" / "system.slice" / "follow.service"
    unit.mkdir(parents=True)
    (root / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    (root / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    (unit / "cpu.cfs_quota_us").write_text("50000\n")
    (unit / "cpu.cfs_period_us").write_text("100000\n")
    member = tmp_path / "cgroup"
    member.write_text("4:memory:/x\n3:cpu,cpuacct:/system.slice/follow.service\n0::/\n")
    assert cgroup_cpu_quota(root, member) == 0.5


def test_no_cgroup_files_means_no_quota(tmp_path):
    assert cgroup_cpu_quota(tmp_path) is None
    assert usable_cores(tmp_path) == len(os.sched_getaffinity(0))


def test_a_quota_caps_the_cores_rounding_up_and_never_below_one(tmp_path):
    affinity = len(os.sched_getaffinity(0))
    assert usable_cores(_v2(tmp_path, "150000 100000")) == min(affinity, 2)
    assert usable_cores(_v2(tmp_path, "20000 100000")) == 1
    assert usable_cores(_v2(tmp_path, f"{(affinity + 8) * 100000} 100000")) == affinity  # above the affinity


def test_a_process_pinned_to_one_core_runs_one_follow_worker_task():
    if len(os.sched_getaffinity(0)) < 2:
        missing_prerequisite("needs a process allowed on at least 2 cores (to pin a child to one of them)")
    # A real affinity, set in a child process: what taskset or docker --cpuset-cpus give.
    code = (
        "import json, os; os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]});"
        "from dkmsks.cores import usable_cores; from dkmsks.jobs.follow import default_processes;"
        "print(json.dumps([os.cpu_count(), usable_cores(), default_processes(20)]))"
    )
    machine, usable, processes = json.loads(subprocess.run([sys.executable, "-c", code], check=True,
                                                           capture_output=True, text=True).stdout)
    assert machine >= 2 and (usable, processes) == (1, 1)
