"""The workers of a run as Spark tasks: one task per worker, records back as Arrow IPC.

A catch-up run (a micro-batch) hands each task its worker's part of the routed
:class:`~dkmsks.spark.bridge.BatchPayload` (the objects routed to it, docs/design.md §2.6; or
broadcasts one payload to all) and runs :func:`dkmsks.spark.bridge.run_worker` in one task per
worker, which reads that worker's current state and applies the pending timestamps. Follow mode keeps its tasks
running instead (:mod:`dkmsks.jobs.follow`) and hands records over as the same IPC bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from dkmsks.spark.bridge import BatchPayload, run_worker
from dkmsks.storage.state_io import StateView

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def to_ipc(table: pa.Table) -> bytes:
    """An Arrow table as an IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def from_ipc(data: bytes) -> pa.Table:
    """The Arrow table of an IPC stream."""
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def run_workers(spark: SparkSession, workers: int, payload: BatchPayload | Sequence[BatchPayload],
                view: StateView) -> pa.Table:
    """One Spark task per worker: read its state, apply its payload (one broadcast to all, or
    ``payload[w]`` shipped with task ``w``); all records, as Arrow."""
    if not isinstance(payload, BatchPayload):
        if len(payload) != workers:
            raise ValueError(f"{len(payload)} payloads for {workers} workers")

        def own(index: int, rows: Any) -> Any:
            for _, mine in rows:
                yield to_ipc(run_worker(index, view, mine))

        parts = spark.sparkContext.parallelize(list(enumerate(payload)), workers).mapPartitionsWithIndex(own).collect()
        return pa.concat_tables([from_ipc(p) for p in parts])
    bc = spark.sparkContext.broadcast(payload)

    def task(index: int, _: Any) -> Any:
        yield to_ipc(run_worker(index, view, bc.value))

    try:
        parts = spark.sparkContext.parallelize(range(workers), workers).mapPartitionsWithIndex(task).collect()
    finally:
        bc.destroy()
    return pa.concat_tables([from_ipc(p) for p in parts])
