"""Follow mode's round gates: idle worker tasks sleep until the driver opens the next round."""

import multiprocessing
import os
import resource
import time

import pytest

from dkmsks.jobs.follow import close_gate, open_gate, wait_at_gate

pytestmark = pytest.mark.unit


def _wait(folder, n, log):
    wait_at_gate(folder, n)
    log.put(time.monotonic())


def _waiters(folder, n, count):
    ctx = multiprocessing.get_context("fork")
    log = ctx.Queue()
    procs = [ctx.Process(target=_wait, args=(folder, n, log)) for _ in range(count)]
    for p in procs:
        p.start()
    return procs, log


def test_tasks_wait_while_the_gate_is_held_and_all_pass_when_it_opens(tmp_path):
    gate = close_gate(tmp_path, 0)
    procs, log = _waiters(tmp_path, 0, 5)
    time.sleep(0.5)
    assert log.empty()  # nobody passed a held gate
    assert all(p.is_alive() for p in procs)
    opened = time.monotonic()
    open_gate(gate)
    passed = [log.get(timeout=10) for _ in procs]
    for p in procs:
        p.join(10)
        assert p.exitcode == 0
    assert max(passed) - opened < 2.0  # woken by the release, not by a timeout


def test_a_waiting_task_uses_no_cpu(tmp_path):
    # The point of the gate: the polling it replaced kept 20 tasks at ~0.25 of a core.
    gate = close_gate(tmp_path, 3)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    procs, log = _waiters(tmp_path, 3, 4)
    time.sleep(1.0)
    open_gate(gate)
    for p in procs:
        p.join(10)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    assert cpu < 0.5, f"four tasks waiting one second used {cpu:.2f} s of CPU"


def test_a_removed_gate_was_opened_and_does_not_block(tmp_path):
    # The driver removes a round's gate once every task has returned that round.
    start = time.monotonic()
    wait_at_gate(tmp_path, 7)
    assert time.monotonic() - start < 1.0


def test_a_gate_opens_when_the_driver_dies(tmp_path):
    ctx = multiprocessing.get_context("fork")
    held = ctx.Event()

    def driver():
        close_gate(tmp_path, 0)
        held.set()
        time.sleep(60)

    d = ctx.Process(target=driver)
    d.start()
    assert held.wait(10)
    procs, log = _waiters(tmp_path, 0, 2)
    time.sleep(0.3)
    assert log.empty()
    os.kill(d.pid, 9)  # kill -9: the kernel drops the driver's lock
    d.join(10)
    for p in procs:
        p.join(10)
        assert p.exitcode == 0
