"""Locks that span hosts: leases on objects of the warehouse's object store, with fencing.

On a local warehouse the writer and landing locks are ``flock``s (:mod:`.writer_lock`): the
kernel frees one when its holder dies, and a stopped holder keeps it. Neither holds across
hosts. On object storage a lock is one small JSON object whose every change is a
compare-and-swap on its ETag (``If-None-Match: *`` to create, ``If-Match`` to change):

- *take*: create the object (epoch 1), or replace it — when it says ``free`` (given back: the
  same *epoch*), or when its ETag has not changed for a whole lease (``DKMSKS_LEASE_SECONDS``,
  default 15 s) as this waiter's own monotonic clock measures it, so its holder stopped
  renewing (a *takeover*: the next epoch). No clock is compared across hosts.
- *keep*: a thread renews it every third of the lease (a new body, same epoch, If-Match on
  the last ETag). A renewal that finds the object changed means the lease was lost.
- *give back*: replace it by a ``free`` body (If-Match), so the next waiter takes it at once.

A holder killed with ``kill -9`` therefore frees the lock within one lease. A holder stopped
(``SIGSTOP``) past its lease and woken again may still believe it holds the lock, so the lock
alone cannot keep it from writing. The writer lock's epoch is therefore also a *fence*
checked by the commit itself (:class:`Fence`): a takeover commits the new epoch to the
journal as a Delta application transaction (``dkmsks-writer-fence``, an empty commit marked
:data:`FENCE_MARK`), and every journal commit of a holder carries its epoch in the same
transaction id, made on a snapshot whose fence is its own. A stale holder either sees a newer
epoch in that snapshot, or loses the commit race to the new holder's fence commit (delta-rs
refuses a commit when a concurrent one carries the same transaction id): either way its commit
fails with :class:`Fenced` and nothing of it lands (docs/design.md §8, "Writers on object
storage"). A lease given back is taken under the same epoch, with no fence commit: its last
holder knows it no longer holds it, and a scheduled job that takes the lock and finds nothing
to do leaves the journal alone (follow mode, which restarts when another job commits the
journal, would otherwise restart after it).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from dkmsks.storage.objectstore import ObjectStore

#: How long a lease lasts without renewal (``DKMSKS_LEASE_SECONDS``): a killed holder's lock is
#: free this long after its last renewal.
LEASE_SECONDS = float(os.environ.get("DKMSKS_LEASE_SECONDS", "15"))
#: The landing lock is held for milliseconds; a dead publisher should block landing briefly.
LANDING_LEASE_SECONDS = float(os.environ.get("DKMSKS_LANDING_LEASE_SECONDS", "10"))
#: The Delta application transaction id whose version is the writer lock's epoch.
FENCE_APP = "dkmsks-writer-fence"
#: The commit info of a fence commit (its only content): how a reader tells it from a round's.
FENCE_MARK = {"dkmsks": "writer-fence"}


class LeaseLost(RuntimeError):
    """This process no longer holds a lease it took (it was taken over after expiring)."""


class Fenced(LeaseLost):
    """A commit was refused because a newer holder of the writer lock exists."""


@dataclass(frozen=True)
class Fence:
    """The epoch a commit of this process must carry on table ``uri`` (its journal)."""

    uri: str
    epoch: int


#: The fence of each journal this process holds the writer lock of (by the journal's URI).
_fences: dict[str, Fence] = {}
_fences_guard = threading.Lock()


def fence_of(uri: str) -> Fence | None:
    """The fence commits to table ``uri`` must carry, if this process holds its writer lease."""
    with _fences_guard:
        return _fences.get(uri)


def set_fence(fence: Fence | None, uri: str) -> None:
    """Record (or, with None, forget) the fence of table ``uri``."""
    with _fences_guard:
        if fence is None:
            _fences.pop(uri, None)
        else:
            _fences[uri] = fence


#: This process, in every body it writes. A lease that says it is held by this process while
#: the process does not hold it (its give-back failed: the store did not answer in time) is
#: taken back at once under the same epoch, instead of after a whole lease as a takeover (the
#: locks are re-entrant per process, so no other thread of it can be holding it).
_PROCESS = uuid.uuid4().hex


def _body(who: str, epoch: int, state: str) -> bytes:
    # The nonce makes every body distinct, so every write gets a new ETag (an ETag is a digest
    # of the content: two equal bodies would let a stale If-Match pass).
    return json.dumps({"holder": who, "host": socket.gethostname(), "pid": os.getpid(), "epoch": epoch,
                       "state": state, "process": _PROCESS, "nonce": uuid.uuid4().hex,
                       "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}).encode()


def _parse(data: bytes) -> dict[str, object]:
    try:
        body = json.loads(data)
    except ValueError:
        body = None
    if not isinstance(body, dict) or not isinstance(body.get("epoch"), int):
        # Not ours, or corrupt: treated as a holder that never renews (taken after a lease).
        return {"holder": "unreadable lock object", "epoch": 0, "state": "held"}
    return body


def describe(body: dict[str, object]) -> str:
    """Who holds a lock, for a waiter's message."""
    return f"{body.get('holder')} on {body.get('host')} pid {body.get('pid')} since {body.get('since')}"


class Lease:
    """One lease on ``key`` of ``store`` (module doc); :meth:`acquire`, then :meth:`release`."""

    def __init__(self, store: ObjectStore, key: str, who: str, *, lease_seconds: float = LEASE_SECONDS,
                 poll: float = 0.2) -> None:
        self.store, self.key, self.who = store, key, who
        self.lease_seconds, self.poll = lease_seconds, poll
        self.epoch = 0
        self._etag: str | None = None
        self._renewed = 0.0  # monotonic time of the last write that proved we hold it
        self._lost = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._guard = threading.Lock()

    # ------------------------------------------------------------------ take
    def acquire(self, timeout: float, on_wait: Callable[[str], None] | None = None) -> int:
        """Take the lease, waiting up to ``timeout`` seconds; its epoch. TimeoutError (with
        the holder's description) when it stays taken."""
        deadline = time.monotonic() + timeout
        seen: tuple[str, float] | None = None  # (ETag, when first seen) of a held body
        while True:
            started = time.monotonic()
            got = self.store.get(self.key)
            if got is None:
                etag = self.store.create(self.key, _body(self.who, 1, "held"))
                if etag is not None:
                    return self._taken(1, etag, started)
            else:
                data, etag = got
                body = _parse(data)
                given_back = body.get("state") == "free" or body.get("process") == _PROCESS
                # Given back: its holder knows it holds it no more, so the fence stays; taken
                # over: its holder may still think it holds it, so the epoch moves on.
                epoch = int(body["epoch"]) + (0 if given_back else 1)  # type: ignore[call-overload]
                if seen is None or seen[0] != etag:
                    seen = (etag, started)
                expired = started - seen[1] >= self.lease_seconds
                if given_back or expired:
                    new = self.store.replace(self.key, _body(self.who, epoch, "held"), etag)
                    if new is not None:
                        return self._taken(epoch, new, started)
                elif on_wait is not None:
                    on_wait(describe(body))
                    on_wait = None
                if time.monotonic() >= deadline:
                    raise TimeoutError(describe(body))
            time.sleep(self.poll)

    def _taken(self, epoch: int, etag: str, at: float) -> int:
        self.epoch, self._etag, self._renewed, self._lost = epoch, etag, at, False
        self._stop.clear()
        self._thread = threading.Thread(target=self._keep, name=f"dkmsks-lease-{self.key}", daemon=True)
        self._thread.start()
        return epoch

    # ------------------------------------------------------------------ keep
    def _keep(self) -> None:
        while not self._stop.wait(self.lease_seconds / 3):
            try:
                self.renew()
            except LeaseLost:
                return
            except Exception:  # noqa: BLE001 - a failed request: the next tick tries again
                continue

    def renew(self) -> None:
        """Prove the lease is still ours by writing it again (If-Match); LeaseLost if not."""
        with self._guard:
            if self._lost or self._etag is None:
                raise LeaseLost(f"{self.who}: the lease on {self.key} is not held")
            started = time.monotonic()
            etag = self.store.replace(self.key, _body(self.who, self.epoch, "held"), self._etag)
            if etag is None:
                self._lost = True
                raise LeaseLost(f"{self.who}: the lease on {self.key} was taken over "
                                f"(held more than {self.lease_seconds:.0f} s without renewal)")
            self._etag, self._renewed = etag, started

    def check(self, margin: float | None = None) -> None:
        """Make sure at least ``margin`` seconds (default half a lease) of the lease are left,
        renewing it first unless the last proof that it is ours is that recent: called right
        before a write that must not happen without the lock. (A publisher's appends come
        milliseconds after it took the landing lease: no request for them.)"""
        need = self.lease_seconds / 2 if margin is None else margin
        if self._lost or self._etag is None or self.lease_seconds - (time.monotonic() - self._renewed) < need:
            self.renew()
        left = self.lease_seconds - (time.monotonic() - self._renewed)
        if left < need:
            raise LeaseLost(f"{self.who}: the renewal of {self.key} took too long ({self.lease_seconds - left:.1f} s)")

    # ------------------------------------------------------------------ give back
    def release(self) -> None:
        """Give the lease back (If-Match: a lease already lost is left to its new holder)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.lease_seconds)
            self._thread = None
        with self._guard:
            if self._etag is not None and not self._lost:
                # Unreachable now: the lease runs out by itself.
                with contextlib.suppress(Exception):
                    self.store.replace(self.key, _body(self.who, self.epoch, "free"), self._etag)
            self._etag = None
