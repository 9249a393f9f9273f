"""What a follow-mode worker task runs: build the workers it hosts once, then apply round after round.

The driver starts ``processes`` of these tasks in one barrier stage
(:class:`~dkmsks.jobs.follow.session.FollowSession`); task ``i`` hosts workers ``i, i + p,
i + 2p, ...`` of the plan (:func:`hosted_workers`). It builds them a few tasks at a time, then
waits for the driver's next round, applies it to each hosted worker in turn and hands each
worker's records back as soon as they are made — all through the round channel
(:class:`~dkmsks.jobs.follow.channel.RoundChannel`), its only link to the driver.
"""

from __future__ import annotations

import traceback
from typing import Any

import pyarrow as pa

from dkmsks.core.model import Vocabulary
from dkmsks.cores import usable_cores
from dkmsks.jobs.follow.channel import ChangeFiles, Round, RoundChannel
from dkmsks.jobs.follow.heap import keep_freed_memory, prefault_heap
from dkmsks.spark.bridge import RoundInputs, WorkerSession, warm_arrow, warm_kernels
from dkmsks.storage.journal import with_run
from dkmsks.storage.journal_files import JournalFile, write_file
from dkmsks.storage.state_io import StateView


def hosted_workers(task: int, processes: int, workers: int) -> list[int]:
    """The workers that worker task ``task`` of ``processes`` hosts: every ``processes``-th one."""
    return list(range(task, workers, processes))


def default_processes(workers: int) -> int:
    """Worker tasks of a follow session when not given: one per core, at most one per worker."""
    return max(1, min(workers, usable_cores()))


def write_changes(changes: list[pa.Table], files: ChangeFiles) -> JournalFile | None:
    """Write a task's result changes of one round into a journal file of the run ``files``
    names; its description, or None when the task's workers changed nothing."""
    records = pa.concat_tables(changes) if changes else None
    if records is None or not records.num_rows:
        return None
    records = with_run(records.drop_columns(["record", "seq"]), plan_version=files.plan_version, run_id=files.run_id)
    return write_file(files.root, "change", records, files.schema)


def follow_worker_loop(view: StateView, channel: RoundChannel, config: dict[str, Any], processes: int,
                       workers: int) -> Any:
    """Body of one long-running worker task (executed on an executor): it builds the workers it
    hosts (:func:`hosted_workers`) over one vocabulary, then applies each round it gets from
    ``channel`` to them in turn (:func:`apply_round`), until the channel stops. A failure
    leaves its traceback in the channel for the driver, and fails the stage."""
    from pyspark import BarrierTaskContext

    task = BarrierTaskContext.get().partitionId()
    hosted = hosted_workers(task, processes, workers)
    n = 0
    try:
        sessions = []
        vocab = Vocabulary()  # one for the hosted workers: they share each round's keyword ids and probes
        for worker_id in hosted:
            with channel.build_slot():
                sessions.append(WorkerSession(worker_id, view.read(worker=worker_id), vocab=vocab, **config))
        warm_kernels()  # ready means ready: the first round pays no compile or cache load
        warm_arrow()
        if keep_freed_memory():
            prefault_heap()
        for worker_id in hosted:
            channel.say_ready(worker_id)
        while (round_ := channel.get_round(n, task)) is not None:
            apply_round(channel, n, task, round_, sessions, vocab)
            del round_
            n += 1
    except Exception:
        channel.fail(task, traceback.format_exc())
        raise
    return iter([(task, n)])


def apply_round(channel: RoundChannel, n: int, task: int, round_: Round, sessions: list[WorkerSession],
                vocab: Vocabulary) -> None:
    """Apply round ``n`` to the task's workers one after another, their inputs made once for all
    of them (:class:`RoundInputs`), and put each worker's records as soon as they are made.
    When the round names :class:`ChangeFiles`, the workers' result changes stay out of their
    records: the task writes them once all its workers applied (:func:`write_changes`)."""
    inputs = RoundInputs(round_.payload, vocab)
    files = round_.change_files
    changes: list[pa.Table] = []
    for session in sessions:
        if files is None:
            records = session.apply(inputs)
        else:
            mine, records = session.apply_parts(inputs)
            changes.append(mine)
        channel.put_records(n, session.worker_id, records)
    del inputs
    if files is not None:
        channel.put_changes(n, task, write_changes(changes, files))
