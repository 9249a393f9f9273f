"""Result changes as Server-Sent Events: one tailer of the journal, fanned out to every stream.

**One reader.** The :class:`Hub` owns the only poll of the journal: every ``poll`` seconds it
looks for the journal's next commit file (one ``stat``, :meth:`~dkmsks.storage.lake.Lake.committed_after`),
and when a run has committed it reads the new timestamps' ``change`` records once, as
:meth:`dkmsks.client.Client.watch` does, encodes each change once as an SSE frame, and hands
each stream a reference to the frames it may see (an index by subscription id, one by owner,
and the unfiltered streams). A stream is a bounded deque of shared frames and a wake-up event:
no Delta read, no encoding and no task of its own beyond its connection's, so a thousand idle
streams cost a thousand small objects (docs/design.md §10, "The service").

**Event ids.** A change's id is ``<t>:<order>:<sub_id>``: its timestamp, then its place within
the timestamp as the export applies changes (``order`` 0 deletion, 1 registration, 2 update;
docs/design.md §1), then its subscription (one change of each kind per subscription and
timestamp). Ids are in stream order and intrinsic to the change: the same change has the same id
whichever process computed it and however much it read. A bare ``<t>`` means "everything through
``t``": the ``processed`` event that closes each commit carries it, and so does a ``reset``.

**Resume.** A client that reconnects with ``Last-Event-ID`` (or asks ``?after=<id>``) gets
exactly the changes after that id that it may see, then the live ones: the stream is attached
to the hub and the hub's position read in one step of the event loop, so the changes up to that
position come from the past and every later one from the live fan-out, with no gap and no
repeat. The past comes from the hub's ring of recent changes (``ring`` changes) or, further back,
from one journal read for that reconnection. An id older than the as-of horizon — the oldest
timestamp whose results can still be rebuilt (:func:`dkmsks.storage.export.oldest_available`,
which maintenance moves with :mod:`dkmsks.storage.retention`'s horizon) — or one that is not an
id of this warehouse (malformed, or after the last processed timestamp) gets a ``reset`` event
instead: the current results of the stream's subscriptions, from which the stream continues.

**Back-pressure.** Each commit reaches a stream as one chunk (its visible frames and the closing
``processed`` frame; the unfiltered streams share one chunk). A stream that still holds more than
``max_buffer`` unwritten bytes when the next commit arrives has not kept up and is disconnected
(its connection task is cancelled and the ASGI call returns; the kernel's ``TCP_USER_TIMEOUT`` on
the listening socket then ends a connection whose peer never reads), so what a stream holds is
bounded by ``max_buffer`` plus one commit's share. The fan-out never waits for a stream, so a
stalled client slows nobody.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow.compute as pc

from dkmsks.service.registry import Registry
from dkmsks.storage import tables
from dkmsks.storage.journal import last_processed
from dkmsks.storage.lake import Lake, where

#: A change's place within its timestamp (docs/design.md §1: deletions, registrations, updates).
ORDER = {"delete": 0, "insert": 1, "update": 2}
#: The order of a bare timestamp id: after every change of that timestamp.
WHOLE = 3

Position = tuple[int, int, int]


def parse_id(text: str | None) -> Position | None:
    """The stream position of an event id (module doc); None when it is not one."""
    if text is None:
        return None
    parts = text.strip().split(":")
    try:
        if len(parts) == 1:
            return int(parts[0]), WHOLE, 0
        if len(parts) == 3 and 0 <= int(parts[1]) < WHOLE:
            return int(parts[0]), int(parts[1]), int(parts[2])
    except ValueError:
        return None
    return None


def format_id(position: Position) -> str:
    """The event id of a stream position."""
    t, order, sub = position
    return str(t) if order == WHOLE else f"{t}:{order}:{sub}"


def frame(event: str, data: Any, event_id: str | None = None) -> bytes:
    """One SSE event: ``id``, ``event`` and a one-line JSON ``data``."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


HEARTBEAT = b": keep-alive\n\n"


@dataclass(frozen=True, slots=True)
class ChangeEvent:
    """One result change and its SSE frame (encoded once, shared by every stream)."""

    position: Position
    sub_id: int
    change: str
    frame: bytes

    @property
    def t(self) -> int:
        """Its timestamp."""
        return self.position[0]


def change_events(rows: list[dict[str, Any]]) -> list[ChangeEvent]:
    """Journal change records (``t, sub_id, change, object_ids, d2``) as events in stream order."""
    out = []
    for r in rows:
        order = ORDER[r["change"]]
        position = (int(r["t"]), order, int(r["sub_id"]))
        data = {"t": position[0], "sub_id": position[2], "change": r["change"],
                "object_ids": [int(o) for o in r["object_ids"] or ()],
                "distances": [math.sqrt(d) for d in r["d2"] or ()]}
        out.append(ChangeEvent(position, position[2], r["change"], frame("change", data, format_id(position))))
    out.sort(key=lambda e: e.position)
    return out


class Stream:
    """One client's event stream: what it may see, and its frames not written yet (bounded)."""

    __slots__ = ("principal", "admin", "subs", "owned", "frames", "buffered", "wake", "closed", "task")

    def __init__(self, principal: str, *, admin: bool, subs: frozenset[int] | None) -> None:
        self.principal = principal
        self.admin = admin
        self.subs = subs  # None: every subscription the principal owns (admin: every one)
        self.owned = not admin  # whether a change must belong to the principal
        self.frames: deque[bytes] = deque()
        self.buffered = 0
        self.wake = asyncio.Event()
        self.closed: str | None = None
        self.task: asyncio.Task[Any] | None = None

    def close(self, reason: str) -> None:
        """End the stream (``client``, ``overflow``, ``stopping``); wakes its writer."""
        if self.closed is None:
            self.closed = reason
            self.wake.set()

    def take(self, limit: int = 65536) -> bytes:
        """Up to about ``limit`` bytes of buffered frames, joined."""
        parts, size = [], 0
        while self.frames and size < limit:
            part = self.frames.popleft()
            parts.append(part)
            size += len(part)
        self.buffered -= size
        return b"".join(parts)


class Hub:
    """The journal's tailer and the streams' fan-out (module doc)."""

    def __init__(self, lake: Lake, registry: Registry, *, poll: float = 0.25, ring: int = 100_000,
                 max_buffer: int = 1 << 20, metrics: Any = None) -> None:
        self.lake = lake
        self.registry = registry
        self.poll = poll
        self.ring_size = ring
        self.max_buffer = max_buffer
        self.metrics = metrics
        self.position: int | None = None  # every change through this timestamp has been fanned out
        self.version = -1  # the journal version read
        self.ring: deque[ChangeEvent] = deque()
        self.ring_floor: int | None = None  # the ring holds every change after this timestamp
        self.horizon: int | None = None
        self._horizon_at = 0.0
        self._horizon_task: asyncio.Task[None] | None = None
        self.streams: set[Stream] = set()
        self._by_sub: dict[int, set[Stream]] = {}
        self._by_owner: dict[str, set[Stream]] = {}
        self._everything: set[Stream] = set()
        # One thread for the tailer's reads, so its delta-rs tables stay open (one copy per thread).
        self._reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dkm-serve-tail")
        self._task: asyncio.Task[None] | None = None
        self.last_commit_seen: float | None = None
        self.ready = asyncio.Event()

    # ------------------------------------------------------------------ the tailer
    async def _in_reader(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._reader, fn, *args)

    def start(self) -> None:
        """Start tailing (in the running loop)."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="dkm-serve-tailer")

    async def stop(self) -> None:
        """Stop tailing and end every stream."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.end_streams()
        self._reader.shutdown(wait=False, cancel_futures=True)

    def end_streams(self) -> None:
        """End every stream (the service is stopping); each writes its last frames and closes."""
        for stream in list(self.streams):
            stream.close("stopping")

    async def _run(self) -> None:
        while True:
            try:
                if self.position is None:
                    await self._start_position()
                else:
                    await self.poll_once()
            except asyncio.CancelledError:
                raise
            except Exception as err:  # a failed read is retried at the next poll
                if self.metrics is not None:
                    self.metrics.tail_error(err)
            await asyncio.sleep(self.poll)

    async def _start_position(self) -> None:
        start = await self._in_reader(self._observe_until_now)
        if start is None:
            return  # nothing processed yet: no stream can be served
        await self.refresh_horizon()
        self.position, self.version = start
        self.ring_floor = self.position
        self.ready.set()

    def _observe_until_now(self) -> tuple[int, int] | None:
        """Where the tailer starts: the last processed timestamp and the journal version; the
        registrations committed while no service watched are observed first (registry doc)."""
        version = self.lake.version(tables.JOURNAL)
        last = last_processed(self.lake, version)
        if last is None:
            return None
        since = self.registry.observed_through()
        claimed = self.registry.claimed_ids()
        if claimed and since is not None and since < last:
            rows = self.lake.read(tables.JOURNAL, columns=["t", "sub_id"], version=version,
                                  predicate=where(record__eq="change", change__eq="insert", t__gt=since, t__le=last),
                                  sub_ids=claimed)
            self.registry.observe_registrations(list(zip(rows.column("sub_id").to_pylist(),
                                                         rows.column("t").to_pylist(), strict=True)))
        self.registry.set_observed_through(last)
        return last, version

    async def poll_once(self) -> int:
        """Fan out what the journal committed since the last look; how many changes."""
        assert self.position is not None
        committed = await self._in_reader(self.lake.committed_after, tables.JOURNAL, self.version)
        if time.monotonic() - self._horizon_at > 60 and self._horizon_task is None:
            # Apart from the tailer's thread: it opens old knn_state versions, which takes a while.
            self._horizon_task = asyncio.get_running_loop().create_task(self.refresh_horizon())
        if not committed:
            return 0
        self.last_commit_seen = time.time()
        found = await self._in_reader(self._read_new, self.position)
        if found is None:
            return 0
        version, newest, events = found
        # From here to the end of the fan-out nothing awaits: a stream attached meanwhile reads
        # its past up to `position`, and gets everything after it from this fan-out.
        self.version = version
        if newest is None:
            return 0
        self._observe(events, newest)
        self._fan_out(events, newest)
        return len(events)

    def _read_new(self, after: int) -> tuple[int, int | None, list[ChangeEvent]] | None:
        """The journal's version, its newest processed timestamp after ``after`` and the
        changes up to it (None when the journal did not move)."""
        version = self.lake.version(tables.JOURNAL)
        if version == self.version:
            return None
        ledger = self.lake.read(tables.JOURNAL, columns=["t"], version=version,
                                predicate=where(record__eq="ledger", t__gt=after)).column("t")
        if len(ledger) == 0:
            return version, None, []
        newest = int(pc.max(ledger).as_py())
        rows = self.lake.read(tables.JOURNAL, columns=["t", "sub_id", "change", "object_ids", "d2"], version=version,
                              predicate=where(record__eq="change", t__gt=after, t__le=newest))
        return version, newest, change_events(rows.to_pylist())

    def _observe(self, events: list[ChangeEvent], newest: int) -> None:
        registrations = [(e.sub_id, e.t) for e in events if e.change == "insert" and self.registry.claimed(e.sub_id)]
        if registrations:
            self.registry.observe_registrations(registrations)
        self.registry.set_observed_through(newest)

    def owner(self, event: ChangeEvent) -> str | None:
        """Who the change belongs to (:meth:`Registry.owner_at`)."""
        return self.registry.owner_at(event.sub_id, event.t, deletion=event.change == "delete")

    def visible(self, stream: Stream, event: ChangeEvent) -> bool:
        """Whether ``stream`` may see ``event``."""
        if stream.subs is not None and event.sub_id not in stream.subs:
            return False
        return not stream.owned or self.owner(event) == stream.principal

    def _fan_out(self, events: list[ChangeEvent], newest: int) -> None:
        """Hand each stream, in one chunk, the frames of this commit it may see and the
        ``processed`` frame that closes it. A stream still holding more than ``max_buffer``
        bytes of earlier commits has not kept up and is dropped first; a commit's own frames
        always go in whole, however large (a catch-up round), so a client that reads keeps up."""
        started = time.perf_counter()
        for stream in list(self.streams):
            if stream.buffered > self.max_buffer:
                self._drop(stream, "overflow")
        closing = frame("processed", {"t": newest}, str(newest))
        mine: dict[Stream, list[bytes]] = {}
        if self._by_sub or self._by_owner:
            for event in events:
                targets = self._by_sub.get(event.sub_id)
                owner = self.owner(event) if self._by_owner or targets else None
                if targets:
                    for stream in targets:
                        if not stream.owned or owner == stream.principal:
                            mine.setdefault(stream, []).append(event.frame)
                if owner is not None and self._by_owner:
                    for stream in self._by_owner.get(owner, ()):
                        mine.setdefault(stream, []).append(event.frame)
        # One chunk for every unfiltered stream: made once, each holds a reference to it.
        everything = b"".join([*(e.frame for e in events), closing]) if self._everything else b""
        delivered = 0
        for stream in list(self.streams):
            if stream in self._everything:
                self._push(stream, everything)
                delivered += len(events)
            else:
                frames = mine.get(stream, [])
                self._push(stream, b"".join([*frames, closing]))
                delivered += len(frames)
        self.ring.extend(events)
        self.position = newest
        while len(self.ring) > self.ring_size:
            self.ring_floor = self.ring.popleft().t
        if self.metrics is not None:
            self.metrics.fanned_out(len(events), delivered, time.perf_counter() - started)

    def _push(self, stream: Stream, data: bytes) -> None:
        if stream.closed is None:
            stream.frames.append(data)
            stream.buffered += len(data)
            stream.wake.set()

    def _drop(self, stream: Stream, reason: str) -> None:
        """Cut a stream off: it leaves the hub and its writer is cancelled."""
        self.detach(stream)
        stream.close(reason)
        if stream.task is not None:
            stream.task.cancel()
        if self.metrics is not None:
            self.metrics.stream_dropped(reason)

    async def refresh_horizon(self) -> None:
        """Re-read the as-of horizon (the oldest timestamp whose results can be rebuilt)."""
        self._horizon_at = time.monotonic()
        try:
            self.horizon = await asyncio.to_thread(self._read_horizon)
        finally:
            self._horizon_task = None

    def _read_horizon(self) -> int | None:
        from dkmsks.storage.export import oldest_available, state_checkpoints

        return oldest_available(self.lake, state_checkpoints(self.lake))

    # ------------------------------------------------------------------ streams
    def attach(self, stream: Stream, after: Position | None) -> tuple[str, Position | None, int]:
        """Register ``stream`` and say how it begins: ``("live", None, T)`` (nothing to replay),
        ``("replay", after, T)`` (the changes in ``(after, T]`` first) or ``("reset", None, T)``
        (the results at ``T`` first), ``T`` the hub's position. Synchronous, so nothing is
        fanned out between the look at the position and the registration (module doc)."""
        assert self.position is not None
        now = self.position
        self.streams.add(stream)
        if stream.subs is not None:
            for sid in stream.subs:
                self._by_sub.setdefault(sid, set()).add(stream)
        elif stream.admin:
            self._everything.add(stream)
        else:
            self._by_owner.setdefault(stream.principal, set()).add(stream)
        if after is None:
            return "live", None, now
        if after[0] > now or (self.horizon is not None and after[0] < self.horizon):
            return "reset", None, now
        return "replay", after, now

    def detach(self, stream: Stream) -> None:
        """Forget ``stream`` (idempotent)."""
        self.streams.discard(stream)
        self._everything.discard(stream)
        if stream.subs is not None:
            for sid in stream.subs:
                group = self._by_sub.get(sid)
                if group is not None:
                    group.discard(stream)
                    if not group:
                        del self._by_sub[sid]
        else:
            group = self._by_owner.get(stream.principal)
            if group is not None:
                group.discard(stream)
                if not group:
                    del self._by_owner[stream.principal]

    def ring_covers(self, after: Position) -> bool:
        """Whether the ring holds every change after ``after``."""
        floor = self.ring_floor
        return floor is not None and (floor < after[0] or (floor == after[0] and after[1] == WHOLE))

    async def past(self, stream: Stream, after: Position, through: int) -> list[bytes]:
        """The frames ``stream`` may see after ``after`` up to timestamp ``through``, from the
        ring when it reaches back far enough, else from one journal read."""
        if self.ring_covers(after):
            events: Iterable[ChangeEvent] = [e for e in self.ring if after < e.position and e.t <= through]
        else:
            if self.metrics is not None:
                self.metrics.journal_replay()
            events = await asyncio.to_thread(self._read_past, stream.subs, after, through)
        frames = [e.frame for e in events if self.visible(stream, e)]
        if through > after[0] or after[1] != WHOLE:
            frames.append(frame("processed", {"t": through}, str(through)))
        return frames

    def _read_past(self, subs: frozenset[int] | None, after: Position, through: int) -> list[ChangeEvent]:
        rows = self.lake.read(tables.JOURNAL, columns=["t", "sub_id", "change", "object_ids", "d2"],
                              predicate=where(record__eq="change", t__ge=after[0], t__le=through),
                              sub_ids=None if subs is None else sorted(subs))
        return [e for e in change_events(rows.to_pylist()) if after < e.position]

    async def reset(self, stream: Stream, at: int, reason: str) -> bytes:
        """The ``reset`` frame of ``stream`` at timestamp ``at``: the current results of its
        subscriptions (none listed for an unfiltered admin stream)."""
        results = None
        if stream.subs is not None or stream.owned:
            results = await asyncio.to_thread(self._results_of, stream, at)
        if self.metrics is not None:
            self.metrics.stream_reset()
        return frame("reset", {"t": at, "reason": reason, "results": results}, str(at))

    def _results_of(self, stream: Stream, at: int) -> list[dict[str, Any]]:
        from dkmsks.storage.export import results_as_of

        if stream.subs is not None:
            wanted = sorted(stream.subs)
        else:
            wanted = sorted({sid for sid, _ in self.registry.owned_by(stream.principal)})
        if not wanted:
            return []
        t, found = results_as_of(self.lake, at, sub_ids=wanted)
        out = []
        for sid in wanted:
            r = found.get(sid)
            if r is None:
                continue
            if stream.owned and self.registry.owner_at(sid, t) != stream.principal:
                continue
            out.append({"sub_id": sid, "object_ids": [int(o) for o in r.object_ids],
                        "distances": [float(d) for d in r.distances]})
        return out
