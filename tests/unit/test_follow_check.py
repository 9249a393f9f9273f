"""How the follow driver learns that a worker task failed (FollowSession._check): a task
that raises leaves its traceback as ``error.t<task>`` in the spool, and the driver, which looks
at the spool every few milliseconds while the tasks apply a round, raises it with that text,
from its own listing of the spool or from the one its look has just made."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from dkmsks.jobs.follow import FollowSession
from dkmsks.warehouse import Warehouse

pytestmark = pytest.mark.unit


def _session(tmp_path: Path) -> FollowSession:
    session = FollowSession(None, Warehouse(tmp_path / "wh"), run_id="r")  # type: ignore[arg-type]
    session.spool.mkdir(parents=True)
    return session


def test_a_failed_task_is_raised_with_its_traceback(tmp_path: Path) -> None:
    session = _session(tmp_path)
    (session.spool / "changes-000003.t0000.json").write_text("")
    session._check()  # nothing failed
    session._check(set(os.listdir(session.spool)))
    (session.spool / "error.t0001").write_text("Traceback (most recent call last):\nMemoryError: worker 7")
    for listed in (None, set(os.listdir(session.spool))):
        with pytest.raises(RuntimeError, match="worker task failed:\nTraceback .*\nMemoryError: worker 7"):
            session._check(listed)


def test_an_ended_worker_stage_is_raised(tmp_path: Path) -> None:
    session = _session(tmp_path)
    session._thread = threading.Thread(target=lambda: None)
    session._thread.start()
    session._thread.join()
    with pytest.raises(RuntimeError, match="the worker stage ended unexpectedly"):
        session._check()
    session._failure = ValueError("barrier stage lost")
    with pytest.raises(RuntimeError, match="the worker stage ended: barrier stage lost"):
        session._check()
