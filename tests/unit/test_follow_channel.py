"""Follow mode's round exchange through the spool (jobs/follow/spool.py, SpoolChannel): the
driver puts a round, every task gets it and puts its workers' records and change files, the
driver collects them all; stop ends the tasks' loop; nothing is left behind.

The tasks here are forked processes that get the channel as Spark ships it to an executor
(pickled), and play a worker loop without workers: each worker's records say which round and
payload they saw."""

from __future__ import annotations

import multiprocessing
import pickle
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from dkmsks.jobs.follow import ChangeFiles, Round, SpoolChannel
from dkmsks.storage.journal_files import JournalFile
from follow_payloads import payload

pytestmark = pytest.mark.unit

TASKS, WORKERS = 2, 5


def _task(shipped: bytes, task: int, done) -> None:
    channel = pickle.loads(shipped)
    n = 0
    for worker in range(task, WORKERS, TASKS):
        channel.say_ready(worker)
    while (round_ := channel.get_round(n, task)) is not None:
        for worker in range(task, WORKERS, TASKS):
            channel.put_records(n, worker, pa.table({"round": [n], "worker": [worker],
                                                     "objects": [int(round_.payload.obj_ids.sum())]}))
        if round_.change_files is not None:
            file = JournalFile(f"record=change/t{task}-{n}.parquet", 123, "change", 10, 1, "{}") if task else None
            channel.put_changes(n, task, file)
        n += 1
    done.put((task, n))


def test_rounds_go_to_every_task_and_every_workers_records_come_back(tmp_path: Path) -> None:
    channel = SpoolChannel(tmp_path / "spool", poll=0.002, build_slots=1)
    channel.open()
    ctx = multiprocessing.get_context("fork")
    done = ctx.Queue()
    tasks = [ctx.Process(target=_task, args=(pickle.dumps(channel), t, done)) for t in range(TASKS)]
    for p in tasks:
        p.start()
    try:
        rounds = [Round(payload(1, timestamps=2, objects=50, events=5)),
                  Round(payload(2, timestamps=1, objects=0, events=0)),
                  Round(payload(3, timestamps=3, objects=20, events=2),
                        ChangeFiles("/nowhere", pa.schema([("t", pa.int64())]), 4, "run"))]
        for n, round_ in enumerate(rounds):
            channel.put_round(n, round_)
            expected_files = TASKS if round_.change_files is not None else 0
            out = channel.collect(n, workers=WORKERS, tasks=expected_files, alive=lambda: None)
            got = pa.concat_tables(out.records).sort_by("worker").to_pydict()
            assert got == {"round": [n] * WORKERS, "worker": list(range(WORKERS)),
                           "objects": [int(np.sum(round_.payload.obj_ids))] * WORKERS}
            # task 0's workers changed nothing: it writes no file, and says so
            assert [f.path for f in out.change_files] == ([f"record=change/t1-{n}.parquet"] if expected_files else [])
        assert channel.ready_workers() == WORKERS
    finally:
        channel.stop()
        for p in tasks:
            p.join(30)
    assert sorted(done.get(timeout=5) for _ in tasks) == [(t, len(rounds)) for t in range(TASKS)]
    assert all(p.exitcode == 0 for p in tasks)
    # the rounds' files are gone once collected; what is left goes with the folder
    assert sorted(path.name for path in (tmp_path / "spool").iterdir()) == sorted(
        ["stop", "round-000003.gate", *(f"ready.w{w:04d}" for w in range(WORKERS))])
    channel.close()
    assert not (tmp_path / "spool").exists()


def test_a_tasks_copy_of_the_channel_holds_no_gate(tmp_path: Path) -> None:
    channel = SpoolChannel(tmp_path / "spool", poll=0.01, build_slots=3)
    channel.open()
    copy = pickle.loads(pickle.dumps(channel))
    assert (copy.folder, copy.poll, copy.build_slots, copy._gate) == (channel.folder, 0.01, 3, None)
    assert channel._gate is not None
    channel.stop()
    assert copy.get_round(0, 0) is None  # the gate opened on the stop file
    channel.close()


def test_a_stopped_channel_of_a_session_that_never_opened_it_is_no_error(tmp_path: Path) -> None:
    channel = SpoolChannel(tmp_path / "spool", poll=0.01, build_slots=1)
    channel.stop()
    channel.close()
    assert not (tmp_path / "spool").exists()
