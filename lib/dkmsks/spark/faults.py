"""Test-only fault injection: ``kill -9`` of the job at a named point of its commit path.

The crash test (``tests/reliability/test_crash.py``) kills runs at random instants from the
outside; some windows are too narrow to hit that way (the journal commit and the
``run_metrics`` append land within a fraction of a second). Setting

    DKMSKS_FAULT_KILL_AT=<point>

in a job's environment makes the job kill itself with ``SIGKILL`` when it reaches that point:
its whole process group (the driver, its JVM and its Python workers at once, as ``kill -9`` of
the group does) when the driver leads its group (as a job started in a session of its own
does), else the driver and its descendants. It first prints one line
``fault injection: phase <point>: ...`` (the harness reads it as the phase of the kill).
Unset (always, outside tests), every check is one dictionary lookup and nothing else happens.

Points (:data:`POINTS`), in the order a micro-batch run reaches them
(:func:`dkmsks.jobs.microbatch.run_microbatch`):

- ``after-journal``: the run's journal append (its commit point) has landed; the
  compaction and the ``run_metrics`` append have not run;
- ``compaction``: a compaction (:func:`dkmsks.spark.compaction.compact`) has read its plan,
  state view and source and tagged its transaction; its ``knn_state`` MERGE has not started;
- ``compaction-write``: the compaction's MERGE has written a new data file into
  ``knn_state``; its commit has not landed (the kill comes from a thread that watches the
  table's folder, within milliseconds of the first new file; the MERGE's commit comes after
  every file of its job is written).

An unknown point is an error (a misspelt point would otherwise never fire).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ENV = "DKMSKS_FAULT_KILL_AT"
POINTS = ("after-journal", "compaction", "compaction-write")


def armed(point: str) -> bool:
    """Whether this process is to die at ``point``."""
    wanted = os.environ.get(ENV)
    if not wanted:
        return False
    if wanted not in POINTS:
        raise ValueError(f"{ENV}={wanted!r} names no fault point; choose one of {', '.join(POINTS)}")
    return wanted == point


def kill_at(point: str) -> None:
    """Die by ``SIGKILL`` here when ``$DKMSKS_FAULT_KILL_AT`` names ``point``."""
    if armed(point):
        _kill(point)


@contextmanager
def kill_on_new_file(point: str, folder: Path | None, poll: float = 0.002) -> Iterator[None]:
    """While the block runs, die as soon as a data file appears in ``folder`` (not in its
    ``_delta_log``) when ``$DKMSKS_FAULT_KILL_AT`` names ``point``. ``folder`` None: the table
    is on object storage, which this watch cannot look at (an armed point is then an error)."""
    if not armed(point):
        yield
        return
    if folder is None:
        raise RuntimeError(f"fault injection at {point} watches a local table folder; this table is on object storage")
    before = _data_files(folder)
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            new = _data_files(folder) - before
            if new:
                _kill(point, f"new file {min(new)}")
            stop.wait(poll)

    thread = threading.Thread(target=watch, name="fault-injection", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _data_files(folder: Path) -> set[str]:
    found: set[str] = set()
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d != "_delta_log"]
        found.update(os.path.join(root, f) for f in files if f.endswith(".parquet"))
    return found


def _kill(point: str, detail: str = "") -> None:
    print(f"fault injection: phase {point}: SIGKILL ({ENV}){': ' + detail if detail else ''}", flush=True)
    sys.stderr.flush()
    me = os.getpid()
    if os.getpgrp() == me:
        os.killpg(me, signal.SIGKILL)
    for pid in _descendants(me):  # not a group leader: its group may hold the caller's shell
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    os.kill(me, signal.SIGKILL)


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stat = Path(entry.path, "stat").read_text()
                children.setdefault(int(stat[stat.rindex(")") + 2:].split()[1]), []).append(int(entry.name))
            except (OSError, ValueError):
                continue
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out
