"""Follow mode's round gates (jobs/follow/spool.py): idle worker tasks sleep until the driver
opens the next round."""

import multiprocessing
import os
import queue
import resource
import time
from pathlib import Path

import pytest

from dkmsks.jobs.follow.spool import close_gate, open_gate, wait_at_gate

pytestmark = pytest.mark.unit

pytestmark = pytest.mark.unit


def _wait(folder, n, log, opened=None):
    wait_at_gate(folder, n)
    log.put(time.monotonic() if opened is None else opened.is_set())


def _waiters(folder, n, count, opened=None):
    ctx = multiprocessing.get_context("fork")
    log = ctx.Queue()
    # Daemons: a task a broken gate keeps waiting is ended with the test session, not joined.
    procs = [ctx.Process(target=_wait, args=(folder, n, log, opened), daemon=True) for _ in range(count)]
    for p in procs:
        p.start()
    return procs, log


def _blocked_on(fd: int) -> set[int]:
    """The processes whose flock request on the file of ``fd`` the kernel holds back: the
    lines of /proc/locks marked ``->`` (``1: -> FLOCK  ADVISORY  READ <pid> <maj>:<min>:<inode> 0 EOF``)."""
    inode = os.fstat(fd).st_ino
    pids = set()
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "->" in fields:
            kind, pid, device = (fields[fields.index("->") + i] for i in (1, 4, 5))
            if kind == "FLOCK" and int(device.rsplit(":", 1)[1]) == inode:
                pids.add(int(pid))
    return pids


def _until(condition, what: str, guard: float = 30.0) -> None:
    """Poll ``condition``; ``guard`` seconds only keep a broken gate from hanging the suite."""
    deadline = time.monotonic() + guard
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"never happened: {what}")
        time.sleep(0.01)


def test_tasks_wait_while_the_gate_is_held_and_all_pass_when_it_opens(tmp_path):
    gate = close_gate(tmp_path, 0)
    opened = multiprocessing.get_context("fork").Event()
    procs, log = _waiters(tmp_path, 0, 5, opened)
    # Every task is blocked in the kernel on the gate's lock: held there, not polling.
    _until(lambda: _blocked_on(gate) == {p.pid for p in procs}, "all five tasks blocked on the gate")
    assert log.empty()  # nobody passed a held gate
    opened.set()
    open_gate(gate)
    # Each task reports whether the gate was open when it passed: all after, none before.
    assert [log.get(timeout=30) for _ in procs] == [True] * 5
    for p in procs:
        p.join(30)
        assert p.exitcode == 0


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
    # The driver removes a round's gate once every task has returned that round, and holds the
    # next round's: a task at round 7 passes though the driver holds a gate and opens nothing.
    held = close_gate(tmp_path, 8)
    files = sorted(tmp_path.iterdir())
    procs, log = _waiters(tmp_path, 7, 1)
    try:
        log.get(timeout=30)  # a guard only: nothing opens round 7, so the task passes at once or never
    except queue.Empty:
        pytest.fail(f"a task waits at a removed gate (blocked on the held one: {_blocked_on(held)})")
    finally:
        open_gate(held)
    procs[0].join(30)
    assert procs[0].exitcode == 0
    assert sorted(tmp_path.iterdir()) == files  # waiting made no gate of its own


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
