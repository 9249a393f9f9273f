"""The journal: the commit point of every run, and the ledger of processed timestamps.

A run (a micro-batch, a follow-mode round) processes the timestamps ``(from_t, to_t]`` and
commits its whole output as **one append** to the ``journal`` table: per timestamp a
``ledger`` record, every result ``change``, the per-worker ``metric`` records, and one
``final`` record per subscription it touched (the state to overlay on ``knn_state``, see
:mod:`dkmsks.storage.state_io`). The append is tagged with ``txnAppId = dkmsks-journal``,
``txnVersion = to_t`` (Delta's idempotent writes): all or nothing, and a replay of committed
timestamps is skipped. A run that dies before it committed nothing; after it, it is complete
(docs/design.md §8, the commit protocol).

Written from the driver with delta-rs (:mod:`dkmsks.storage.lake`): a blind append is a few
milliseconds, where a Spark job costs seconds of scheduling on two cores.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dkmsks.storage import driver_data, tables
from dkmsks.storage.lake import Lake

if TYPE_CHECKING:
    from dkmsks.storage.journal_files import JournalFile

#: The Delta application id of journal commits (its txnVersion is the last timestamp committed).
JOURNAL_APP = "dkmsks-journal"


def last_processed(lake: Lake, version: int | None = None) -> int | None:
    """The newest timestamp in the ledger (at journal ``version``), from the journal's Delta log.

    Every journal commit carries ``txnVersion`` = the last timestamp it commits (:func:`commit`,
    :func:`commit_first_ledger`), so this is the newest ``t`` of the ledger records without
    opening the ledger's files, which grow by one per run: a scan of them took 133 ms of CPU at
    ~350 runs, and publishers, readers and watchers ask often.
    """
    done = lake.table(tables.JOURNAL, version).transaction_version(JOURNAL_APP)
    return None if done is None else int(done)


def pending_timestamps(lake: Lake, after: int | None, until: int | None = None) -> list[int]:
    """Distinct timestamps after ``after`` (and up to ``until``; ``None``: no bound) with objects or events."""
    return driver_data.pending_timestamps(lake, after, until)


class RoutedCounts(Protocol):
    """What a run reports of its routed timestamps (``dkmsks.spark.main_server.RoutedBatch``)."""

    counts: dict[int, tuple[int, int, int]]  # t -> (objects, insertions, deletions) applied
    refused: list[tuple[int, int, str]]  # (t, sub id, reason)


@dataclass
class RunReport:
    """What one run (micro-batch or follow round) did."""

    run_id: str
    timestamps: list[int]
    from_t: int | None
    objects: int = 0
    insertions: int = 0
    deletions: int = 0
    rejected: int = 0
    replayed: bool = False
    compacted: bool = False
    phases_ms: dict[str, float] = field(default_factory=dict)

    def add_counts(self, routed: RoutedCounts) -> None:
        """Add a routed batch's objects, insertions, deletions and refusals to the counts."""
        self.objects += sum(c[0] for c in routed.counts.values())
        self.insertions += sum(c[1] for c in routed.counts.values())
        self.deletions += sum(c[2] for c in routed.counts.values())
        self.rejected += len(routed.refused)


#: The record kinds a run's workers write (the run adds its ledger records).
WORKER_RECORDS = ("change", "final", "metric")


def journal_records(
    out: pa.Table, *, plan_version: int, routed: RoutedCounts, timestamps: list[int], from_t: int, run_id: str,
) -> pa.Table:
    """The one journal append of a run: its workers' records plus a ledger record per timestamp.

    ``out`` holds the workers' ``change``, ``final`` and ``metric`` records (finals already
    carrying the main server's refreshed weights, :func:`dkmsks.spark.main_server.refresh_weights`).
    """
    # The records go in as the workers wrote them: the append splits them by the table's
    # `record` partition itself, keeping their order within each kind, so grouping them here
    # first only copied every list column (143 MiB for a 100-timestamp burst at |S| = 1M, and
    # in a warm follow driver mostly fresh pages: docs/benchmarks.md).
    unknown = pc.invert(pc.is_in(out.column("record"), value_set=pa.array(WORKER_RECORDS)))
    if pc.any(unknown).as_py():
        raise ValueError("a worker record is neither a change, a final nor a metric: "
                         f"{pc.unique(out.column('record').filter(unknown)).to_pylist()}")
    body = out.drop(["seq"])
    n_ts = len(timestamps)
    ledger = pa.table({
        "record": pa.array(["ledger"] * n_ts),
        "t": pa.array(timestamps, type=pa.int64()),
        "run_from_t": pa.array([from_t] * n_ts, type=pa.int64()),
        "run_through_t": pa.array([timestamps[-1]] * n_ts, type=pa.int64()),
        "objects": pa.array([routed.counts[t][0] for t in timestamps], type=pa.int64()),
        "insertions": pa.array([routed.counts[t][1] for t in timestamps], type=pa.int64()),
        "deletions": pa.array([routed.counts[t][2] for t in timestamps], type=pa.int64()),
    })
    return with_run(pa.concat_tables([body, ledger], promote_options="default"), plan_version=plan_version,
                    run_id=run_id)


def with_run(records: pa.Table, *, plan_version: int, run_id: str) -> pa.Table:
    """``records`` with the run's ``plan_version`` and ``run_id`` columns."""
    n = records.num_rows
    records = records.append_column("plan_version", pa.array(np.full(n, plan_version, dtype=np.int64)))
    return records.append_column("run_id", pa.repeat(pa.scalar(run_id, type=pa.string()), n))


def commit(lake: Lake, records: pa.Table, to_t: int) -> bool:
    """The commit point of a run; False when these timestamps were committed before (a replay)."""
    return lake.append(tables.JOURNAL, records, app_id=JOURNAL_APP, version=to_t)


def journal_file_schema(lake: Lake) -> pa.Schema:
    """The columns of a journal file (:func:`dkmsks.storage.journal_files.file_schema`)."""
    from dkmsks.storage.journal_files import file_schema
    from dkmsks.storage.lake import plain_schema

    return file_schema(plain_schema(pa.schema(lake.table(tables.JOURNAL).schema().to_arrow())))


def commit_with_files(lake: Lake, records: pa.Table, written: list[JournalFile], to_t: int,
                      schema: pa.Schema | None = None) -> bool:
    """:func:`commit` of ``records`` together with journal files already ``written`` (by a
    follow round's worker tasks, :mod:`dkmsks.storage.journal_files`): the driver writes its
    records as one file per kind and adds every file in one commit, tagged like an append.
    False, and the files deleted, when these timestamps were committed before (a replay).
    On a journal that is not on this machine's file system nothing can have been written
    (``written`` must be empty): the records go in by :func:`commit`."""
    from dkmsks.storage.journal_files import discard, write_kinds

    root = lake.local_root(tables.JOURNAL)
    if root is None:
        if written:
            raise ValueError("journal files were written, but the journal is not on a local file system")
        return commit(lake, records, to_t)
    files = [*written, *write_kinds(root, records, schema or journal_file_schema(lake))]
    if lake.commit_files(tables.JOURNAL, files, app_id=JOURNAL_APP, version=to_t):
        return True
    discard(root, files)
    return False


def commit_first_ledger(lake: Lake, *, t0: int, plan_version: int, run_id: str, objects: int,
                        insertions: int) -> None:
    """The ledger record of ``T0`` that completes the initial partitioning (idempotent)."""
    lake.append(tables.JOURNAL, pa.table({
        "record": ["ledger"], "t": [t0], "plan_version": [plan_version], "run_id": [run_id],
        "run_from_t": [t0], "run_through_t": [t0], "objects": [objects], "insertions": [insertions],
        "deletions": [0],
    }), app_id=JOURNAL_APP, version=t0)


def record_run_metrics(lake: Lake, run_id: str, job: str, from_t: int, to_t: int, phases: dict[str, float],
                       *, metadata: dict[str, str] | None = None) -> None:
    """Per-phase times of a run into ``run_metrics`` (after its commit; not part of it);
    ``metadata`` goes into that commit's info (maintenance records its report there)."""
    lake.append(tables.RUN_METRICS, pa.table({
        "run_id": [run_id] * len(phases), "job": [job] * len(phases), "from_t": [int(from_t)] * len(phases),
        "to_t": [int(to_t)] * len(phases), "phase": list(phases), "ms": [float(v) for v in phases.values()],
    }), metadata=metadata)
