"""Follow mode's spool: rounds handed over through a directory the driver and the executors share.

:class:`SpoolChannel` is the :class:`~dkmsks.jobs.follow.channel.RoundChannel` of one follow
session, a folder under the warehouse's ``_spool``. Every file is written whole and then
renamed into place (:func:`atomic_write`), so a reader never sees half of one. Idle tasks sleep
at a *gate* (:func:`close_gate`, :func:`wait_at_gate`) instead of looking at the spool, and
builds take turns in *build slots* (:func:`build_slot`); both are ``flock`` locks, which the
kernel drops with a process that dies.

The files of a session's folder: ``round-NNNNNN.payload`` (the driver's round for every task)
or ``round-NNNNNN.tTTTT.payload`` (task ``TTTT``'s own), ``.gate`` (its gate), ``.wWWWW`` (a
worker's records), ``changes-NNNNNN.tTTTT.json`` (a task's change file), ``ready.wWWWW``,
``error.tTTTT`` (a failed task's traceback), ``build-slot-S`` and ``stop``.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa

from dkmsks.jobs.follow.channel import Round, RoundOutput
from dkmsks.jobs.follow.wire import decode_records, decode_round, encode_records, encode_round
from dkmsks.storage.journal_files import JournalFile


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file renamed into place."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def round_file(spool: Path, n: int, task: int | None = None) -> Path:
    """The payload of round ``n`` for every task (``task`` None) or for one, written by the driver."""
    return spool / (f"round-{n:06d}.payload" if task is None else f"round-{n:06d}.t{task:04d}.payload")


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


class SpoolChannel:
    """The round exchange of :class:`~dkmsks.jobs.follow.channel.RoundChannel` through the
    directory ``folder``, which the driver and every executor must see (local mode, or a
    shared volume: docs/design.md §4).

    The driver holds the gate of the round it will put next; putting a round writes its
    payload, closes the gate of the one after and opens this one. ``poll``: seconds between
    the driver's looks for the tasks' files while they apply a round (and a task's looks for
    a payload should its gate be gone with a dead driver); ``build_slots``: builds at once."""

    def __init__(self, folder: Path, *, poll: float, build_slots: int) -> None:
        self.folder = folder
        self.poll = poll
        self.build_slots = build_slots
        self._gate: int | None = None  # the held gate of the next round (close_gate), the driver's

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_gate": None}  # a task's copy holds no gate

    # ------------------------------------------------------------------ the driver's side
    def open(self) -> None:
        """Create the folder (a new one) and close the gate of round 0."""
        self.folder.mkdir(parents=True, exist_ok=False)
        self._gate = close_gate(self.folder, 0)

    def ready_workers(self) -> int:
        """How many ``ready`` files the tasks have left."""
        return len(list(self.folder.glob("ready.w*")))

    def put_round(self, n: int, rounds: Round | Sequence[Round]) -> list[int]:
        """Write the payload of round ``n`` (one file for every task, or one per task), then let
        the tasks through its gate (after closing the next one, so that a task that finishes
        early waits again). The bytes each task reads."""
        if isinstance(rounds, Round):
            data = encode_round(rounds)
            atomic_write(round_file(self.folder, n), data)
            sizes = [len(data)]
        else:
            sizes = []
            for task, round_ in enumerate(rounds):
                data = encode_round(round_)
                atomic_write(round_file(self.folder, n, task), data)
                sizes.append(len(data))
        held, self._gate = self._gate, close_gate(self.folder, n + 1)
        if held is not None:
            open_gate(held)
        return sizes

    def collect(self, n: int, *, workers: int, tasks: int, alive: Callable[[], None]) -> RoundOutput:
        """Read each worker's records and each task's change file as it appears, then remove
        the round's payload and gate (every task has passed it)."""
        out = RoundOutput()
        pending, describing = set(range(workers)), set(range(tasks))
        while pending or describing:
            # One listing per look, not a look per file: the driver looks every few
            # milliseconds while both cores apply (docs/benchmarks.md).
            present = set(os.listdir(self.folder))
            for w in sorted(pending):
                path = output_file(self.folder, n, w)
                if path.name in present:
                    out.records.append(decode_records(path.read_bytes()))
                    path.unlink()
                    pending.discard(w)
            for task in sorted(describing):
                path = changes_file(self.folder, n, task)
                if path.name in present:
                    if text := path.read_text():
                        out.change_files.append(JournalFile.from_json(text))
                    path.unlink()
                    describing.discard(task)
            if pending or describing:
                self._raise_failure(present)
                alive()
                time.sleep(self.poll)
        prefix = round_file(self.folder, n).name.split(".")[0] + "."
        for name in os.listdir(self.folder):
            if name.startswith(prefix) and name.endswith(".payload"):
                (self.folder / name).unlink()
        gate_file(self.folder, n).unlink()  # every task passed it: each returned round n
        return out

    def check(self) -> None:
        """Raise the traceback a failed task left (the first by task number)."""
        self._raise_failure(set(os.listdir(self.folder)))

    def _raise_failure(self, names: set[str]) -> None:
        errors = sorted(name for name in names if name.startswith("error.t"))
        if errors:
            raise RuntimeError(f"worker task failed:\n{(self.folder / errors[0]).read_text()}")

    def stop(self) -> None:
        """Leave the stop file and open the held gate: the waiting tasks wake and find it."""
        if self.folder.is_dir():
            (self.folder / "stop").touch()
        if self._gate is not None:
            open_gate(self._gate)
            self._gate = None

    def close(self) -> None:
        """Remove the folder and everything in it."""
        shutil.rmtree(self.folder, ignore_errors=True)

    # ------------------------------------------------------------------ a worker task's side
    def build_slot(self) -> AbstractContextManager[int]:
        """One of ``build_slots`` lock files in the folder (:func:`build_slot`)."""
        return build_slot(self.folder, self.build_slots)

    def say_ready(self, worker: int) -> None:
        """Leave ``ready.wWWWW``."""
        atomic_write(self.folder / f"ready.w{worker:04d}", b"ok")

    def get_round(self, n: int, task: int) -> Round | None:
        """Sleep at round ``n``'s gate, then read the task's payload, or the one for every task
        (data only: :mod:`.wire`); None once the stop file is there. Without a payload behind
        an open gate (the driver died), look every ``poll`` seconds until the stage is torn down."""
        while True:
            wait_at_gate(self.folder, n)
            for path in (round_file(self.folder, n, task), round_file(self.folder, n)):
                if path.exists():
                    return decode_round(path.read_bytes())
            if (self.folder / "stop").exists():
                return None
            time.sleep(self.poll)

    def put_records(self, n: int, worker: int, records: pa.Table) -> None:
        """Write ``worker``'s records of round ``n`` as an Arrow IPC stream."""
        atomic_write(output_file(self.folder, n, worker), encode_records(records))

    def put_changes(self, n: int, task: int, file: JournalFile | None) -> None:
        """Write the description of ``task``'s change file of round ``n`` (empty: none)."""
        atomic_write(changes_file(self.folder, n, task), (file.to_json() if file is not None else "").encode())

    def fail(self, task: int, text: str) -> None:
        """Leave ``error.tTTTT`` with ``text``."""
        atomic_write(self.folder / f"error.t{task:04d}", text.encode())
