"""Concurrent publishes grouped into few Delta commits: one publisher task drains two queues.

A request to ``POST /v1/objects`` validates its rows itself (the readers' rules,
:func:`dkmsks.client.prepare_rows`) and puts them on the queue with a future; it then awaits its
share of the outcome. A task takes what the queue holds — everything that arrived while the
previous append ran, after waiting ``linger`` seconds for more — and lands it in **one**
:func:`~dkmsks.storage.landing.publish_rows` call (one Delta commit per landing table touched),
in a worker thread so the event loop keeps serving. So a thousand concurrent requests make a
handful of commits, not a thousand; a lone request waits only ``linger`` longer than its append.
A group is cut at ``max_rows`` rows.

**One writer, objects first.** Every landing write of the service runs in one writer thread.
The landing lock is re-entrant within a process (:mod:`dkmsks.storage.writer_lock`), so two
threads of the service would both hold it: each check could miss the other's append, and their
holds could chain without a gap, so that a run of another process never got the lock (measured:
follow mode took no timestamp for as long as two writer threads alternated under a publisher's
load). One thread keeps the writes in order, gives the lock back between groups, and keeps its
delta-rs tables open. Objects and subscription events wait in two queues, and the task takes
objects first: they need no liveness check, so a publish does not wait for the subscribes that
arrived with it. A publish request announces itself while it reads and validates its body
(:meth:`Publisher.announce`, tens of milliseconds for a thousand objects), and a group of events
ready meanwhile waits for it, up to ``yield_to_objects`` seconds, so a second's objects land
before its hundred subscribes even when those were parsed first.

**Subscribes and unsubscribes are grouped the same way.** Each is a request of one event row
(:meth:`Publisher.subscription`) that joins the next group, so a hundred concurrent ones land in
one append, not in a hundred (each append checks the batch's liveness against the state, ~0.1 s
at |S| = 1M, which a request apiece could not afford at a hundred a second).
Such a row is *interactive*: a refusal (the id is live already; a deletion of one that is not)
answers its request with an error and is not quarantined (``publish_rows(interactive=...)``).
A deletion by a principal without ``admin`` must name a registration of its own: the newest
landed insertion of the id, or an earlier subscribe of the same group, must be claimed by it
(one read of the insertions of the group's deleted ids); otherwise it is refused as not found
and left out. The claims of the group's accepted registrations are written right after the
append, in one SQLite transaction, in the writer thread.

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
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from dkmsks.client import PreparedRows
from dkmsks.io.rejections import Rejection
from dkmsks.storage import tables
from dkmsks.storage.lake import Lake, where
from dkmsks.storage.landing import landing_lock, next_open_timestamp, publish_rows
from dkmsks.warehouse import Warehouse


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
    # A subscribe or unsubscribe: its principal, whether admin, the event ("insert"/"delete", id).
    principal: str | None = None
    admin: bool = True
    event: tuple[str, int] | None = None


@dataclass
class Announced:
    """A publish request announced to the publisher (:meth:`Publisher.announce`)."""

    queued: bool = False


#: The reason a deletion of another principal's subscription is refused with (the route: 404).
NOT_YOURS = "no subscription %d of yours is live or pending"


class Publisher:
    """The publisher task of a service (module doc). ``observe(group_rows, requests, seconds)``
    is told of every append (metrics)."""

    def __init__(self, warehouse: Warehouse, *, linger: float = 0.005, max_rows: int = 50_000,
                 observe: Callable[[int, int, float], None] | None = None, registry: Any = None,
                 yield_to_objects: float = 0.1) -> None:
        self.warehouse = warehouse
        self.registry = registry  # claims of registrations (dkmsks.service.registry.Registry)
        self.lake = Lake.of(warehouse)
        self.linger = linger
        self.max_rows = max_rows
        self.observe = observe
        self.yield_to_objects = yield_to_objects
        self._objects: deque[_Job] = deque()
        self._events: deque[_Job] = deque()
        self._arrived: asyncio.Event | None = None  # made in the running loop
        self._announced = 0  # publish requests reading their bodies
        self._task: asyncio.Task[None] | None = None
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dkm-serve-writer")
        self.appends = 0  # groups landed

    def start(self) -> None:
        """Start the task (in the running event loop)."""
        self._arrived = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="dkm-serve-publisher")

    async def stop(self) -> None:
        """Stop the task; requests still queued fail."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for queue in (self._objects, self._events):
            while queue:
                job = queue.popleft()
                if not job.future.done():
                    job.future.set_exception(RuntimeError("the service is stopping"))
        self._writer.shutdown(wait=True)

    @contextlib.contextmanager
    def announce(self) -> Iterator[Announced]:
        """A publish request on its way (module doc): from its arrival until :meth:`publish`
        queues its rows, or it fails."""
        ticket = Announced()
        self._announced += 1
        try:
            yield ticket
        finally:
            if not ticket.queued:
                self._announced -= 1

    def _put(self, queue: deque[_Job], job: _Job) -> None:
        queue.append(job)
        if self._arrived is not None:
            self._arrived.set()

    async def publish(self, rows: PreparedRows, n_rows: int, ticket: Announced | None = None) -> Outcome:
        """Land ``rows`` (``n_rows`` rows given) with the next group of objects; its outcome."""
        job = _Job(rows, n_rows, asyncio.get_running_loop().create_future())
        if ticket is not None and not ticket.queued:
            ticket.queued = True
            self._announced -= 1
        self._put(self._objects, job)
        return await job.future

    async def subscription(self, rows: PreparedRows, op: str, sub_id: int, *, principal: str,
                           admin: bool) -> Outcome:
        """Land one subscribe (``op`` ``insert``) or unsubscribe (``delete``) of ``principal``,
        validated into ``rows``, with the next group of events (module doc); its outcome: the
        timestamp, or the refusal."""
        job = _Job(rows, 1, asyncio.get_running_loop().create_future(), principal=principal, admin=admin,
                   event=(op, int(sub_id)))
        self._put(self._events, job)
        return await job.future

    def _take(self, queue: deque[_Job]) -> list[_Job]:
        group: list[_Job] = []
        size = 0
        while queue and (not group or size + queue[0].n_rows <= self.max_rows):
            job = queue.popleft()
            group.append(job)
            size += job.n_rows
        return [job for job in group if not job.future.cancelled()]

    async def _run(self) -> None:
        assert self._arrived is not None
        while True:
            if not self._objects and not self._events:
                self._arrived.clear()
                await self._arrived.wait()
            if self.linger > 0:
                await asyncio.sleep(self.linger)
            if not self._objects and self._announced:
                deadline = time.monotonic() + self.yield_to_objects
                while not self._objects and self._announced and time.monotonic() < deadline:
                    await asyncio.sleep(0.002)
            group = self._take(self._objects if self._objects else self._events)
            if group:
                await self._land_group(group)

    async def _land_group(self, group: list[_Job]) -> None:
        started = time.monotonic()
        try:
            outcomes = await asyncio.get_running_loop().run_in_executor(self._writer, self._land, group)
        except BaseException as err:  # every caller hears of it; the task goes on
            for job in group:
                if not job.future.done():
                    job.future.set_exception(err if isinstance(err, Exception) else RuntimeError(str(err)))
            if not isinstance(err, Exception):
                raise
            return
        self.appends += 1
        if self.observe is not None:
            self.observe(sum(job.n_rows for job in group), len(group), time.monotonic() - started)
        for job, outcome in zip(group, outcomes, strict=True):
            if not job.future.done():
                job.future.set_result(outcome)

    def _land(self, jobs: list[_Job]) -> list[Outcome]:
        """One append of every batch of a group (in the writer thread); each job's outcome."""
        batches = [job.rows for job in jobs]
        with landing_lock(self.warehouse, "dkm serve (publishing)"):
            opened = [bool(b.open_lines[0] or b.open_lines[1]) for b in batches]
            at = next_open_timestamp(self.warehouse, self.lake) if any(opened) else None
            if at is not None:
                batches = [b.at(at) for b in batches]
            foreign, gone = self._deletions(jobs)
            kept = [b for i, b in enumerate(batches) if i not in foreign]
            objects = _without_repeats(_concat([b.objects for b in kept]))
            events = _concat([b.events for b in kept])
            rejected = [r for b in kept for r in b.rejected]
            interactive = {b.source for job, b in zip(jobs, batches, strict=True) if job.event is not None}
            report = publish_rows(self.warehouse, objects=objects, events=events, rejected=rejected,
                                  run_id="dkm-serve", who="dkm serve (publishing)", interactive=interactive)
        by_source: dict[str, list[Rejection]] = {}
        for _, r in report.refused:
            by_source.setdefault(r.source, []).append(r)
        for i, reason in foreign.items():
            by_source.setdefault(batches[i].source, []).append(Rejection(batches[i].source, 1, reason, ""))
        for job, b in zip(jobs, batches, strict=True):  # not live, nor pending: not found
            if job.event is not None and job.event[0] == "delete" and job.event[1] in gone:
                by_source[b.source] = [Rejection(b.source, 1, NOT_YOURS % job.event[1], "")
                                       for _ in by_source.get(b.source, [])]
        outcomes = [Outcome(at if open_t else None, sorted(by_source.get(b.source, []), key=lambda r: r.line))
                    for b, open_t in zip(batches, opened, strict=True)]
        claims = [(job.event[1], int(outcome.t), job.principal) for job, outcome in zip(jobs, outcomes, strict=True)
                  if job.event is not None and job.event[0] == "insert" and not outcome.refused
                  and outcome.t is not None]
        if claims and self.registry is not None:
            self.registry.claim_many(claims)
        return outcomes

    def _deletions(self, jobs: list[_Job]) -> tuple[dict[int, str], set[int]]:
        """The group's unsubscribes, checked (module doc): the jobs (by position) that delete a
        registration their principal does not own, with the reason; and the deleted ids that
        have no registration live or pending (none landed after their last deletion), whose
        refusal is "not found" rather than "not live at this timestamp" (one registered at it)."""
        asked = {i: job for i, job in enumerate(jobs) if job.event is not None and job.event[0] == "delete"}
        if not asked:
            return {}, set()
        ids = sorted({job.event[1] for job in asked.values() if job.event is not None})
        rows = self.lake.read(tables.EVENTS, columns=["op", "id", "t"], predicate=where(id__in=ids))
        newest: dict[tuple[str, int], int] = {}
        for op, sid, t in zip(rows.column("op").to_pylist(), rows.column("id").to_pylist(),
                              rows.column("t").to_pylist(), strict=True):
            newest[(op, int(sid))] = max(int(t), newest.get((op, int(sid)), int(t)))
        gone = {sid for sid in ids if ("insert", sid) not in newest
                or newest.get(("delete", sid), -(2**63)) >= newest[("insert", sid)]}
        refused = {}
        for i, job in asked.items():
            assert job.event is not None
            sid = job.event[1]
            # An earlier subscribe of this group is the newest registration, else the landed one.
            before = [j for j in jobs[:i] if j.event == ("insert", sid)]
            if before:
                gone.discard(sid)
            if job.admin or self.registry is None:
                continue
            owner = before[-1].principal if before else (
                self.registry.owner_of_registration(sid, newest[("insert", sid)]) if ("insert", sid) in newest
                else None)
            if owner != job.principal:
                refused[i] = NOT_YOURS % sid
        return refused, gone


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
