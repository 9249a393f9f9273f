"""How the follow driver learns that a worker task failed: a task that raises leaves its
traceback in the round channel (``error.t<task>`` in the spool, SpoolChannel.fail), and the
driver raises it with that text — between rounds (FollowSession._check) and while it waits for
a round's records, from the listing of the spool its look has just made (SpoolChannel.collect).
A worker stage that ended is raised too."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from dkmsks.jobs.follow import FollowSession, SpoolChannel
from dkmsks.warehouse import Warehouse

pytestmark = pytest.mark.unit

TRACEBACK = "Traceback (most recent call last):\nMemoryError: worker 7"


def _session(tmp_path: Path) -> FollowSession:
    session = FollowSession(None, Warehouse(tmp_path / "wh"), run_id="r")  # type: ignore[arg-type]
    session.channel.open()
    return session


def test_a_failed_task_is_raised_with_its_traceback(tmp_path: Path) -> None:
    session = _session(tmp_path)
    channel = session.channel
    assert isinstance(channel, SpoolChannel)
    channel.put_changes(3, 0, None)
    session._check()  # nothing failed
    channel.fail(1, TRACEBACK)
    with pytest.raises(RuntimeError, match="worker task failed:\nTraceback .*\nMemoryError: worker 7"):
        session._check()
    session.channel.stop()
    session.channel.close()


def test_a_task_that_fails_during_a_round_ends_the_drivers_wait(tmp_path: Path) -> None:
    channel = SpoolChannel(tmp_path / "spool", poll=0.005, build_slots=1)
    channel.open()
    failing = threading.Timer(0.2, channel.fail, args=(1, TRACEBACK))
    failing.start()
    with pytest.raises(RuntimeError, match="worker task failed:\nTraceback .*\nMemoryError: worker 7"):
        channel.collect(0, workers=2, tasks=0, alive=lambda: None)
    failing.join()
    channel.stop()
    channel.close()
    assert not (tmp_path / "spool").exists()


def test_an_ended_worker_stage_is_raised(tmp_path: Path) -> None:
    session = _session(tmp_path)
    session._thread = threading.Thread(target=lambda: None)
    session._thread.start()
    session._thread.join()
    with pytest.raises(RuntimeError, match="the worker stage ended unexpectedly"):
        session._check()
    # ... also while the driver waits for a round's records
    with pytest.raises(RuntimeError, match="the worker stage ended unexpectedly"):
        session.channel.collect(0, workers=1, tasks=0, alive=session._check_stage)
    session._failure = ValueError("barrier stage lost")
    with pytest.raises(RuntimeError, match="the worker stage ended: barrier stage lost"):
        session._check()
    session.channel.stop()
    session.channel.close()
