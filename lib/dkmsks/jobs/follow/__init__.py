"""Follow mode: one warm application whose long-running Spark tasks keep the workers built.

A catch-up run rebuilds every worker from the state — right for a backlog, wrong for one
timestamp at a time: docs/design.md §3 fact 6 says touching all state per timestamp is the enemy.
Here the tasks of one barrier stage build the ``m`` workers once (each task hosts every
``processes``-th worker; one task per core by default) and then stay alive, each applying one
:class:`~dkmsks.spark.bridge.BatchPayload` per round to its workers in turn. The driver — the
main server, also kept warm — routes each new timestamp, hands the payload to the tasks
(:class:`RoundChannel`), collects the workers' records and commits them with the same protocol as a catch-up run: one
journal commit per round, under the writer lock (released between rounds, so a scheduled
catch-up run or a repartition can get in; the session then sees the foreign commit and
restarts from Delta). In a large round (:data:`CHANGE_FILE_OBJECTS`) the tasks write their
workers' result changes into journal files themselves and the driver adds those files to its
commit (:class:`ChangeFiles`). When idle it compacts the journal into ``knn_state`` once the
uncompacted tail is large.

The modules, from the entry point down:

- :mod:`.service` — :func:`follow_forever`, the service loop (sessions until stopped, the
  status file, ``--max-timestamps``);
- :mod:`.session` — :class:`FollowSession`, the main server's side: start the worker stage,
  then each round taken and routed, dispatched and collected, committed;
- :mod:`.channel` — :class:`RoundChannel`, the round exchange between the two sides, the only
  way the session and the worker tasks talk to each other;
- :mod:`.worker_loop` — the body of a long-running worker task, and which task hosts which
  workers;
- :mod:`.spool` — :class:`SpoolChannel`, the round exchange through a directory: file names,
  atomic writes, the gates idle tasks sleep at, the build slots;
- :mod:`.wire` — a round and a worker's records as bytes: Arrow IPC and JSON, data only;
- :mod:`.heap` — the glibc allocator settings of a warm worker task.

The spool is a local directory, so follow mode needs the driver and executors to share a
filesystem (local mode, or a cluster with the warehouse volume mounted everywhere, as in
``docker-compose.yml``), and at least ``processes + 1`` task slots: the worker stage holds
``processes`` of them for as long as the session lives, and the driver's own reads and commits
need the rest. If a worker task fails, the session stops; the next session rebuilds from Delta,
where every committed timestamp is safe.
"""

from __future__ import annotations

from dkmsks.jobs.follow.channel import ChangeFiles, Round, RoundChannel, RoundOutput
from dkmsks.jobs.follow.service import ROUND_TIMESTAMPS, follow_forever, round_cap, status_path, write_status
from dkmsks.jobs.follow.session import CHANGE_FILE_OBJECTS, FollowSession, FollowStats, StateChanged
from dkmsks.jobs.follow.spool import SpoolChannel
from dkmsks.jobs.follow.worker_loop import default_processes, hosted_workers, write_changes

__all__ = ["CHANGE_FILE_OBJECTS", "ROUND_TIMESTAMPS", "ChangeFiles", "FollowSession", "FollowStats", "Round",
           "RoundChannel", "RoundOutput", "SpoolChannel", "StateChanged", "default_processes", "follow_forever",
           "hosted_workers", "round_cap", "status_path", "write_changes", "write_status"]
