"""Concurrent publishes grouped into few Delta commits: one publisher task drains a queue.

A request to ``POST /v1/objects`` validates its rows itself (the readers' rules,
:func:`dkmsks.client.prepare_rows`) and puts them on the queue with a future; it then awaits its
share of the outcome. One task takes what the queue holds — everything that arrived while the
previous append ran, after waiting ``linger`` seconds for more — and lands it in **one**
:func:`~dkmsks.storage.landing.publish_rows` call (one Delta commit per landing table touched),
in a worker thread so the event loop keeps serving. So a thousand concurrent requests make a
handful of commits, not a thousand; a lone request waits only ``linger`` longer than its append.
A group is cut at ``max_rows`` rows.

Every landing write of the service — these groups, and each subscribe and unsubscribe
(:meth:`Publisher.exclusive`) — runs in the publisher's one writer thread. The landing lock is
re-entrant within a process (:mod:`dkmsks.storage.writer_lock`), so two threads of one process
would both hold it; one thread keeps the service's writes in order, and its delta-rs tables open.

Rows that name no timestamp land at the next open timestamp, chosen under the landing lock
right before the append (the lock is re-entrant, :mod:`dkmsks.storage.writer_lock`), so no run can
seal it in between and every row of the group lands at the same ``t``. Each request keeps its own
quarantine source (``api:<principal>#<digest>``), so its refused rows — by the rules, or against
the warehouse (an id landed with other values, a closed timestamp, a repeat within the group) —
are recorded and reported to it alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from dkmsks.client import PreparedRows
from dkmsks.io.rejections import Rejection
from dkmsks.storage.lake import Lake
from dkmsks.storage.landing import landing_lock, next_open_timestamp, publish_rows
from dkmsks.warehouse import Warehouse

T = TypeVar("T")


@dataclass
class Outcome:
    """One request's share of a group's append."""

    t: int | None  # the timestamp its rows without one landed at
    refused: list[Rejection]  # its refused rows, by validation or against the warehouse


@dataclass
class _Job:
    rows: PreparedRows
    n_rows: int
    future: asyncio.Future[Outcome]
    queued: float = field(default_factory=time.monotonic)


class Publisher:
    """The single publisher task of a service (module doc). ``observe(group_rows, requests,
    seconds)`` is told of every append (metrics)."""

    def __init__(self, warehouse: Warehouse, *, linger: float = 0.005, max_rows: int = 50_000,
                 observe: Callable[[int, int, float], None] | None = None) -> None:
        self.warehouse = warehouse
        self.lake = Lake.of(warehouse)
        self.linger = linger
        self.max_rows = max_rows
        self.observe = observe
        self._queue: asyncio.Queue[_Job] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._held: _Job | None = None  # a job that did not fit the last group
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dkm-serve-writer")
        self.appends = 0  # groups landed

    def start(self) -> None:
        """Start the task (in the running event loop)."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="dkm-serve-publisher")

    async def stop(self) -> None:
        """Stop the task; requests still queued fail."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        while not self._queue.empty():
            job = self._queue.get_nowait()
            if not job.future.done():
                job.future.set_exception(RuntimeError("the service is stopping"))
        self._writer.shutdown(wait=True)

    async def exclusive(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` in the writer thread, between two groups (a subscribe, an unsubscribe)."""
        return await asyncio.get_running_loop().run_in_executor(self._writer, fn, *args)

    async def publish(self, rows: PreparedRows, n_rows: int) -> Outcome:
        """Land ``rows`` (``n_rows`` rows given) with the next group; its outcome."""
        job = _Job(rows, n_rows, asyncio.get_running_loop().create_future())
        await self._queue.put(job)
        return await job.future

    async def _run(self) -> None:
        while True:
            first = self._held or await self._queue.get()
            self._held = None
            if self.linger > 0:
                await asyncio.sleep(self.linger)
            group, size = [first], first.n_rows
            while not self._queue.empty():
                job = self._queue.get_nowait()
                if size + job.n_rows > self.max_rows:
                    self._held = job
                    break
                group.append(job)
                size += job.n_rows
            group = [job for job in group if not job.future.cancelled()]
            if not group:
                continue
            started = time.monotonic()
            try:
                outcomes = await self.exclusive(self._land, [job.rows for job in group])
            except BaseException as err:  # every caller hears of it; the task goes on
                for job in group:
                    if not job.future.done():
                        job.future.set_exception(err if isinstance(err, Exception) else RuntimeError(str(err)))
                if not isinstance(err, Exception):
                    raise
                continue
            self.appends += 1
            if self.observe is not None:
                self.observe(size, len(group), time.monotonic() - started)
            for job, outcome in zip(group, outcomes, strict=True):
                if not job.future.done():
                    job.future.set_result(outcome)

    def _land(self, batches: list[PreparedRows]) -> list[Outcome]:
        """One append of every batch of a group (in a worker thread); each batch's outcome."""
        with landing_lock(self.warehouse, "dkm serve (publishing)"):
            opened = [bool(b.open_lines[0] or b.open_lines[1]) for b in batches]
            at = next_open_timestamp(self.warehouse, self.lake) if any(opened) else None
            if at is not None:
                batches = [b.at(at) for b in batches]
            objects = _without_repeats(_concat([b.objects for b in batches]))
            events = _concat([b.events for b in batches])
            rejected = [r for b in batches for r in b.rejected]
            report = publish_rows(self.warehouse, objects=objects, events=events, rejected=rejected,
                                  run_id="dkm-serve", who="dkm serve (publishing)")
        by_source: dict[str, list[Rejection]] = {}
        for _, r in report.refused:
            by_source.setdefault(r.source, []).append(r)
        return [Outcome(at if open_t else None, sorted(by_source.get(b.source, []), key=lambda r: r.line))
                for b, open_t in zip(batches, opened, strict=True)]


def _concat(parts: list[pa.Table | None]) -> pa.Table | None:
    present = [p for p in parts if p is not None and p.num_rows]
    if not present:
        return None
    return pa.concat_tables(present) if len(present) > 1 else present[0]


def _without_repeats(objects: pa.Table | None) -> pa.Table | None:
    """``objects`` without the later copies of a row another request of the group holds too
    (the same id and values): such a copy is a replay, as it would be one group later. A repeated
    id with other values stays, for :func:`publish_rows` to refuse."""
    if objects is None:
        return None
    ids = np.asarray(objects.column("id").to_numpy(), dtype=np.int64)
    _, first = np.unique(ids, return_index=True)
    if first.shape[0] == ids.shape[0]:
        return objects
    keep = np.ones(ids.shape[0], dtype=bool)
    first_of = dict(zip(ids[first].tolist(), first.tolist(), strict=True))
    for r in np.setdiff1d(np.arange(ids.shape[0]), first).tolist():
        a, b = objects.slice(first_of[int(ids[r])], 1).to_pylist()[0], objects.slice(r, 1).to_pylist()[0]
        if all(a[c] == b[c] for c in ("x", "y", "t")) and sorted(set(a["keywords"])) == sorted(set(b["keywords"])):
            keep[r] = False
    return objects.filter(pa.array(keep))
