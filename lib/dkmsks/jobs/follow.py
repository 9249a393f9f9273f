"""Follow mode: one warm application whose long-running Spark tasks keep the workers built.

A catch-up run rebuilds every worker from the state — right for a backlog, wrong for one
timestamp at a time: docs/design.md §3 fact 6 says touching all state per timestamp is the enemy.
Here the tasks of one barrier stage build the ``m`` workers once (each task hosts every
``processes``-th worker, :func:`hosted_workers`; one task per core by default) and then stay
alive, each applying one :class:`~dkmsks.spark.bridge.BatchPayload` per round to its workers in
turn. The driver — the main server, also kept warm — routes each new timestamp, drops the
payload into a spool directory, collects the workers' records from it and commits them with the
same protocol as a catch-up run: one journal commit per round, under the writer lock (released
between rounds, so a scheduled catch-up run or a repartition can get in; the session then sees
the foreign commit and restarts from Delta). In a large round (:data:`CHANGE_FILE_OBJECTS`)
the tasks write their workers' result changes into journal files themselves and the driver
adds those files to its commit (:class:`ChangeFiles`). When idle it compacts the journal into
``knn_state`` once the uncompacted tail is large.

The spool is a local directory, so follow mode needs the driver and executors to share a
filesystem (local mode, or a cluster with the warehouse volume mounted everywhere, as in
``docker-compose.yml``), and at least ``processes + 1`` task slots: the worker stage holds
``processes`` of them for as long as the session lives, and the driver's own reads and commits
need the rest. If a worker task fails, the session stops; the next session rebuilds from Delta,
where every committed timestamp is safe.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import pickle
import shutil
import threading
import time
import traceback
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession

from dkmsks.core.model import Vocabulary
from dkmsks.cores import usable_cores
from dkmsks.spark.bridge import RoundInputs, WorkerSession, warm_arrow, warm_kernels
from dkmsks.spark.compaction import compact, tail_is_large, uncompacted_rows
from dkmsks.spark.main_server import build_main_server, refresh_weights, route
from dkmsks.spark.quarantine import quarantine_refused
from dkmsks.spark.worker_tasks import from_ipc, to_ipc
from dkmsks.storage import tables
from dkmsks.storage.journal import (
    RunReport,
    commit,
    commit_with_files,
    journal_file_schema,
    journal_records,
    last_processed,
    record_run_metrics,
    with_run,
)
from dkmsks.storage.journal_files import JournalFile, write_file
from dkmsks.storage.lake import Lake
from dkmsks.storage.landing import take_pending
from dkmsks.storage.plans import current_plan
from dkmsks.storage.state_io import StateView
from dkmsks.storage.writer_lock import writer_lock
from dkmsks.warehouse import Warehouse


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _round_file(spool: Path, n: int) -> Path:
    return spool / f"round-{n:06d}.payload"


def _output_file(spool: Path, n: int, worker: int) -> Path:
    return spool / f"round-{n:06d}.w{worker:04d}"


def _gate_file(spool: Path, n: int) -> Path:
    return spool / f"round-{n:06d}.gate"


def close_gate(spool: Path, n: int) -> int:
    """Create the gate of round ``n`` and hold it shut: the descriptor of an exclusive
    ``flock``, which :func:`open_gate` releases once the round's payload is in the spool.

    The driver always holds the gate of the next round, so idle worker tasks sleep in the
    kernel (:func:`wait_at_gate`) instead of polling the spool: twenty tasks each looking every
    5 ms kept a quarter of a core busy while follow mode had nothing to do."""
    fd = os.open(_gate_file(spool, n), os.O_RDWR | os.O_CREAT, 0o644)
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
        fd = os.open(_gate_file(spool, n), os.O_RDONLY)
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


#: glibc's ``mallopt`` parameters (``malloc.h``).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: Freed memory a warm worker task keeps for its next round instead of handing it back to the
#: system, and the largest block taken from that heap (glibc allows at most 32 MiB).
ROUND_HEAP_KEEP, ROUND_HEAP_BLOCK = 64 << 20, 32 << 20
#: The heap a built worker touches once, ready for its first large round (:func:`prefault_heap`).
ROUND_HEAP_PREFAULT = 32 << 20


def keep_freed_memory(keep: int = ROUND_HEAP_KEEP, block: int = ROUND_HEAP_BLOCK) -> bool:
    """Let this process's allocator keep up to ``keep`` bytes of freed memory and serve blocks of
    up to ``block`` bytes from it; whether glibc took both settings.

    A warm worker allocates and frees much the same temporaries round after round, and glibc's
    default hands large freed blocks back to the system, so each round faults them in anew: a
    worker task applying a 100-timestamp burst at |S| = 1M, m = 20 took 40,000 page faults and
    0.07-0.1 s of system time (the same apply in a one-off process with a used heap: ~200 faults).
    With these settings the burst round's worker phase took 4.5-4.6 s instead of 5.0-5.1 s and
    the worker processes' CPU 8.7 s instead of 9.8 s, for ~20 MiB more kept per worker after the
    round. Called once the worker is built: the build's temporaries (several times what the
    built worker keeps) have gone back by then. Elsewhere than glibc nothing changes."""
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, block)) and bool(mallopt(_M_TRIM_THRESHOLD, keep))


def prefault_heap(total: int = ROUND_HEAP_PREFAULT, piece: int = 1 << 20) -> None:
    """Grow this process's heap by ``total`` bytes of touched pages and free them into it, so
    that the first large round's temporaries reuse pages the process already has.

    Call after :func:`keep_freed_memory`, which keeps them. Memory new to a process costs a
    page fault per page, and on this VM a fresh page from the host costs far more than that:
    twenty built workers (1M subscriptions, m = 20, no Spark) applying a 100-timestamp burst at
    once took ~97,600 page faults, 1.9-2.4 s of system time and 4.3-5.3 s; with 32 MiB touched
    beforehand 4,450 faults, 0.7-0.8 s and 3.6-4.7 s (interleaved runs, docs/benchmarks.md). The
    pieces are below glibc's mmap threshold, so they come from the heap, not from mappings
    that freeing would unmap."""
    import numpy as np

    pieces = [np.ones(piece, dtype=np.uint8) for _ in range(total // piece)]
    del pieces


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


#: Rounds of at least this many objects have their changes written by the worker tasks
#: (:class:`ChangeFiles`). A one-timestamp round's few thousand changes cost the driver's
#: append ~10 ms; written by the tasks they made it slower (a file and a hand-over per task,
#: and a commit of files: 0.14 against 0.10 s per round at |S| = 1M, docs/benchmarks.md).
CHANGE_FILE_OBJECTS = 10_000


def _changes_file(spool: Path, n: int, task: int) -> Path:
    return spool / f"changes-{n:06d}.t{task:04d}.json"


def hand_over_changes(folder: Path, n: int, task: int, changes: list[pa.Table], files: ChangeFiles) -> None:
    """Write a task's changes of round ``n`` into a journal file and leave its description for
    the driver (an empty one when the task's workers changed nothing)."""
    records = pa.concat_tables(changes) if changes else None
    text = ""
    if records is not None and records.num_rows:
        records = with_run(records.drop_columns(["record", "seq"]), plan_version=files.plan_version,
                           run_id=files.run_id)
        text = write_file(files.root, "change", records, files.schema).to_json()
    _atomic_write(_changes_file(folder, n, task), text.encode())


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
            _atomic_write(folder / f"ready.w{worker_id:04d}", b"ok")
        n = 0
        while True:
            wait_at_gate(folder, n)
            payload_path = _round_file(folder, n)
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
                    _atomic_write(_output_file(folder, n, session.worker_id), to_ipc(records))
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
        _atomic_write(folder / f"error.t{task:04d}", traceback.format_exc().encode())
        raise
    return iter([(task, n)])


class StateChanged(RuntimeError):
    """Another job committed the journal or ``knn_state`` under a follow session (a catch-up
    run, a repartition); the session must restart from Delta."""


@dataclass
class FollowStats:
    """Counters of a follow session: rounds run, timestamps processed, and files of changes
    the worker tasks wrote into the journal (:class:`ChangeFiles`)."""

    rounds: int = 0
    timestamps: int = 0
    task_change_files: int = 0


#: The landing tables a round reads its pending timestamps from.
LANDING = (tables.OBJECTS, tables.EVENTS)


class FollowSession:
    """The warm driver side of follow mode; see the module doc."""

    #: After a look that found nothing pending, this many seconds of cheap looks (no new commit
    #: in the landing tables, the journal or ``knn_state``) stand for full ones; then a full
    #: look again, in case a table was made anew under the session.
    IDLE_RECHECK_S = 5.0

    def __init__(self, spark: SparkSession, warehouse: Warehouse, *, run_id: str, poll: float = 0.005,
                 start_timeout: float = 600.0, build_slots: int | None = None,
                 processes: int | None = None, change_file_objects: int | None = CHANGE_FILE_OBJECTS) -> None:
        self.spark = spark
        self.warehouse = warehouse
        self.run_id = run_id
        self.poll = poll
        self.spool = warehouse.spool_dir / f"follow-{uuid.uuid4().hex[:12]}"
        self.start_timeout = start_timeout
        #: How many worker tasks build at once (:func:`build_slot`): one per core by default.
        self.build_slots = max(1, build_slots or usable_cores())
        #: How many long-running worker tasks host the plan's workers (:func:`hosted_workers`):
        #: None, one per core (:func:`default_processes`); at most one per worker.
        self.processes = processes
        #: From how many objects a round's changes are written by the worker tasks
        #: (:class:`ChangeFiles`); None: never, every record goes through the driver.
        self.change_file_objects = change_file_objects
        self._change_files: ChangeFiles | None = None
        self._tasks = 0
        self.stats = FollowStats()
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None
        self._round = 0
        self._gate: int | None = None  # the held gate of round self._round (close_gate)
        self._idle_since: float | None = None  # when the last look that found nothing was
        self._landing: dict[str, int] = {}  # versions of the landing tables before the last look

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start the session: read the current plan, check the task slots and start the worker stage."""
        spark, warehouse = self.spark, self.warehouse
        self.lake = lake = Lake.of(warehouse)
        with writer_lock(warehouse, f"follow {self.run_id} (start)"):
            info = current_plan(lake)
            last = last_processed(lake)
            if info is None or last is None:
                raise ValueError("no partition plan yet: run the partition job after ingesting O_init")
            self.info = info
            processes = min(info.workers, self.processes or default_processes(info.workers))
            slots = spark.sparkContext.defaultParallelism
            if slots < processes + 1:
                raise ValueError(
                    f"follow mode keeps {processes} worker tasks running (the {info.workers} workers of the plan, "
                    f"--processes) and still needs a slot for its own reads and commits: at least "
                    f"{processes + 1} task slots, but Spark has {slots}; start it with --master "
                    f"local[{processes + 1}] or more, or with fewer --processes"
                )
            self.last = last
            self._landing = {name: lake.version(name) for name in LANDING}
            view = StateView.open(lake, fallback_plan=info.plan_version)
            self.journal_version, self.state_version = view.journal_version, view.state_version
            self.tail_rows = uncompacted_rows(view)
            self.state_rows = lake.read(tables.STATE, columns=["sub_id"], version=view.state_version).num_rows
            self.vocab = Vocabulary()
            self.server = build_main_server(lake, info, self.vocab, view, warehouse.cache_dir)
        warm_kernels()  # once here, so that the m worker processes load them instead of compiling
        self.spool.mkdir(parents=True, exist_ok=False)
        self._gate = close_gate(self.spool, 0)
        config = {"method": info.method, "space": info.space.as_tuple(), "grid": info.config.grid}
        root = lake.local_root(tables.JOURNAL)
        if self.change_file_objects is not None and root is not None:
            self._change_files = ChangeFiles(root, journal_file_schema(lake), info.plan_version, self.run_id)
        self._tasks = processes
        m, spool, poll, slots = info.workers, str(self.spool), self.poll, self.build_slots
        rdd = (
            spark.sparkContext.parallelize(range(processes), processes)
            .barrier()
            .mapPartitions(lambda _: follow_worker_loop(view, spool, config, poll, slots, processes, m))
        )

        def drive() -> None:
            try:
                rdd.collect()
            except BaseException as err:  # surfaced to the caller by _check()
                self._failure = err

        self._thread = threading.Thread(target=drive, name="dkmsks-follow-workers", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + self.start_timeout
        while len(list(self.spool.glob("ready.w*"))) < m:
            self._check()
            if time.monotonic() > deadline:
                raise TimeoutError(f"worker tasks not ready after {self.start_timeout:.0f} s")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop the worker stage and wait for it (up to two minutes)."""
        if self._thread is not None:
            (self.spool / "stop").touch()
        if self._gate is not None:  # wakes the tasks, which find the stop file
            open_gate(self._gate)
            self._gate = None
        if self._thread is not None:
            self._thread.join(timeout=120)
            self._thread = None
        shutil.rmtree(self.spool, ignore_errors=True)

    def __enter__(self) -> FollowSession:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _check(self, listed: set[str] | None = None) -> None:
        """Raise if a worker task failed or the worker stage ended; ``listed``: the spool's
        file names, when the caller has just listed it."""
        names = listed if listed is not None else os.listdir(self.spool)
        errors = sorted(name for name in names if name.startswith("error.t"))
        if errors:
            raise RuntimeError(f"worker task failed:\n{(self.spool / errors[0]).read_text()}")
        if self._failure is not None:
            raise RuntimeError(f"the worker stage ended: {self._failure}") from self._failure
        if self._thread is not None and not self._thread.is_alive():
            raise RuntimeError("the worker stage ended unexpectedly")

    # ------------------------------------------------------------------ one round
    def step(self, *, until: int | None = None, max_timestamps: int | None = None) -> RunReport:
        """Process the timestamps pending now (possibly none) with the warm workers."""
        if self._quiet():
            return RunReport(self.run_id, [], self.last)
        # Before the look, so that no commit slips by unseen.
        self._landing = {name: self.lake.version_from(name, v) for name, v in self._landing.items()}
        with writer_lock(self.warehouse, f"follow {self.run_id}"):
            report = self._step(until, max_timestamps)
        self._idle_since = None if report.timestamps or report.compacted else time.monotonic()
        return report

    def _quiet(self) -> bool:
        """Whether nothing can be pending since the last look that found nothing: no new commit
        in the landing tables, the journal or ``knn_state`` (one file look each).

        A full look reads the pending timestamps through delta-rs: ~35 ms of CPU at |S| = 1M,
        a quarter of a core for an idle follow mode polling every 0.1 s."""
        self._check()
        if self._idle_since is None or time.monotonic() - self._idle_since > self.IDLE_RECHECK_S:
            return False
        marks = {**self._landing, tables.JOURNAL: self.journal_version, tables.STATE: self.state_version}
        return not any(self.lake.committed_after(name, version) for name, version in marks.items())

    def _step(self, until: int | None, max_timestamps: int | None) -> RunReport:
        spark, info, lake = self.spark, self.info, self.lake
        phases: dict[str, float] = {}
        started = time.perf_counter()
        self._check()
        if (lake.version(tables.JOURNAL), lake.version(tables.STATE)) != (self.journal_version, self.state_version):
            raise StateChanged("another job committed the journal or knn_state (a catch-up run or a repartition); "
                               "restarting follow mode from Delta")
        taken = take_pending(self.warehouse, lake, self.vocab, after=self.last, until=until,
                             max_timestamps=max_timestamps, who=f"follow {self.run_id}")
        ts, objects, events = taken.timestamps, taken.objects, taken.events
        report = RunReport(self.run_id, ts, self.last, phases_ms=phases)
        if not ts:
            self._compact_if_large(report)
            return report
        to_t = ts[-1]
        phases["read"] = (time.perf_counter() - started) * 1e3

        started = time.perf_counter()
        routed = route(self.server, info, ts, objects, events, self.vocab)
        phases["assign"] = (time.perf_counter() - started) * 1e3

        started = time.perf_counter()
        n = self._round
        round_objects = sum(c[0] for c in routed.counts.values())
        files = self._change_files if round_objects >= (self.change_file_objects or 0) else None
        _atomic_write(_round_file(self.spool, n), pickle.dumps((routed.payload, files), protocol=5))
        held, self._gate = self._gate, close_gate(self.spool, n + 1)
        if held is not None:
            open_gate(held)
        parts: list[pa.Table] = []
        written: list[JournalFile] = []
        pending = set(range(info.workers))
        tasks = set(range(self._tasks)) if files is not None else set()
        while pending or tasks:
            # One listing per look, not a look per file: the driver looks every few
            # milliseconds while both cores apply (docs/benchmarks.md).
            present = set(os.listdir(self.spool))
            for w in sorted(pending):
                path = _output_file(self.spool, n, w)
                if path.name in present:
                    parts.append(from_ipc(path.read_bytes()))
                    path.unlink()
                    pending.discard(w)
            for task in sorted(tasks):
                path = _changes_file(self.spool, n, task)
                if path.name in present:
                    if text := path.read_text():
                        written.append(JournalFile.from_json(text))
                    path.unlink()
                    tasks.discard(task)
            if pending or tasks:
                self._check(present)
                time.sleep(self.poll)
        _round_file(self.spool, n).unlink()
        _gate_file(self.spool, n).unlink()  # every task passed it: each returned round n
        self._round += 1
        phases["workers"] = (time.perf_counter() - started) * 1e3

        started = time.perf_counter()
        records = journal_records(refresh_weights(self.server, pa.concat_tables(parts)), plan_version=info.plan_version,
                                  routed=routed, timestamps=ts, from_t=self.last, run_id=self.run_id)
        quarantine_refused(spark, routed.refused, self.run_id)
        committed = (commit_with_files(lake, records, written, to_t, schema=files.schema) if files is not None
                     else commit(lake, records, to_t))
        if not committed:
            raise StateChanged(f"timestamps up to {to_t} were committed by another job; restarting follow mode")
        self.journal_version = lake.version(tables.JOURNAL)
        phases["commit"] = (time.perf_counter() - started) * 1e3
        record_run_metrics(lake, self.run_id, "follow", self.last, to_t, phases)
        self.tail_rows += int(pc.sum(pc.equal(records.column("record"), "final")).as_py() or 0)
        self.last = to_t
        report.add_counts(routed)
        self.stats.rounds += 1
        self.stats.task_change_files += len(written)
        self.stats.timestamps += len(ts)
        return report

    def _compact_if_large(self, report: RunReport) -> None:
        """Idle: merge the journal tail into ``knn_state`` once it is large (no round waits)."""
        if not tail_is_large(self.tail_rows, self.state_rows):
            return
        started = time.perf_counter()
        version = compact(self.spark, self.warehouse)
        if version is not None:
            self.state_version = version
            report.compacted = True
            report.phases_ms["compact"] = (time.perf_counter() - started) * 1e3
        self.tail_rows = 0


#: Timestamps one round takes at most (:func:`follow_forever`'s default; None: all pending).
#: A round holds its timestamps' payload and records in memory until it commits: at
#: |O_init| = |S| = 1M a backlog of 525 timestamps in one round peaked at 3.18-3.48 GiB
#: (follow's tree, PSS) against 2.70 GiB in rounds of 100 or 105, in about the same time
#: (6.1-6.8 s of round phases against 6.4-6.9 s), and its first timestamps became visible after
#: 2.6-2.7 s instead of 6.1-6.8 s (docs/benchmarks.md, "Follow's rounds capped"). Uncapped, an
#: outage of hours would come back as one round too large for the machine. 100 keeps the live
#: benchmark's 100-timestamp burst one round.
ROUND_TIMESTAMPS = 100


def round_cap(max_timestamps: int | None) -> int | None:
    """A ``--max-timestamps`` flag as :func:`follow_forever` takes it: absent (None),
    :data:`ROUND_TIMESTAMPS`; 0, no limit (None); else the number."""
    if max_timestamps is None:
        return ROUND_TIMESTAMPS
    return max_timestamps or None


def follow_forever(
    spark: SparkSession, warehouse: Warehouse, *, run_id: str, until: int | None = None,
    max_timestamps: int | None = ROUND_TIMESTAMPS, poll: float = 1.0, idle_exit: float | None = None,
    log: Any = print, stop: threading.Event | None = None, build_slots: int | None = None,
    processes: int | None = None, change_file_objects: int | None = CHANGE_FILE_OBJECTS,
) -> int:
    """Run follow sessions until ``until`` is processed, ``idle_exit`` seconds pass idle, or
    ``stop`` is set (a service's SIGTERM). A round takes at most ``max_timestamps`` of the
    pending timestamps (None: all of them; :data:`ROUND_TIMESTAMPS`).

    Before the first plan exists it waits for one. A session that finds the journal or
    ``knn_state`` changed by another job (a catch-up run, a repartition's new plan) is
    restarted from Delta, so a new plan is picked up within a round; any other failure
    propagates (the caller's restart policy applies). Every round writes a status file
    (:func:`write_status`) for ``scripts/follow.sh status``. ``build_slots``, ``processes``,
    ``change_file_objects``: see :class:`FollowSession`.
    """
    stop = stop or threading.Event()
    idle_since = time.monotonic()
    waiting_said = False
    while not stop.is_set():
        if current_plan(Lake.of(warehouse)) is None or last_processed(Lake.of(warehouse)) is None:
            if not waiting_said:
                log("no partition plan yet: waiting for the first one (ingest O_init and partition)")
                waiting_said = True
            write_status(warehouse, run_id, state="waiting for a plan")
            if idle_exit is not None and time.monotonic() - idle_since > idle_exit:
                return 0
            stop.wait(poll)
            continue
        with FollowSession(spark, warehouse, run_id=run_id, build_slots=build_slots, processes=processes,
                           change_file_objects=change_file_objects) as session:
            log(f"following: plan {session.info.plan_version}, m={session.info.workers}, last t={session.last}")
            write_status(warehouse, run_id, state="following", plan=session.info.plan_version, last_t=session.last)
            try:
                while not stop.is_set():
                    report = session.step(until=until, max_timestamps=max_timestamps)
                    if report.timestamps:
                        idle_since = time.monotonic()
                        phases = ", ".join(f"{k} {v:.0f} ms" for k, v in report.phases_ms.items())
                        log(f"t={report.timestamps[0]}..{report.timestamps[-1]}: {report.objects:,} objects, "
                            f"+{report.insertions} -{report.deletions}: {phases}")
                        write_status(warehouse, run_id, state="following", plan=session.info.plan_version,
                                     last_t=session.last)
                        continue
                    if until is not None and session.last >= until:
                        return 0
                    if idle_exit is not None and time.monotonic() - idle_since > idle_exit:
                        return 0
                    stop.wait(poll)
            except StateChanged as err:
                log(f"{err}; restarting")
    log("stopped")
    write_status(warehouse, run_id, state="stopped")
    return 0


def status_path(warehouse: Warehouse) -> Path:
    """The status file of a follow session on ``warehouse``."""
    return warehouse.run_dir / f"follow-{warehouse.database}.status.json"


def write_status(warehouse: Warehouse, run_id: str, *, state: str, plan: int | None = None,
                 last_t: int | None = None) -> None:
    """What the follow process is doing, for ``scripts/follow.sh status`` (atomic replace)."""
    path = status_path(warehouse)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"pid": os.getpid(), "run_id": run_id, "state": state, "plan_version": plan, "last_t": last_t,
            "updated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    _atomic_write(path, json.dumps(body).encode())
