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

Points (:data:`POINTS`), in the order a micro-batch run
(:func:`dkmsks.jobs.microbatch.run_microbatch`) or a follow round
(:meth:`dkmsks.jobs.follow.session.FollowSession.step`) reaches them:

- ``before-journal``: the workers' records are made and the refused events merged into
  ``quarantine``; the journal append (the commit point) has not been made, the pending
  timestamps are sealed (taken);
- ``after-journal``: the run's or round's journal append (its commit point) has landed; the
  compaction and the ``run_metrics`` append have not run;
- ``compaction``: a compaction (:func:`dkmsks.spark.compaction.compact`) has read its plan,
  state view and source and tagged its transaction; its ``knn_state`` MERGE has not started;
- ``compaction-write``: the compaction's MERGE has written a new data file into
  ``knn_state``; its commit has not landed (the kill comes from a thread that watches the
  table's folder, or on object storage lists the table's keys, within milliseconds of the
  first new file; the MERGE's commit comes after every file of its job is written).

An unknown point is an error (a misspelt point would otherwise never fire).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dkmsks.warehouse import Warehouse

ENV = "DKMSKS_FAULT_KILL_AT"
POINTS = ("before-journal", "after-journal", "compaction", "compaction-write")
#: How often :func:`kill_on_new_file` looks: a folder walk is cheap, a listing of an object
#: store's keys is a request (~5 ms on a store on the same host).
FOLDER_POLL, LISTING_POLL = 0.002, 0.02


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
def kill_on_new_file(point: str, files: Path | Callable[[], set[str]], poll: float | None = None) -> Iterator[None]:
    """While the block runs, die as soon as a new data file appears when
    ``$DKMSKS_FAULT_KILL_AT`` names ``point``: a ``.parquet`` file in the folder ``files`` (not
    in its ``_delta_log``), or a new name in what the callable ``files`` returns
    (:func:`table_data_files`: a table on object storage). Looks every ``poll`` seconds
    (default :data:`FOLDER_POLL` for a folder, :data:`LISTING_POLL` for a listing)."""
    if not armed(point):
        yield
        return
    if isinstance(files, Path):
        folder = files
        list_files: Callable[[], set[str]] = lambda: _data_files(folder)  # noqa: E731
        poll = FOLDER_POLL if poll is None else poll
    else:
        list_files, poll = files, LISTING_POLL if poll is None else poll
    before = list_files()
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            new = list_files() - before
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


def table_data_files(warehouse: Warehouse, name: str) -> Path | Callable[[], set[str]]:
    """What :func:`kill_on_new_file` watches for table ``name``: its folder, or on object
    storage a listing of the ``.parquet`` keys under its prefix (not its ``_delta_log``)."""
    if warehouse.location is None:
        return warehouse.table_path(name)
    from dkmsks.storage.objectstore import ObjectStore

    store, prefix = ObjectStore.of(warehouse.location), warehouse.table_key(name) + "/"
    return lambda: {key for key in store.keys(prefix) if key.endswith(".parquet") and "/_delta_log/" not in key}


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
