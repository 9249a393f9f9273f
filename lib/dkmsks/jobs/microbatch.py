"""Micro-batch job: every pending timestamp exactly once, one Spark task per worker.

The driver is the main server (docs/design.md §4): it reads the pending objects and subscription
events, routes deletions to the workers holding them and assigns insertions with the plan's
cost model and ``C(w)`` (:mod:`dkmsks.spark.main_server`). One Spark task per worker reads
that worker's current state, rebuilds the core worker and applies the pending timestamps in
order (docs/design.md §3 fact 2: many timestamps in one job equal one job per timestamp), returning
its records as Arrow (:mod:`dkmsks.spark.worker_tasks`).

Commit protocol (one run = the timestamps ``(from_t, to_t]``, under the writer lock):

1. one append to the ``journal`` — ledger, change, final and metric records of every
   timestamp of the run — tagged with ``txnAppId = dkmsks-journal``, ``txnVersion = to_t``:
   the commit point (:mod:`dkmsks.storage.journal`). All or nothing; a replay is skipped;
2. afterwards, and only as maintenance, a *compaction* MERGEs the journal's final records
   into ``knn_state`` (:mod:`dkmsks.spark.compaction`).

A run that dies before step 1 committed nothing: the next run starts from the same ledger.
A run that dies after it is complete. Nothing is lost or applied twice.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from dkmsks.core.model import Vocabulary
from dkmsks.spark.compaction import compact
from dkmsks.spark.faults import kill_at
from dkmsks.spark.main_server import build_main_server, build_router, refresh_weights, route, task_payload
from dkmsks.spark.quarantine import quarantine_refused
from dkmsks.spark.worker_tasks import run_workers
from dkmsks.storage.journal import (
    RunReport,
    commit,
    journal_records,
    last_processed,
    pending_timestamps,
    record_run_metrics,
)
from dkmsks.storage.lake import Lake
from dkmsks.storage.landing import take_pending
from dkmsks.storage.plans import current_plan
from dkmsks.storage.state_io import StateView
from dkmsks.storage.writer_lock import writer_lock
from dkmsks.warehouse import Warehouse

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

COMPACTION_MODES = ("auto", "always", "never")


def run_microbatch(
    spark: SparkSession, warehouse: Warehouse, *, run_id: str, until: int | None = None,
    max_timestamps: int | None = None, compaction: str = "auto", lock_timeout: float | None = None,
    routing: bool = True,
) -> RunReport:
    """Process every pending timestamp (up to ``until``) exactly once; see the module doc.

    ``compaction``: ``auto`` (when the journal tail is large), ``always`` or ``never``.
    ``routing``: each worker's task gets only the objects routed to it (docs/design.md §2.6);
    False: every task every object (the paper's broadcast).
    """
    if compaction not in COMPACTION_MODES:
        raise ValueError(f"compaction must be one of {', '.join(COMPACTION_MODES)}, got {compaction!r}")
    lake = Lake.of(warehouse)
    phases: dict[str, float] = {}
    with writer_lock(warehouse, f"micro-batch {run_id}", timeout=lock_timeout):
        started = time.perf_counter()
        info = current_plan(lake)
        if info is None:
            raise ValueError("no partition plan yet: run the partition job after ingesting O_init")
        last = last_processed(lake)
        if last is None:
            raise ValueError("a partition plan exists but the ledger is empty: re-run the partition job "
                             "(it completes an interrupted first run)")
        # A cheap look first: the main server is only built when there is work.
        ts = pending_timestamps(lake, last, until)
        if max_timestamps is not None:
            ts = ts[:max_timestamps]
        report = RunReport(run_id, ts, last, phases_ms=phases)
        if ts:
            view = StateView.open(lake, fallback_plan=info.plan_version)
            vocab = Vocabulary()
            server = build_main_server(lake, info, vocab, view, warehouse.cache_dir)
            router = build_router(view, info, vocab) if routing else None
            taken = take_pending(warehouse, lake, vocab, after=last, until=until, max_timestamps=max_timestamps,
                                 who=f"micro-batch {run_id}")
            ts, objects, events = taken.timestamps, taken.objects, taken.events
            report.timestamps = ts
            to_t = ts[-1]
            phases["read"] = (time.perf_counter() - started) * 1e3

            started = time.perf_counter()
            routed = route(server, info, ts, objects, events, vocab, router)
            payload = (routed.payload if router is None
                       else [task_payload(routed, [w]) for w in range(info.workers)])
            phases["assign"] = (time.perf_counter() - started) * 1e3

            started = time.perf_counter()
            out = run_workers(spark, info.workers, payload, view)
            phases["workers"] = (time.perf_counter() - started) * 1e3

            started = time.perf_counter()
            records = journal_records(refresh_weights(server, out), plan_version=info.plan_version, routed=routed,
                                      timestamps=ts, from_t=last, run_id=run_id)
            quarantine_refused(spark, routed.refused, run_id)
            kill_at("before-journal")  # test-only (DKMSKS_FAULT_KILL_AT): taken and applied, not committed
            report.replayed = not commit(lake, records, to_t)
            kill_at("after-journal")  # test-only (DKMSKS_FAULT_KILL_AT): committed, no metrics yet
            phases["commit"] = (time.perf_counter() - started) * 1e3
            report.add_counts(routed)
        if compaction != "never":
            started = time.perf_counter()
            report.compacted = compact(spark, warehouse, force=compaction == "always") is not None
            if report.compacted:
                phases["compact"] = (time.perf_counter() - started) * 1e3
        if ts and not report.replayed:
            record_run_metrics(lake, run_id, "microbatch", last, ts[-1], phases)
    return report
