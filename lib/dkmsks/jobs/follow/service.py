"""Follow mode as a service: sessions one after another until told to stop, and a status file.

:func:`follow_forever` waits for the first plan, runs a
:class:`~dkmsks.jobs.follow.session.FollowSession` and calls its
:meth:`~dkmsks.jobs.follow.session.FollowSession.step` round after round; a session that finds
another job's commit is restarted from Delta. ``dkm follow``, ``spark_apps/microbatch.py
--follow``, ``scripts/follow.sh`` and compose's ``follow`` service run it.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from dkmsks.jobs.follow.session import CHANGE_FILE_OBJECTS, FollowSession, StateChanged
from dkmsks.jobs.follow.spool import atomic_write
from dkmsks.storage.journal import last_processed
from dkmsks.storage.lake import Lake
from dkmsks.storage.plans import current_plan
from dkmsks.warehouse import Warehouse

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
    channel: str = "auto", routing: bool = True,
) -> int:
    """Run follow sessions until ``until`` is processed, ``idle_exit`` seconds pass idle, or
    ``stop`` is set (a service's SIGTERM). A round takes at most ``max_timestamps`` of the
    pending timestamps (None: all of them; :data:`ROUND_TIMESTAMPS`).

    Before the first plan exists it waits for one. A session that finds the journal or
    ``knn_state`` changed by another job (a catch-up run, a repartition's new plan) is
    restarted from Delta, so a new plan is picked up within a round; any other failure
    propagates (the caller's restart policy applies). Every round writes a status file
    (:func:`write_status`) for ``scripts/follow.sh status``. ``build_slots``, ``processes``,
    ``change_file_objects``, ``channel``, ``routing``: see :class:`FollowSession`.
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
                           change_file_objects=change_file_objects, channel=channel, routing=routing) as session:
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
    atomic_write(path, json.dumps(body).encode())
