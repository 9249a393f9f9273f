"""One writer of the state at a time: an advisory file lock per warehouse database.

Micro-batch runs, follow-mode rounds, compactions and (re)partitioning all read the journal
and ``knn_state`` and then commit on top of what they read; two of them interleaved could
process the same timestamps twice. Airflow's ``dkmsks_writers`` pool already serialises the
DAGs; this lock also covers a user's manual ``spark-submit`` or ``dkm`` next to them. It is
an ``flock`` on ``<warehouse>/locks/<database>.lock``: the kernel releases it when the
holder dies (even by ``kill -9``), so a crashed run never blocks the next one.

The lock is re-entrant within a process (a repartition compacts under its own lock). A
waiter retries until ``timeout`` seconds and then fails with the holder's description.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from dkmsks.warehouse import Warehouse

DEFAULT_TIMEOUT = float(os.environ.get("DKMSKS_LOCK_TIMEOUT", "900"))

_held: dict[str, tuple[Any, int]] = {}
_guard = threading.RLock()


class WriterBusy(RuntimeError):
    """Another job held the writer lock for longer than the caller was willing to wait."""


def writer_lock(warehouse: Warehouse, job: str, *, timeout: float | None = None) -> Any:
    """Hold the writer lock of ``warehouse``'s database for the block."""
    return file_lock(warehouse.writer_lock_path, job, timeout=timeout)


@contextmanager
def file_lock(path: Path, job: str, *, timeout: float | None = None) -> Iterator[None]:
    """Hold an exclusive, re-entrant (per process) ``flock`` on ``path`` for the block;
    ``job`` describes the holder to whoever has to wait."""
    key = str(path)
    with _guard:
        if key in _held:
            handle, depth = _held[key]
            _held[key] = (handle, depth + 1)
            reentered = True
        else:
            reentered = False
    if reentered:
        try:
            yield
        finally:
            with _guard:
                handle, depth = _held[key]
                _held[key] = (handle, depth - 1)
        return

    handle = acquire(path, job, timeout=timeout)
    with _guard:
        _held[key] = (handle, 1)
    try:
        yield
    finally:
        with _guard:
            handle, depth = _held[key]
            if depth > 1:
                _held[key] = (handle, depth - 1)
            else:
                del _held[key]
                release(handle)


def acquire(path: Path, job: str, *, timeout: float | None = None,
            on_wait: Callable[[str], None] | None = None) -> IO[str]:
    """Take the ``flock`` on ``path`` (not re-entrant; see :func:`file_lock`); returns the
    open handle that holds it, to give to :func:`release`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - held until release()
    wait = DEFAULT_TIMEOUT if timeout is None else timeout
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if on_wait is not None:
                handle.seek(0)
                on_wait(handle.read().strip() or "unknown")
                on_wait = None
            if time.monotonic() >= deadline:
                handle.seek(0)
                holder = handle.read().strip() or "unknown"
                handle.close()
                raise WriterBusy(
                    f"{job}: another job holds {path} (holder: {holder}); "
                    f"waited {wait:.0f} s — retry later, or raise DKMSKS_LOCK_TIMEOUT"
                ) from None
            time.sleep(0.1)
    handle.seek(0)
    handle.truncate()
    handle.write(f"{job} pid {os.getpid()} since {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n")
    handle.flush()
    return handle


def release(handle: IO[str]) -> None:
    """Free a lock taken by :func:`acquire` (a no-op on an already closed handle)."""
    if handle.closed:
        return
    handle.seek(0)
    handle.truncate()
    fcntl.flock(handle, fcntl.LOCK_UN)
    handle.close()
