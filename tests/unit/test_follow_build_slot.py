"""Follow mode's build slots (jobs/follow/spool.py): at most ``slots`` worker builds at once,
across processes."""

import fcntl
import multiprocessing
import time

import pytest

from dkmsks.jobs.follow.spool import build_slot

pytestmark = pytest.mark.unit

pytestmark = pytest.mark.unit


def _build(folder, slots, log, hold, start=None):
    if start is not None:  # every builder asks at once, however late the loaded machine started it
        start.wait(30)
    with build_slot(folder, slots, poll=0.005) as slot:
        log.put(("in", time.monotonic(), slot))
        time.sleep(hold)
        log.put(("out", time.monotonic(), slot))


def _most_at_once(events):
    inside = most = 0
    for kind, _, _ in sorted(events, key=lambda e: (e[1], e[0] == "in")):  # an exit first at equal times
        inside += 1 if kind == "in" else -1
        most = max(most, inside)
    return most


@pytest.mark.parametrize("slots", [1, 2, 3])
def test_at_most_slots_builds_run_at_once_and_all_run(tmp_path, slots):
    ctx = multiprocessing.get_context("fork")
    log = ctx.Queue()
    start = ctx.Barrier(6)
    procs = [ctx.Process(target=_build, args=(tmp_path, slots, log, 0.15, start)) for _ in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    events = [log.get(timeout=5) for _ in range(12)]
    assert sum(1 for e in events if e[0] == "in") == 6
    assert _most_at_once(events) == slots  # six builds, never more than `slots` together
    assert {e[2] for e in events} == set(range(slots))


def test_a_killed_holder_frees_its_slot(tmp_path):
    ctx = multiprocessing.get_context("fork")
    log = ctx.Queue()
    holder = ctx.Process(target=_build, args=(tmp_path, 1, log, 60))
    holder.start()
    assert log.get(timeout=10)[0] == "in"
    holder.kill()  # kill -9 while it builds
    holder.join(10)
    start = time.monotonic()
    with build_slot(tmp_path, 1, poll=0.005) as slot:
        assert slot == 0
    assert time.monotonic() - start < 5


def test_an_error_in_the_build_frees_the_slot(tmp_path):
    with pytest.raises(RuntimeError), build_slot(tmp_path, 1):
        raise RuntimeError("build failed")
    with open(tmp_path / "build-slot-0", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises BlockingIOError if still held
