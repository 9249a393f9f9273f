"""How follow's main server and its warm worker tasks exchange rounds: :class:`RoundChannel`.

The session (:mod:`.session`) and the worker loop (:mod:`.worker_loop`) talk to each other
only through this interface. A round goes:

1. the driver puts round ``n`` (:meth:`RoundChannel.put_round`): the routed payload — one for
   every task, or each task its own, holding only the objects its workers need (docs/design.md
   §2.6) — and, in a large round, where the tasks write the result changes (:class:`ChangeFiles`);
2. each task gets its round (:meth:`RoundChannel.get_round`, which waits while there is none), applies
   it to the workers it hosts and puts each worker's records (:meth:`RoundChannel.put_records`)
   and, when asked to, the description of the change file it wrote
   (:meth:`RoundChannel.put_changes`);
3. the driver collects them all (:meth:`RoundChannel.collect`) and commits.

:meth:`RoundChannel.stop` ends the tasks' loop. Around the rounds: a task says when each of its
workers is built (:meth:`RoundChannel.say_ready`), builds in turns with the other tasks of its
host (:meth:`RoundChannel.build_slot`), and leaves its traceback when it fails
(:meth:`RoundChannel.fail`), which the driver raises (:meth:`RoundChannel.check`).

Two implementations: :class:`~dkmsks.jobs.follow.spool.SpoolChannel`, a directory that the
driver and the executors share (local mode), and :class:`~dkmsks.jobs.follow.flight.FlightChannel`,
an Arrow Flight server on the driver that tasks on any host call (a cluster; docs/design.md §10
says which is used where, and why). A channel crosses into the tasks inside the stage's
closure, so Spark must be able to serialise it, and a task's copy holds none of the driver's
resources. What a channel carries is bytes of :mod:`.wire` (and Arrow record batches), data only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa

from dkmsks.spark.bridge import BatchPayload
from dkmsks.storage.journal_files import JournalFile


@dataclass(frozen=True)
class ChangeFiles:
    """Where the worker tasks write a large round's result changes
    (:mod:`dkmsks.storage.journal_files`): one file per task in the journal at ``root``, with
    the run's ``plan_version`` and ``run_id``."""

    root: str
    schema: pa.Schema
    plan_version: int
    run_id: str


@dataclass(frozen=True)
class Round:
    """What the driver hands every worker task for one round."""

    payload: BatchPayload
    #: Where the tasks write the round's result changes; None: into the workers' records.
    change_files: ChangeFiles | None = None


@dataclass
class RoundOutput:
    """What the driver collects of one round: every worker's records, and the journal files
    the tasks wrote (:class:`ChangeFiles`; none from a task whose workers changed nothing)."""

    records: list[pa.Table] = field(default_factory=list)
    change_files: list[JournalFile] = field(default_factory=list)


class RoundChannel(Protocol):
    """The round exchange between follow's driver and its worker tasks (module doc)."""

    # ------------------------------------------------------------------ the driver's side
    def open(self) -> None:
        """Make the channel ready, before the worker tasks start: they wait for round 0."""

    def ready_workers(self) -> int:
        """How many workers the tasks have built so far (:meth:`say_ready`)."""

    def put_round(self, n: int, rounds: Round | Sequence[Round]) -> list[int]:
        """Hand round ``n`` to the tasks (rounds go 0, 1, 2, ...): one :class:`Round` for all of
        them, or one per task (``rounds[i]`` to task ``i``). Returns the bytes of each task's
        round as the channel carries it."""

    def collect(self, n: int, *, workers: int, tasks: int, alive: Callable[[], None]) -> RoundOutput:
        """Wait for round ``n``'s records of all ``workers`` and, when the round named
        :class:`ChangeFiles`, the change files of all ``tasks`` (0 otherwise); then forget the
        round. Raises when a task fails meanwhile (:meth:`check`); ``alive`` is called between
        looks, to raise if the worker stage ended."""

    def check(self) -> None:
        """Raise :class:`RuntimeError` with its traceback if a worker task failed (:meth:`fail`)."""

    def stop(self) -> None:
        """Tell the tasks to end their loop: :meth:`get_round` returns None from now on."""

    def close(self) -> None:
        """Remove what the channel holds, once the tasks have ended."""

    # ------------------------------------------------------------------ a worker task's side
    def build_slot(self) -> AbstractContextManager[int]:
        """A turn to build a worker: few at once per host (a build holds more memory than the
        built worker keeps); freed if the task dies."""

    def say_ready(self, worker: int) -> None:
        """Tell the driver that ``worker`` is built and warm."""

    def get_round(self, n: int, task: int) -> Round | None:
        """Task ``task``'s round ``n`` once the driver has put it (waiting meanwhile), or None
        after :meth:`stop`."""

    def put_records(self, n: int, worker: int, records: pa.Table) -> None:
        """Hand ``worker``'s records of round ``n`` to the driver."""

    def put_changes(self, n: int, task: int, file: JournalFile | None) -> None:
        """Hand the driver the change file ``task`` wrote in round ``n`` (None: it wrote none)."""

    def fail(self, task: int, text: str) -> None:
        """Leave the traceback of a failed task for the driver (:meth:`check`)."""

