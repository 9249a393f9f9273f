"""Which follow-mode worker task hosts which workers of the plan (jobs/follow/worker_loop.py)."""

from __future__ import annotations

import pytest

from dkmsks.jobs.follow import default_processes, hosted_workers

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("processes", "workers"), [(1, 1), (1, 3), (2, 3), (2, 20), (3, 20), (20, 20), (7, 5)])
def test_every_worker_is_hosted_by_exactly_one_task_and_the_tasks_differ_by_at_most_one(processes, workers):
    hosted = [hosted_workers(task, processes, workers) for task in range(processes)]
    everyone = sorted(w for share in hosted for w in share)
    assert everyone == list(range(workers))
    sizes = [len(share) for share in hosted]
    assert max(sizes) - min(sizes) <= 1


def test_the_default_is_one_task_per_core_and_never_more_than_the_workers(monkeypatch):
    # The cores this process may use (tests/unit/test_cores.py: affinity and cgroup quota).
    monkeypatch.setattr("dkmsks.jobs.follow.worker_loop.usable_cores", lambda: 2)
    assert default_processes(20) == 2
    assert default_processes(1) == 1
    monkeypatch.setattr("dkmsks.jobs.follow.worker_loop.usable_cores", lambda: 1)
    assert default_processes(20) == 1
