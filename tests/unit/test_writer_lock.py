"""The writer lock: one holder per database file, waiters time out with the holder's name,
a killed holder releases it, and the lock is re-entrant within a process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from dkmsks.storage.writer_lock import WriterBusy, file_lock

pytestmark = pytest.mark.unit

HOLD = """
import sys, time
from pathlib import Path
from dkmsks.storage.writer_lock import file_lock
with file_lock(Path(sys.argv[1]), "micro-batch test-run"):
    print("held", flush=True)
    time.sleep(60)
"""


def _holder(path):
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_writer_waits_then_fails_naming_the_holder(tmp_path):
    path = tmp_path / "locks" / "db.lock"
    proc = _holder(path)
    try:
        started = time.monotonic()
        with (pytest.raises(WriterBusy, match=r"micro-batch test-run pid \d+"),
              file_lock(path, "repartition", timeout=0.5)):
            pass
        assert time.monotonic() - started >= 0.5
    finally:
        proc.kill()
        proc.wait()


def test_kill_9_of_the_holder_releases_the_lock(tmp_path):
    path = tmp_path / "db.lock"
    proc = _holder(path)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with file_lock(path, "next run", timeout=5):
        assert "next run" in path.read_text()


def test_the_lock_is_reentrant_within_a_process_and_released_after(tmp_path):
    path = tmp_path / "db.lock"
    with file_lock(path, "outer", timeout=0):
        with file_lock(path, "inner (a compaction inside a repartition)", timeout=0):
            pass
        assert "outer" in path.read_text()
    proc = _holder(path)  # another process gets it once we let go
    proc.kill()
    proc.wait()
