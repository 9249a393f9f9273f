"""A round channel through the object store, for bench/channels.py to measure against the spool
and Arrow Flight (docs/design.md §10, "The round channel"): not used by follow mode.

The driver writes each task's round as an object (``<prefix>/round-N.tT``); a task looks for its
object every ``poll`` seconds (a GET that finds nothing, then one that finds it), writes each
worker's records as an object (``<prefix>/round-N.wW``), and the driver looks for those every
``poll`` seconds. It needs nothing but the store every host already reaches; what it costs is
requests and their latency, and a poll in each direction.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from dkmsks.jobs.follow.channel import Round, RoundOutput
from dkmsks.jobs.follow.wire import decode_records, decode_round, encode_records, encode_round
from dkmsks.storage.objectstore import ObjectStore
from dkmsks.warehouse import ObjectLocation


class ObjectStoreChannel:
    """Rounds and records as objects under ``uri`` (``s3://bucket/prefix``); see the module doc."""

    def __init__(self, uri: str, *, poll: float) -> None:
        self.location = ObjectLocation.parse(uri)
        self.poll = poll

    def _store(self) -> ObjectStore:
        return ObjectStore.of(ObjectLocation(self.location.bucket))

    def _key(self, name: str) -> str:
        return f"{self.location.prefix}/{name}" if self.location.prefix else name

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__)

    # ------------------------------------------------------------------ the driver's side
    def open(self) -> None:
        """Nothing to prepare: the prefix is the session's own."""

    def put_round(self, n: int, rounds: Round | Sequence[Round], tasks: int = 1) -> list[int]:
        """Write each task's round object (the same bytes to each for a shared round)."""
        per_task = [rounds] * tasks if isinstance(rounds, Round) else list(rounds)
        sizes = []
        for task, round_ in enumerate(per_task):
            data = encode_round(round_)
            self._store().put(self._key(f"round-{n:06d}.t{task:04d}"), data)
            sizes.append(len(data))
        return sizes

    def collect(self, n: int, *, workers: int, tasks: int, alive: Callable[[], None]) -> RoundOutput:
        """Look for every worker's records object until all are there."""
        del tasks
        out = RoundOutput()
        pending = list(range(workers))
        while pending:
            for w in list(pending):
                found = self._store().get(self._key(f"round-{n:06d}.w{w:04d}"))
                if found is not None:
                    out.records.append(decode_records(found[0]))
                    pending.remove(w)
            if pending:
                alive()
                time.sleep(self.poll)
        return out

    def stop(self, tasks: int = 1) -> None:
        """Leave a stop object for the tasks."""
        self._store().put(self._key("stop"), b"")

    def close(self) -> None:
        """The objects stay for the bucket's lifecycle rule (a benchmark's prefix)."""

    # ------------------------------------------------------------------ a worker task's side
    def say_ready(self, worker: int) -> None:
        """Leave ``ready.wW``."""
        self._store().put(self._key(f"ready.w{worker:04d}"), b"")

    def get_round(self, n: int, task: int) -> Round | None:
        """Look for the task's round object every ``poll`` seconds; None once the stop object is there."""
        while True:
            found = self._store().get(self._key(f"round-{n:06d}.t{task:04d}"))
            if found is not None:
                return decode_round(found[0])
            if self._store().head(self._key("stop")) is not None:
                return None
            time.sleep(self.poll)

    def put_records(self, n: int, worker: int, records: pa.Table) -> None:
        """Write ``worker``'s records of round ``n``."""
        self._store().put(self._key(f"round-{n:06d}.w{worker:04d}"), encode_records(records))
