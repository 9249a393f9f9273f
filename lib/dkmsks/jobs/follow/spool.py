"""Follow mode's spool: the directory in which the driver and its worker tasks hand rounds over.

Every file is written whole and then renamed into place (:func:`atomic_write`), so a reader
never sees half of one. Idle tasks sleep at a *gate* (:func:`close_gate`, :func:`wait_at_gate`)
instead of looking at the spool, and builds take turns in *build slots* (:func:`build_slot`);
both are ``flock`` locks, which the kernel drops with a process that dies.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file renamed into place."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def round_file(spool: Path, n: int) -> Path:
    """The payload of round ``n``, written by the driver."""
    return spool / f"round-{n:06d}.payload"


def output_file(spool: Path, n: int, worker: int) -> Path:
    """The records of one worker in round ``n``, written by the task that hosts it."""
    return spool / f"round-{n:06d}.w{worker:04d}"


def changes_file(spool: Path, n: int, task: int) -> Path:
    """The description of the change file a task wrote in round ``n`` (empty: none)."""
    return spool / f"changes-{n:06d}.t{task:04d}.json"


def gate_file(spool: Path, n: int) -> Path:
    """The gate of round ``n`` (:func:`close_gate`)."""
    return spool / f"round-{n:06d}.gate"


def close_gate(spool: Path, n: int) -> int:
    """Create the gate of round ``n`` and hold it shut: the descriptor of an exclusive
    ``flock``, which :func:`open_gate` releases once the round's payload is in the spool.

    The driver always holds the gate of the next round, so idle worker tasks sleep in the
    kernel (:func:`wait_at_gate`) instead of polling the spool: twenty tasks each looking every
    5 ms kept a quarter of a core busy while follow mode had nothing to do."""
    fd = os.open(gate_file(spool, n), os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def open_gate(fd: int) -> None:
    """Release a gate :func:`close_gate` holds. Unlocked explicitly: a process forked while
    the gate was held shares the descriptor's lock, and closing ours alone would keep it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def wait_at_gate(spool: Path, n: int) -> None:
    """Block until the driver opens the gate of round ``n`` (at once if it already did).

    The driver creates the gate of round ``n`` before it opens that of ``n - 1``, and a task
    comes here only after passing ``n - 1``, so a missing gate file has been opened and
    removed. If the driver dies its lock goes with it: the gate opens on no payload, and the
    caller falls back to polling until the stage is torn down."""
    try:
        fd = os.open(gate_file(spool, n), os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
    finally:
        os.close(fd)


@contextmanager
def build_slot(folder: Path, slots: int, poll: float = 0.05) -> Iterator[int]:
    """Hold one of ``slots`` lock files in ``folder`` (a counting semaphore across processes)
    while the body runs; yields the slot's number.

    The m worker tasks start at once, and a worker's build (reading its state, making its
    indexes) holds more memory than the built worker keeps: at |S| = 10M, twenty builds at
    once took follow's start-up to an 18.5 GiB peak (PSS) against 12.1 GiB once built. On c
    cores more than c builds at once are not faster anyway. ``flock`` locks go with
    the process, so a killed task frees its slot."""
    while True:
        for slot in range(slots):
            handle = open(folder / f"build-slot-{slot}", "a")  # noqa: SIM115 - held across the yield
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            try:
                yield slot
            finally:
                handle.close()  # releases the lock
            return
        time.sleep(poll)
