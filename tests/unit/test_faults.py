"""The test-only fault points (:mod:`dkmsks.spark.faults`): inert unless named, a misspelt
point is an error, and a named point kills the process and its children with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dkmsks.spark import faults

pytestmark = pytest.mark.unit

LIB = str(Path(faults.__file__).resolve().parents[2])


def run_child(code: str, fault: str | None, tmp_path: Path, *, new_session: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=LIB)
    env.pop(faults.ENV, None)
    if fault is not None:
        env[faults.ENV] = fault
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, start_new_session=new_session)


def test_unset_or_another_point_does_nothing(monkeypatch):
    monkeypatch.delenv(faults.ENV, raising=False)
    faults.kill_at("after-journal")
    monkeypatch.setenv(faults.ENV, "compaction")
    faults.kill_at("after-journal")
    assert not faults.armed("after-journal") and faults.armed("compaction")


def test_a_misspelt_point_is_an_error(monkeypatch):
    monkeypatch.setenv(faults.ENV, "after-jornal")
    with pytest.raises(ValueError, match="names no fault point"):
        faults.kill_at("after-journal")


@pytest.mark.parametrize("new_session", [True, False], ids=["group leader", "in the caller's group"])
def test_the_named_point_kills_the_process_and_its_children(tmp_path, new_session):
    code = """
        import subprocess, sys
        from dkmsks.spark.faults import kill_at
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open("child.pid", "w").write(str(child.pid))
        kill_at("after-journal")
        print("survived")
    """
    done = run_child(code, "after-journal", tmp_path, new_session=new_session)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert "fault injection: phase after-journal: SIGKILL" in done.stdout and "survived" not in done.stdout
    child = int((tmp_path / "child.pid").read_text())
    for _ in range(100):  # the child is reaped by init once killed
        if not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]:
            break
        __import__("time").sleep(0.05)
    else:
        pytest.fail("the child outlived the fault")


def test_a_new_data_file_in_the_watched_folder_kills(tmp_path):
    code = """
        import time
        from pathlib import Path
        from dkmsks.spark.faults import kill_on_new_file
        Path("table/_delta_log").mkdir(parents=True)
        Path("table/old.parquet").write_text("")
        with kill_on_new_file("compaction-write", Path("table")):
            Path("table/_delta_log/00000000000000000001.json").write_text("")
            time.sleep(0.5)
            print("log files do not count")
            Path("table/part-0.parquet").write_text("")
            time.sleep({hold})
        print("survived")
    """
    # Armed, the watcher kills within milliseconds of the write (5 s is room to spare); unset,
    # nothing watches, and the 0.5 s it gave the log file's write shows that nothing reacts.
    done = run_child(code.format(hold=5), "compaction-write", tmp_path)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert "log files do not count" in done.stdout and "survived" not in done.stdout
    assert "phase compaction-write" in done.stdout and "part-0.parquet" in done.stdout
    (tmp_path / "unset").mkdir()
    done = run_child(code.format(hold=0.5), None, tmp_path / "unset")
    assert done.returncode == 0 and "survived" in done.stdout, done.stderr


def test_a_new_name_in_a_listing_kills(tmp_path):
    """The watch of a table on object storage: a callable listing the table's data keys
    (:func:`dkmsks.spark.faults.table_data_files`) that shows a new key."""
    code = """
        import time
        from dkmsks.spark.faults import kill_on_new_file
        keys = {"t/knn_state/worker=0/old.parquet"}
        with kill_on_new_file("compaction-write", lambda: set(keys), poll=0.01):
            time.sleep(0.3)
            print("the same keys do not count")
            keys.add("t/knn_state/worker=1/part-0.parquet")
            time.sleep(5)
        print("survived")
    """
    done = run_child(code, "compaction-write", tmp_path)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert "the same keys do not count" in done.stdout and "survived" not in done.stdout
    assert "worker=1/part-0.parquet" in done.stdout
