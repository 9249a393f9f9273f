"""What a follow-mode worker task runs: build the workers it hosts once, then apply round after round.

The driver starts ``processes`` of these tasks in one barrier stage
(:class:`~dkmsks.jobs.follow.session.FollowSession`); task ``i`` hosts workers ``i, i + p,
i + 2p, ...`` of the plan (:func:`hosted_workers`). It builds them a few tasks at a time, then
sleeps until the driver's next round, applies it to each hosted worker in turn and hands each
worker's records back as soon as they are made.
"""

from __future__ import annotations

import pickle
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from dkmsks.core.model import Vocabulary
from dkmsks.cores import usable_cores
from dkmsks.jobs.follow.heap import keep_freed_memory, prefault_heap
from dkmsks.jobs.follow.spool import atomic_write, build_slot, changes_file, output_file, round_file, wait_at_gate
from dkmsks.spark.bridge import RoundInputs, WorkerSession, warm_arrow, warm_kernels
from dkmsks.spark.worker_tasks import to_ipc
from dkmsks.storage.journal import with_run
from dkmsks.storage.journal_files import write_file
from dkmsks.storage.state_io import StateView


def hosted_workers(task: int, processes: int, workers: int) -> list[int]:
    """The workers that worker task ``task`` of ``processes`` hosts: every ``processes``-th one."""
    return list(range(task, workers, processes))


def default_processes(workers: int) -> int:
    """Worker tasks of a follow session when not given: one per core, at most one per worker."""
    return max(1, min(workers, usable_cores()))


@dataclass(frozen=True)
class ChangeFiles:
    """Where the worker tasks write a large round's result changes
    (:mod:`dkmsks.storage.journal_files`): one file per task in the journal at ``root``, with
    the run's ``plan_version`` and ``run_id``."""

    root: str
    schema: pa.Schema
    plan_version: int
    run_id: str


def hand_over_changes(folder: Path, n: int, task: int, changes: list[pa.Table], files: ChangeFiles) -> None:
    """Write a task's changes of round ``n`` into a journal file and leave its description for
    the driver (an empty one when the task's workers changed nothing)."""
    records = pa.concat_tables(changes) if changes else None
    text = ""
    if records is not None and records.num_rows:
        records = with_run(records.drop_columns(["record", "seq"]), plan_version=files.plan_version,
                           run_id=files.run_id)
        text = write_file(files.root, "change", records, files.schema).to_json()
    atomic_write(changes_file(folder, n, task), text.encode())


def follow_worker_loop(view: StateView, spool: str, config: dict[str, Any], poll: float,
                       build_slots: int, processes: int, workers: int) -> Any:
    """Body of one long-running worker task (executed on an executor): it builds the workers it
    hosts (:func:`hosted_workers`) over one vocabulary, then applies each round's payload to
    them in turn, its inputs made once for all of them (:class:`RoundInputs`). When the round
    names :class:`ChangeFiles`, the workers' result changes stay out of their records: the task
    writes them once all its workers applied (:func:`hand_over_changes`)."""
    from pyspark import BarrierTaskContext

    task = BarrierTaskContext.get().partitionId()
    hosted = hosted_workers(task, processes, workers)
    folder = Path(spool)
    try:
        sessions = []
        vocab = Vocabulary()  # one for the hosted workers: they share each round's keyword ids and probes
        for worker_id in hosted:
            with build_slot(folder, build_slots):
                sessions.append(WorkerSession(worker_id, view.read(worker=worker_id), vocab=vocab, **config))
        warm_kernels()  # ready means ready: the first round pays no compile or cache load
        warm_arrow()
        if keep_freed_memory():
            prefault_heap()
        for worker_id in hosted:
            atomic_write(folder / f"ready.w{worker_id:04d}", b"ok")
        n = 0
        while True:
            wait_at_gate(folder, n)
            payload_path = round_file(folder, n)
            if payload_path.exists():
                payload, change_files = pickle.loads(payload_path.read_bytes())
                inputs = RoundInputs(payload, vocab)
                del payload
                changes: list[pa.Table] = []
                for session in sessions:  # each worker's records go out as soon as they are made
                    if change_files is None:
                        records = session.apply(inputs)
                    else:
                        mine, records = session.apply_parts(inputs)
                        changes.append(mine)
                    atomic_write(output_file(folder, n, session.worker_id), to_ipc(records))
                del inputs
                if change_files is not None:
                    hand_over_changes(folder, n, task, changes, change_files)
                    del changes
                n += 1
            elif (folder / "stop").exists():
                break
            else:
                time.sleep(poll)
    except Exception:
        atomic_write(folder / f"error.t{task:04d}", traceback.format_exc().encode())
        raise
    return iter([(task, n)])
