"""One writer of the state at a time: a lock per warehouse database.

Micro-batch runs, follow-mode rounds, compactions and (re)partitioning all read the journal
and ``knn_state`` and then commit on top of what they read; two of them interleaved could
process the same timestamps twice. Airflow's ``dkmsks_writers`` pool already serialises the
DAGs; this lock also covers a user's manual ``spark-submit`` or ``dkm`` next to them. It is
an ``flock`` on ``<warehouse>/locks/<database>.lock``: the kernel releases it when the
holder dies (even by ``kill -9``), so a crashed run never blocks the next one.

On object storage, where no file lock spans hosts, the same lock is a lease on the object
``locks/<database>.lock`` with a fence that the journal's commits check
(:mod:`dkmsks.storage.leases`): a killed holder frees it within a lease, and a holder that was
stopped past its lease cannot commit over its successor.

The lock is re-entrant within a process (a repartition compacts under its own lock). A
waiter retries until ``timeout`` seconds and then fails with the holder's description.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import IO, Any

from dkmsks.warehouse import Warehouse

DEFAULT_TIMEOUT = float(os.environ.get("DKMSKS_LOCK_TIMEOUT", "900"))

#: Locks this process holds, by file or object: the handle or lease, and the depth of re-entry.
_held: dict[str, tuple[Any, int]] = {}
_guard = threading.RLock()


class WriterBusy(RuntimeError):
    """Another job held the writer lock for longer than the caller was willing to wait."""


def writer_lock(warehouse: Warehouse, job: str, *, timeout: float | None = None) -> Any:
    """Hold the writer lock of ``warehouse``'s database for the block."""
    if warehouse.is_local:
        return file_lock(warehouse.writer_lock_path, job, timeout=timeout)
    return lease_lock(warehouse, "lock", job, timeout=timeout, fenced=True)


def check_writer(warehouse: Warehouse) -> None:
    """Right before a write only the writer may make: on object storage, renew this process's
    writer lease and make sure enough of it is left (:meth:`Lease.check`); a no-op for a
    local warehouse, whose ``flock`` cannot be lost while the process lives."""
    check_lease(warehouse, "lock")


def check_lease(warehouse: Warehouse, kind: str) -> None:
    """:func:`check_writer` for lock ``kind`` (``lock``, ``landing.lock``)."""
    if warehouse.is_local:
        return
    with _guard:
        held = _held.get(_lease_key(warehouse, kind))
    if held is None:
        raise RuntimeError(f"{warehouse}: this process does not hold its {kind}")
    held[0].check()


def _lease_key(warehouse: Warehouse, kind: str) -> str:
    assert warehouse.location is not None
    return f"{warehouse.location.bucket}/{warehouse.lock_key(kind)}"


@contextmanager
def _reentrant(key: str, take: Callable[[], Any], give_back: Callable[[Any], None]) -> Iterator[Any]:
    """Hold the lock known as ``key`` for the block, re-entrant within this process: the first
    entry takes it (``take()``, whose result the block gets), the last exit gives it back."""
    with _guard:
        entry = _held.get(key)
        if entry is not None:
            _held[key] = (entry[0], entry[1] + 1)
    if entry is None:
        held = take()
        with _guard:
            _held[key] = (held, 1)
    else:
        held = entry[0]
    try:
        yield held
    finally:
        with _guard:
            held, depth = _held[key]
            if depth > 1:
                _held[key] = (held, depth - 1)
            else:
                del _held[key]
                give_back(held)


def lease_lock(warehouse: Warehouse, kind: str, job: str, *, timeout: float | None = None,
               fenced: bool = False, lease_seconds: float | None = None) -> AbstractContextManager[Any]:
    """Hold the lease ``locks/<database>.<kind>`` of a warehouse on object storage for the
    block (re-entrant per process); yields the :class:`~dkmsks.storage.leases.Lease`. With
    ``fenced``, taking it commits its epoch to the journal and the journal's commits carry it
    while it is held (:mod:`dkmsks.storage.leases`)."""
    from dkmsks.storage.leases import LANDING_LEASE_SECONDS, LEASE_SECONDS, Lease, set_fence
    from dkmsks.storage.objectstore import ObjectStore

    assert warehouse.location is not None
    seconds = lease_seconds or (LEASE_SECONDS if fenced else LANDING_LEASE_SECONDS)
    wait = DEFAULT_TIMEOUT if timeout is None else timeout
    journal: list[str] = []

    def take() -> Lease:
        assert warehouse.location is not None
        lease = Lease(ObjectStore.of(warehouse.location), warehouse.lock_key(kind), job, lease_seconds=seconds)
        try:
            lease.acquire(wait)
        except TimeoutError as err:
            where = warehouse.location.uri("locks", f"{warehouse.database}.{kind}")
            raise WriterBusy(f"{job}: another job holds {where} "
                             f"(holder: {err}); waited {wait:.0f} s — retry later, "
                             "or raise DKMSKS_LOCK_TIMEOUT") from None
        if fenced:
            try:
                journal.append(_fence_journal(warehouse, lease.epoch))
            except BaseException:
                lease.release()
                raise
        return lease

    def give_back(lease: Lease) -> None:
        for uri in journal:
            set_fence(None, uri)
        lease.release()

    return _reentrant(_lease_key(warehouse, kind), take, give_back)


def _fence_journal(warehouse: Warehouse, epoch: int) -> str:
    """Commit ``epoch`` as the journal's fence (when the journal exists) and make this
    process's journal commits carry it; the journal's URI."""
    import pyarrow as pa

    from dkmsks.storage import tables
    from dkmsks.storage.lake import Lake, MissingTable
    from dkmsks.storage.leases import FENCE_APP, FENCE_MARK, Fence, set_fence

    lake = Lake.of(warehouse)
    uri = lake.uris[tables.JOURNAL]
    set_fence(Fence(uri, epoch), uri)
    # No journal yet: the partition job makes it, and its first commit carries the fence.
    with contextlib.suppress(MissingTable):
        lake.append(tables.JOURNAL, pa.table({}), app_id=FENCE_APP, version=epoch, metadata=FENCE_MARK)
    return uri


def file_lock(path: Path, job: str, *, timeout: float | None = None) -> AbstractContextManager[Any]:
    """Hold an exclusive, re-entrant (per process) ``flock`` on ``path`` for the block;
    ``job`` describes the holder to whoever has to wait."""
    return _reentrant(str(path), lambda: acquire(path, job, timeout=timeout), release)


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
