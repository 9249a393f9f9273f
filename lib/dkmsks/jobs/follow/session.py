"""The main server's side of follow mode: one warm session, a round at a time.

:class:`FollowSession` reads the current plan, builds the main server once and starts the
worker tasks (:mod:`.worker_loop`) in one barrier stage that lives as long as the session.
Each :meth:`~FollowSession.step` is one round under the writer lock, in three steps:
:meth:`~FollowSession._take_and_route` (the pending timestamps, routed by the main server),
:meth:`~FollowSession._dispatch_and_collect` (the payload to the worker tasks through the
round channel, :mod:`.channel`, and their records back) and :meth:`~FollowSession._commit`
(one journal commit, as a catch-up run's; docs/design.md §8). Before each round it checks that
the journal and ``knn_state`` are at the versions it last saw; if another job committed, it
raises :class:`StateChanged` and the service (:mod:`.service`) restarts from Delta.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession

from dkmsks.core.model import Vocabulary
from dkmsks.cores import usable_cores
from dkmsks.jobs.follow.channel import ChangeFiles, Round, RoundChannel, RoundOutput
from dkmsks.jobs.follow.spool import SpoolChannel
from dkmsks.jobs.follow.worker_loop import default_processes, follow_worker_loop, hosted_workers
from dkmsks.spark.bridge import warm_kernels
from dkmsks.spark.compaction import compact, tail_is_large, uncompacted_rows
from dkmsks.spark.faults import kill_at
from dkmsks.spark.main_server import (
    RoutedBatch,
    build_main_server,
    build_router,
    refresh_weights,
    route,
    task_payload,
)
from dkmsks.spark.quarantine import quarantine_refused
from dkmsks.storage import tables
from dkmsks.storage.journal import (
    RunReport,
    commit,
    commit_with_files,
    journal_file_schema,
    journal_records,
    last_processed,
    record_run_metrics,
)
from dkmsks.storage.lake import Lake
from dkmsks.storage.landing import take_pending
from dkmsks.storage.plans import current_plan
from dkmsks.storage.state_io import StateView
from dkmsks.storage.writer_lock import writer_lock
from dkmsks.warehouse import Warehouse

#: Rounds of at least this many objects have their changes written by the worker tasks
#: (:class:`ChangeFiles`). A one-timestamp round's few thousand changes cost the driver's
#: append ~10 ms; written by the tasks they made it slower (a file and a hand-over per task,
#: and a commit of files: 0.14 against 0.10 s per round at |S| = 1M, docs/benchmarks.md).
CHANGE_FILE_OBJECTS = 10_000


class StateChanged(RuntimeError):
    """Another job committed the journal or ``knn_state`` under a follow session (a catch-up
    run, a repartition); the session must restart from Delta."""


@dataclass
class FollowStats:
    """Counters of a follow session: rounds run, timestamps processed, files of changes the
    worker tasks wrote into the journal (:class:`ChangeFiles`), and what the rounds handed the
    tasks: bytes (as the channel carries them) and objects, summed over the tasks."""

    rounds: int = 0
    timestamps: int = 0
    task_change_files: int = 0
    bytes_out: int = 0
    objects_out: int = 0


#: The round channels ``channel=`` names (``auto``: :func:`channel_for`).
CHANNELS = ("auto", "spool", "flight")


def channel_for(master: str | None) -> str:
    """The channel a follow session uses by default under Spark master ``master``: the spool in
    local mode (where it is the faster, docs/design.md §10), Flight when the executors may be on
    other hosts."""
    return "spool" if (master or "local").startswith("local") else "flight"


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
                 processes: int | None = None, change_file_objects: int | None = CHANGE_FILE_OBJECTS,
                 channel: str = "auto", routing: bool = True) -> None:
        self.spark = spark
        self.warehouse = warehouse
        self.run_id = run_id
        self.start_timeout = start_timeout
        if channel not in CHANNELS:
            raise ValueError(f"channel must be one of {', '.join(CHANNELS)}, got {channel!r}")
        if channel == "auto":
            channel = channel_for(spark.sparkContext.master if spark is not None else None)
        slots = max(1, build_slots or usable_cores())
        #: The round exchange with the worker tasks (:mod:`.channel`): a spool folder of its own
        #: beside the warehouse (``spool``), or a Flight server on the driver (``flight``),
        #: looked at every ``poll`` seconds while the tasks apply a round, in which
        #: ``build_slots`` tasks of a host build at once (one per core by default).
        self.channel: RoundChannel
        if channel == "flight":
            from dkmsks.jobs.follow.flight import FlightChannel

            self.channel = FlightChannel(poll=poll, build_slots=slots)
        else:
            self.channel = SpoolChannel(warehouse.spool_dir / f"follow-{uuid.uuid4().hex[:12]}", poll=poll,
                                        build_slots=slots)
        #: Whether each task gets only the objects routed to its workers (docs/design.md §2.6).
        self.routing = routing
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
        self._round = 0  # the number of the next round the channel carries
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
            self.router = build_router(view, info, self.vocab) if self.routing else None
        warm_kernels()  # once here, so that the m worker processes load them instead of compiling
        self.channel.open()
        config = {"method": info.method, "space": info.space.as_tuple(), "grid": info.config.grid}
        root = lake.local_root(tables.JOURNAL)
        if self.change_file_objects is not None and root is not None:
            self._change_files = ChangeFiles(root, journal_file_schema(lake), info.plan_version, self.run_id)
        self._tasks = processes
        self._hosted = [hosted_workers(task, processes, info.workers) for task in range(processes)]
        m, channel = info.workers, self.channel
        rdd = (
            spark.sparkContext.parallelize(range(processes), processes)
            .barrier()
            .mapPartitions(lambda _: follow_worker_loop(view, channel, config, processes, m))
        )

        def drive() -> None:
            try:
                rdd.collect()
            except BaseException as err:  # surfaced to the caller by _check()
                self._failure = err

        self._thread = threading.Thread(target=drive, name="dkmsks-follow-workers", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + self.start_timeout
        while self.channel.ready_workers() < m:
            self._check()
            if time.monotonic() > deadline:
                raise TimeoutError(f"worker tasks not ready after {self.start_timeout:.0f} s")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop the worker stage and wait for it (up to two minutes)."""
        self.channel.stop()
        if self._thread is not None:
            self._thread.join(timeout=120)
            self._thread = None
        self.channel.close()

    def __enter__(self) -> FollowSession:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _check(self) -> None:
        """Raise if a worker task failed or the worker stage ended."""
        self.channel.check()
        self._check_stage()

    def _check_stage(self) -> None:
        """Raise if the worker stage ended: a task's failure made Spark end it, or it returned."""
        if self._failure is not None:
            raise RuntimeError(f"the worker stage ended: {self._failure}") from self._failure
        if self._thread is not None and not self._thread.is_alive():
            raise RuntimeError("the worker stage ended unexpectedly")

    # ------------------------------------------------------------------ one round
    def step(self, *, until: int | None = None, max_timestamps: int | None = None) -> RunReport:
        """Process the timestamps pending now (possibly none) with the warm workers: one round
        under the writer lock, taken and routed (:meth:`_take_and_route`), applied by the
        worker tasks (:meth:`_dispatch_and_collect`) and committed (:meth:`_commit`). With
        nothing pending, the journal is compacted if its tail is large."""
        if self._quiet():
            return RunReport(self.run_id, [], self.last)
        # Before the look, so that no commit slips by unseen.
        self._landing = {name: self.lake.version_from(name, v) for name, v in self._landing.items()}
        with writer_lock(self.warehouse, f"follow {self.run_id}"):
            report, routed = self._take_and_route(until, max_timestamps)
            if routed is None:
                self._compact_if_large(report)
            else:
                output = self._dispatch_and_collect(routed, report)
                self._commit(routed, output, report)
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

    def _take_and_route(self, until: int | None, max_timestamps: int | None) -> tuple[RunReport, RoutedBatch | None]:
        """Take the pending timestamps (at most ``max_timestamps``, none after ``until``) and
        route them on the main server (docs/design.md §2.4): the round's report, and its routed
        batch (None when nothing is pending). Raises :class:`StateChanged` when another job
        committed the journal or ``knn_state`` since this session's last commit."""
        lake = self.lake
        phases: dict[str, float] = {}
        started = time.perf_counter()
        self._check()
        journal = lake.version(tables.JOURNAL)
        if journal != self.journal_version and lake.only_fences_since(tables.JOURNAL, self.journal_version):
            # A takeover of the writer lease committed its fence and nothing else
            # (dkmsks.storage.leases): no other job's round, nothing to restart for.
            self.journal_version = journal
        if (journal, lake.version(tables.STATE)) != (self.journal_version, self.state_version):
            raise StateChanged("another job committed the journal or knn_state (a catch-up run or a repartition); "
                               "restarting follow mode from Delta")
        taken = take_pending(self.warehouse, lake, self.vocab, after=self.last, until=until,
                             max_timestamps=max_timestamps, who=f"follow {self.run_id}")
        report = RunReport(self.run_id, taken.timestamps, self.last, phases_ms=phases)
        if not taken.timestamps:
            return report, None
        phases["read"] = (time.perf_counter() - started) * 1e3

        started = time.perf_counter()
        routed = route(self.server, self.info, taken.timestamps, taken.objects, taken.events, self.vocab, self.router)
        phases["assign"] = (time.perf_counter() - started) * 1e3
        return report, routed

    def _change_files_for(self, routed: RoutedBatch) -> ChangeFiles | None:
        """Where the worker tasks write this round's changes, if the round is large enough
        (:data:`CHANGE_FILE_OBJECTS`); None: they go to the driver with the other records."""
        objects = sum(c[0] for c in routed.counts.values())
        return self._change_files if objects >= (self.change_file_objects or 0) else None

    def _dispatch_and_collect(self, routed: RoutedBatch, report: RunReport) -> RoundOutput:
        """Put the round on the channel and wait for every worker's records and, when the tasks
        write the changes (:meth:`_change_files_for`), every task's change file."""
        started = time.perf_counter()
        files = self._change_files_for(routed)
        if routed.objects_to is None:
            sizes = self.channel.put_round(self._round, Round(routed.payload, files))
            self.stats.bytes_out += sizes[0] * self._tasks
            self.stats.objects_out += routed.payload.obj_ids.shape[0] * self._tasks
        else:  # each task its workers' objects (docs/design.md §2.6)
            payloads = [task_payload(routed, hosted) for hosted in self._hosted]
            sizes = self.channel.put_round(self._round, [Round(p, files) for p in payloads])
            self.stats.bytes_out += sum(sizes)
            self.stats.objects_out += sum(p.obj_ids.shape[0] for p in payloads)
        output = self.channel.collect(self._round, workers=self.info.workers,
                                      tasks=self._tasks if files is not None else 0, alive=self._check_stage)
        self._round += 1
        report.phases_ms["workers"] = (time.perf_counter() - started) * 1e3
        return output

    def _commit(self, routed: RoutedBatch, output: RoundOutput, report: RunReport) -> None:
        """Commit the round: the workers' records (finals with the main server's refreshed
        weights) and a ledger record per timestamp in one journal commit (docs/design.md §8),
        together with the change files the tasks wrote; the refused events to quarantine just
        before. Raises :class:`StateChanged` if another job committed these timestamps."""
        info, lake, ts, written = self.info, self.lake, report.timestamps, output.change_files
        to_t = ts[-1]
        started = time.perf_counter()
        records = journal_records(refresh_weights(self.server, pa.concat_tables(output.records), self.router),
                                  plan_version=info.plan_version, routed=routed, timestamps=ts, from_t=self.last,
                                  run_id=self.run_id)
        quarantine_refused(self.spark, routed.refused, self.run_id)
        files = self._change_files_for(routed)
        kill_at("before-journal")  # test-only (DKMSKS_FAULT_KILL_AT): taken and applied, not committed
        committed = (commit_with_files(lake, records, written, to_t, schema=files.schema) if files is not None
                     else commit(lake, records, to_t))
        if not committed:
            raise StateChanged(f"timestamps up to {to_t} were committed by another job; restarting follow mode")
        kill_at("after-journal")  # test-only: the round is committed, its run_metrics not written
        self.journal_version = lake.version(tables.JOURNAL)
        report.phases_ms["commit"] = (time.perf_counter() - started) * 1e3
        record_run_metrics(lake, self.run_id, "follow", self.last, to_t, report.phases_ms)
        self.tail_rows += int(pc.sum(pc.equal(records.column("record"), "final")).as_py() or 0)
        self.last = to_t
        report.add_counts(routed)
        self.stats.rounds += 1
        self.stats.task_change_files += len(written)
        self.stats.timestamps += len(ts)

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
