"""The service's own state: who owns which subscription, and the answers of idempotent requests.

Both live in one SQLite file beside the tokens (``<root>/run/service-<database>.sqlite3``, mode
600), not in a Delta table of the warehouse. They are facts about the service's principals, whose
names only the tokens file defines, so they belong to the same host and trust domain as that
file; they change one row at a time on the request path (a subscribe claims one id), where a
Delta commit per claim would add a log entry, a checkpoint every hundred and a read of the log per
look-up; and no Spark job or reader of the pipeline ever needs them. SQLite gives what they do
need: a durable, atomic write per claim (WAL, one fsync), indexed look-ups, and one writer
process enforced by its own locking. (Several service hosts over one object-store warehouse would
need them shared; then this module's two tables move to Delta tables on the store, behind the same
methods.)

**Ownership.** A subscription is an id *and* the timestamp it was registered at: an id deleted
can be registered again, by another principal or from a file. A claim ``(sub_id, since_t,
principal)`` says that the registration of ``sub_id`` at ``since_t`` belongs to ``principal``;
``principal`` None marks a registration the service did not make (a file's, another client's),
which belongs to nobody (only ``admin`` sees it). The owner of a result change at ``t`` is the
claim with the newest ``since_t <= t`` (``< t`` for a deletion: within a timestamp deletions come
before registrations, docs/design.md §1). The service writes its claim right after the landing
append succeeded (a crash in between leaves a subscription that belongs to nobody: closed, not
open), and the journal tailer writes the nobody-claims of every registration it sees without a
claim (:meth:`Registry.observe_registrations`).

**Idempotency keys.** ``POST /v1/objects`` with an ``Idempotency-Key`` stores the answer under
``(principal, key)`` with the SHA-256 of the body; a retry with the same body gets that answer,
one with another body is refused. Kept :data:`IDEMPOTENCY_TTL` seconds.
"""

from __future__ import annotations

import bisect
import json
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: How long an idempotency key's answer is kept (seconds): a day, as common payment APIs keep theirs.
IDEMPOTENCY_TTL = 24 * 3600

_SCHEMA = """
CREATE TABLE IF NOT EXISTS claims (
  sub_id INTEGER NOT NULL, since_t INTEGER NOT NULL, principal TEXT,
  PRIMARY KEY (sub_id, since_t));
CREATE TABLE IF NOT EXISTS idempotency (
  principal TEXT NOT NULL, key TEXT NOT NULL, body_sha256 TEXT NOT NULL, status INTEGER NOT NULL,
  response TEXT NOT NULL, created REAL NOT NULL, PRIMARY KEY (principal, key));
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""


def registry_path(run_dir: Path, database: str) -> Path:
    """The registry file of ``database`` in a warehouse's local home."""
    return run_dir / f"service-{database}.sqlite3"


@dataclass(frozen=True)
class Stored:
    """An idempotent request's first answer."""

    body_sha256: str
    status: int
    response: dict[str, Any]


class Registry:
    """Claims and idempotency keys (module doc), with every claim also held in memory: the
    event streams ask for the owner of each change they fan out."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        os.chmod(path, 0o600)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)
        self._lock = threading.RLock()
        # sub_id -> (since_t list ascending, principal list): the claims, for owner look-ups.
        self._claims: dict[int, tuple[list[int], list[str | None]]] = {}
        for sub_id, since_t, principal in self._db.execute("SELECT sub_id, since_t, principal FROM claims "
                                                           "ORDER BY sub_id, since_t"):
            times, owners = self._claims.setdefault(int(sub_id), ([], []))
            times.append(int(since_t))
            owners.append(principal)
        self.prune_idempotency()

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()

    # ------------------------------------------------------------------ ownership
    def claim(self, sub_id: int, since_t: int, principal: str | None) -> None:
        """Record that the registration of ``sub_id`` at ``since_t`` belongs to ``principal``."""
        self.claim_many([(sub_id, since_t, principal)])

    def claim_many(self, claims: list[tuple[int, int, str | None]]) -> None:
        """:meth:`claim` each ``(sub_id, since_t, principal)``, in one transaction (one fsync:
        a group of subscribes is claimed at once, :mod:`~dkmsks.service.publisher`)."""
        if not claims:
            return
        with self._lock:
            with self._db:  # BEGIN ... COMMIT
                self._db.execute("BEGIN")
                self._db.executemany("INSERT OR REPLACE INTO claims VALUES (?, ?, ?)",
                                     [(int(s), int(t), p) for s, t, p in claims])
            for sub_id, since_t, principal in claims:
                times, owners = self._claims.setdefault(int(sub_id), ([], []))
                at = bisect.bisect_left(times, int(since_t))
                if at < len(times) and times[at] == int(since_t):
                    owners[at] = principal
                else:
                    times.insert(at, int(since_t))
                    owners.insert(at, principal)

    def claimed(self, sub_id: int) -> bool:
        """Whether the service ever claimed ``sub_id``."""
        return int(sub_id) in self._claims

    def claimed_ids(self) -> list[int]:
        """Every id with a claim."""
        with self._lock:
            return list(self._claims)

    def owner_at(self, sub_id: int, t: int, *, deletion: bool = False) -> str | None:
        """The owner of a change of ``sub_id`` at ``t`` (module doc); None: nobody's."""
        entry = self._claims.get(int(sub_id))
        if entry is None:
            return None
        times, owners = entry
        at = (bisect.bisect_left(times, int(t)) if deletion else bisect.bisect_right(times, int(t))) - 1
        return owners[at] if at >= 0 else None

    def owner_of_registration(self, sub_id: int, registered_t: int) -> str | None:
        """The owner of the registration of ``sub_id`` at ``registered_t`` (exactly that one)."""
        entry = self._claims.get(int(sub_id))
        if entry is None:
            return None
        times, owners = entry
        at = bisect.bisect_left(times, int(registered_t))
        return owners[at] if at < len(times) and times[at] == int(registered_t) else None

    def principals_of(self, sub_id: int) -> set[str | None]:
        """Every principal a registration of ``sub_id`` ever belonged to (None: nobody)."""
        entry = self._claims.get(int(sub_id))
        return set() if entry is None else set(entry[1])

    def owned_by(self, principal: str) -> list[tuple[int, int]]:
        """``(sub_id, since_t)`` of every registration claimed for ``principal``."""
        with self._lock:
            return [(sid, t) for sid, (times, owners) in self._claims.items()
                    for t, owner in zip(times, owners, strict=True) if owner == principal]

    def observe_registrations(self, registrations: list[tuple[int, int]]) -> int:
        """Registrations ``(sub_id, t)`` the journal committed: those of a claimed id without a
        claim at ``t`` were not made here, and get a nobody-claim; how many did."""
        made = 0
        for sub_id, t in registrations:
            entry = self._claims.get(int(sub_id))
            if entry is not None and int(t) not in entry[0]:
                self.claim(sub_id, t, None)
                made += 1
        return made

    def observed_through(self) -> int | None:
        """The last timestamp whose registrations :meth:`observe_registrations` has seen."""
        row = self._db.execute("SELECT value FROM meta WHERE name = 'observed_through'").fetchone()
        return None if row is None else int(row[0])

    def set_observed_through(self, t: int) -> None:
        """Record that the registrations up to ``t`` were observed."""
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO meta VALUES ('observed_through', ?)", (int(t),))

    # ------------------------------------------------------------------ idempotency keys
    def stored(self, principal: str, key: str) -> Stored | None:
        """The first answer to ``principal``'s request with idempotency ``key``, if kept."""
        row = self._db.execute("SELECT body_sha256, status, response, created FROM idempotency "
                               "WHERE principal = ? AND key = ?", (principal, key)).fetchone()
        if row is None or time.time() - float(row[3]) > IDEMPOTENCY_TTL:
            return None
        return Stored(str(row[0]), int(row[1]), json.loads(row[2]))

    def store(self, principal: str, key: str, body_sha256: str, status: int, response: dict[str, Any]) -> None:
        """Keep the answer of ``principal``'s request with idempotency ``key``."""
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO idempotency VALUES (?, ?, ?, ?, ?, ?)",
                             (principal, key, body_sha256, int(status), json.dumps(response), time.time()))

    def prune_idempotency(self) -> None:
        """Forget answers older than :data:`IDEMPOTENCY_TTL`."""
        with self._lock:
            self._db.execute("DELETE FROM idempotency WHERE created < ?", (time.time() - IDEMPOTENCY_TTL,))
