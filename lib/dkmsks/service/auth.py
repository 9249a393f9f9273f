"""Who may do what: bearer tokens with scopes, and a rate limit per token.

A token is ``dkm_<id>_<secret>``: an 8-hex-digit id that names it (``dkm token list``,
``revoke``) and 32 random bytes (``secrets.token_urlsafe``). ``dkm token create`` prints it
once; the tokens file keeps only its SHA-256, so a copy of the file grants nothing. A
request's token is found by its id and its digest compared in constant time
(:func:`hmac.compare_digest`); a malformed or unknown token costs the same as a wrong one.

Each token carries a *name*, the principal it speaks for (several tokens may share one, which
is how a token is rotated: create the new one, revoke the old), and scopes:

- ``publish``: ``POST /v1/objects``;
- ``subscribe``: make, read, delete and watch its own subscriptions;
- ``admin``: everything, every subscription (also those landed from files, which belong to
  nobody), status and metrics.

The file (JSON, mode 600, written whole and renamed into place) lives in the warehouse's local
home (``<root>/run/tokens.json``, :attr:`dkmsks.warehouse.Warehouse.run_dir`) unless
``--tokens`` names another. The service re-reads it when it changes, so a revoked token stops
working at its next request, without a restart.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import hmac
import json
import math
import os
import re
import secrets
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

#: The name of the tokens file in a warehouse's local home (``<root>/run``).
TOKENS_FILE = "tokens.json"
_FORMAT = 1
_TOKEN = re.compile(r"^dkm_([0-9a-f]{8})_([A-Za-z0-9_-]{43})$")
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.@-]{0,63}$")


class Scope(enum.StrEnum):
    """What a token may do (module doc)."""

    PUBLISH = "publish"
    SUBSCRIBE = "subscribe"
    ADMIN = "admin"

    @classmethod
    def parse(cls, text: str) -> Scope:
        """A scope by name; a ValueError lists the valid ones."""
        try:
            return cls(text.strip().lower())
        except ValueError:
            raise ValueError(f"unknown scope {text!r}; the scopes are "
                             f"{', '.join(s.value for s in cls)}") from None


@dataclass(frozen=True)
class Principal:
    """Who a request speaks for: the token's name, id and scopes."""

    name: str
    token_id: str
    scopes: frozenset[Scope]

    @property
    def is_admin(self) -> bool:
        """Whether it sees and manages everything."""
        return Scope.ADMIN in self.scopes

    def can(self, scope: Scope) -> bool:
        """Whether the principal holds ``scope`` (``admin`` holds every scope)."""
        return self.is_admin or scope in self.scopes


@dataclass(frozen=True)
class TokenRecord:
    """One token as the file keeps it: never the token itself, only its SHA-256."""

    id: str
    name: str
    scopes: tuple[Scope, ...]
    sha256: str
    created: str

    def as_json(self) -> dict[str, Any]:
        """The record as stored."""
        return {"id": self.id, "name": self.name, "scopes": [s.value for s in self.scopes], "sha256": self.sha256,
                "created": self.created}


def tokens_path(run_dir: Path, tokens: str | Path | None = None) -> Path:
    """The tokens file: ``tokens`` when given, else ``<run_dir>/tokens.json``."""
    return Path(tokens).expanduser().resolve() if tokens else run_dir / TOKENS_FILE


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def check_name(name: str) -> str:
    """A principal's name, checked: lower-case letters, digits and ``_.@-``, at most 64."""
    if not _NAME.match(name):
        raise ValueError(f"token name {name!r}: use 1-64 lower-case letters, digits, '_', '.', '@' or '-', "
                         "starting with a letter or digit")
    return name


class TokenStore:
    """The tokens file (module doc): created, listed and revoked by ``dkm token``, read by the
    service, which checks a request's token with :meth:`verify`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._seen: tuple[int, int, int] | None = None
        self._records: dict[str, TokenRecord] = {}

    # ------------------------------------------------------------------ the file
    def _stat(self) -> tuple[int, int, int] | None:
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            return None
        return info.st_ino, info.st_size, info.st_mtime_ns

    def records(self) -> dict[str, TokenRecord]:
        """Every token by id, re-read when the file changed (one ``stat`` otherwise)."""
        with self._lock:
            seen = self._stat()
            if seen != self._seen:
                self._records = self._read() if seen is not None else {}
                self._seen = seen
            return self._records

    def _read(self) -> dict[str, TokenRecord]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except ValueError as err:
            raise ValueError(f"{self.path}: not a tokens file ({err}); recreate it with dkm token create") from None
        if not isinstance(data, dict) or data.get("format") != _FORMAT or not isinstance(data.get("tokens"), list):
            raise ValueError(f"{self.path}: not a tokens file of format {_FORMAT}")
        out = {}
        for row in data["tokens"]:
            record = TokenRecord(str(row["id"]), check_name(str(row["name"])),
                                 tuple(Scope.parse(s) for s in row["scopes"]), str(row["sha256"]),
                                 str(row["created"]))
            out[record.id] = record
        return out

    def _write(self, records: Iterable[TokenRecord]) -> None:
        """Write the file whole, mode 600 from its creation, and rename it into place."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        body = json.dumps({"format": _FORMAT, "tokens": [r.as_json() for r in records]}, indent=1) + "\n"
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, body.encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)

    # ------------------------------------------------------------------ dkm token
    def create(self, name: str, scopes: Iterable[Scope]) -> tuple[TokenRecord, str]:
        """A new token for ``name`` with ``scopes``: its record and the token (shown once)."""
        wanted = tuple(sorted(set(scopes), key=list(Scope).index))
        if not wanted:
            raise ValueError(f"give at least one scope ({', '.join(s.value for s in Scope)})")
        records = dict(self.records())
        token_id = secrets.token_hex(4)
        while token_id in records:
            token_id = secrets.token_hex(4)
        token = f"dkm_{token_id}_{secrets.token_urlsafe(32)}"
        record = TokenRecord(token_id, check_name(name), wanted, _digest(token),
                             datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
        records[token_id] = record
        self._write(records.values())
        return record, token

    def revoke(self, which: str) -> list[TokenRecord]:
        """Remove the token with id ``which``, or every token named ``which``; the removed ones."""
        records = self.records()
        gone = [r for r in records.values() if which in (r.id, r.name)]
        if not gone:
            raise ValueError(f"no token has the id or name {which!r} in {self.path} (dkm token list)")
        self._write(r for r in records.values() if r not in gone)
        return gone

    # ------------------------------------------------------------------ the service
    def verify(self, token: str) -> Principal | None:
        """The principal of ``token``, or None when it is malformed, unknown or wrong."""
        match = _TOKEN.match(token)
        record = self.records().get(match.group(1)) if match else None
        # The digest is computed and compared whatever was found, so a miss costs what a hit does.
        expected = record.sha256 if record is not None else "0" * 64
        ok = hmac.compare_digest(_digest(token), expected)
        if record is None or not ok:
            return None
        return Principal(record.name, record.id, frozenset(record.scopes))


class RateLimiter:
    """A token bucket per principal: ``rate`` requests a second on average, bursts of ``burst``.

    :meth:`take` returns 0 when the request may go, else the seconds until it could (the
    ``Retry-After`` of a 429). One bucket per token id; buckets idle long enough to be full are
    dropped, so the map stays as small as the set of tokens in use.
    """

    def __init__(self, rate: float, burst: int, *, clock: Any = time.monotonic) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError(f"a rate limit needs rate > 0 and burst >= 1, got {rate} and {burst}")
        self.rate, self.burst, self.clock = float(rate), int(burst), clock
        self._buckets: dict[str, tuple[float, float]] = {}  # id -> (tokens, when)

    def take(self, key: str) -> float:
        """Spend one request of ``key``'s bucket; 0, or the seconds to wait (module doc)."""
        now = self.clock()
        tokens, when = self._buckets.get(key, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - when) * self.rate)
        if tokens < 1.0:
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / self.rate
        self._buckets[key] = (tokens - 1.0, now)
        if len(self._buckets) > 10_000:
            self._forget_full(now)
        return 0.0

    def _forget_full(self, now: float) -> None:
        full_after = self.burst / self.rate
        for key, (_, when) in list(self._buckets.items()):
            if now - when > full_after:
                del self._buckets[key]


def retry_after(seconds: float) -> str:
    """A ``Retry-After`` value: whole seconds, rounded up, at least 1."""
    return str(max(1, math.ceil(seconds)))


def bearer(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer ...`` header, or None."""
    if not header:
        return None
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def mode_of(path: Path) -> int | None:
    """The permission bits of ``path`` (None when it does not exist)."""
    with contextlib.suppress(FileNotFoundError):
        return os.stat(path).st_mode & 0o777
    return None
