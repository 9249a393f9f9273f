"""Follow mode's rounds over the network: an Arrow Flight server on the driver, the worker tasks
its clients (:class:`FlightChannel`, a :class:`~dkmsks.jobs.follow.channel.RoundChannel`).

The spool (:mod:`.spool`) needs a directory the driver and every executor share; tasks on other
hosts reach the driver over the network instead. The driver runs a Flight server bound to
``$DKMSKS_DRIVER_BIND_ADDRESS`` (as Spark's driver, :func:`dkmsks.spark.session.driver_addresses`)
on ``$DKMSKS_FOLLOW_PORT`` (0, any free port, by default; a container publishes a fixed one),
and the tasks call it at ``$DKMSKS_DRIVER_HOST``:

- ``do_get`` of ticket ``{"round": n, "task": i}``: task ``i``'s round ``n`` as the bytes of
  :mod:`.wire` in a one-column stream (``part``, large binary, chunks of at most
  :data:`CHUNK` bytes); the call waits up to :data:`LONG_POLL` seconds for the round and then
  answers ``wait`` (the task asks again), or ``stop`` once the driver stopped the loop. The
  state is the stream schema's metadata;
- ``do_put`` with descriptor path ``records/<n>/<worker>``: a worker's records, as the Arrow
  record batches they are;
- ``do_action`` ``ready`` ``{"worker"}``, ``changes`` ``{"n", "task", "file"}`` (a change file's
  description, or null) and ``fail`` ``{"task", "text"}`` (a failed task's traceback).

**Who may call.** Every call must carry ``authorization: Bearer <token>``, a random token of
the session (32 bytes) that the driver hands the tasks inside the stage's closure, compared in
constant time before the call runs (:class:`_TokenCheck`); any other caller is refused
(``unauthenticated``) with nothing read. The token is never logged nor shown by ``repr``. It
travels as Spark ships the closure (Spark's RPC, encrypted with ``spark.network.crypto.enabled``)
and with each call (TLS, when asked for: ``$DKMSKS_FOLLOW_TLS_CERT`` / ``_KEY``). What is read
is data only: a round is decoded by :func:`~dkmsks.jobs.follow.wire.decode_round` with its
checks, a worker's records are Arrow record batches, the actions' bodies JSON.

Build slots stay per host (a build's memory is the host's): ``flock`` files in a folder of the
host's temporary directory named by the session (:func:`~dkmsks.jobs.follow.spool.build_slot`).
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, suppress
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from dkmsks.jobs.follow.channel import Round, RoundOutput
from dkmsks.jobs.follow.spool import build_slot
from dkmsks.jobs.follow.wire import decode_round, encode_round
from dkmsks.storage.journal_files import JournalFile

#: Seconds a ``do_get`` waits for its round before it answers ``wait`` (the task asks again):
#: an idle follow session holds no call open for longer, so nothing between the hosts (a NAT,
#: a proxy) drops an idle connection unseen.
LONG_POLL = 20.0
#: Bytes per record batch of a round's stream.
CHUNK = 4 << 20
#: Seconds a task's call other than the long poll may take.
CALL_TIMEOUT = 120.0
_PART = pa.schema([("part", pa.large_binary())])


def _state_schema(state: str) -> pa.Schema:
    return _PART.with_metadata({b"state": state.encode()})


class _TokenCheck(flight.ServerMiddlewareFactory):
    """Refuses every call that does not carry the session's bearer token."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self._expected = f"Bearer {token}".encode()

    def start_call(self, info: Any, headers: dict[str, list[Any]]) -> None:
        """Check the call's ``authorization`` header before the call runs."""
        del info
        given = headers.get("authorization") or []
        value = given[0] if given else b""
        if isinstance(value, str):
            value = value.encode()
        if not hmac.compare_digest(value, self._expected):
            raise flight.FlightUnauthenticatedError("unauthenticated")


class _RoundServer(flight.FlightServerBase):
    """The driver's side: rounds put, records and descriptions received, under one condition."""

    def __init__(self, location: str, token: str, **kwargs: Any) -> None:
        super().__init__(location, middleware={"token": _TokenCheck(token)}, **kwargs)
        self.cond = threading.Condition()
        self.rounds: dict[int, list[bytes]] = {}  # n -> each task's bytes (one entry: every task's)
        self.stopped = False
        self.records: dict[tuple[int, int], pa.Table] = {}
        self.changes: dict[tuple[int, int], str] = {}
        self.ready: set[int] = set()
        self.failures: dict[int, str] = {}

    def do_get(self, context: Any, ticket: flight.Ticket) -> flight.FlightDataStream:
        """A task's round (module doc), waiting up to :data:`LONG_POLL` seconds for it."""
        del context
        asked = _json(ticket.ticket)
        n, task = _whole(asked, "round"), _whole(asked, "task")
        deadline = time.monotonic() + LONG_POLL
        with self.cond:
            while n not in self.rounds and not self.stopped:
                left = deadline - time.monotonic()
                if left <= 0:
                    return flight.RecordBatchStream(pa.table({"part": pa.array([], pa.large_binary())},
                                                             schema=_state_schema("wait")))
                self.cond.wait(left)
            if n not in self.rounds:
                return flight.RecordBatchStream(pa.table({"part": pa.array([], pa.large_binary())},
                                                         schema=_state_schema("stop")))
            parts = self.rounds[n]
            data = parts[task] if len(parts) > 1 else parts[0]
        chunks = [data[at:at + CHUNK] for at in range(0, len(data), CHUNK)] or [b""]
        return flight.RecordBatchStream(pa.table({"part": pa.array(chunks, pa.large_binary())},
                                                 schema=_state_schema("round")))

    def do_put(self, context: Any, descriptor: flight.FlightDescriptor, reader: Any, writer: Any) -> None:
        """A worker's records of a round (descriptor path ``records/<n>/<worker>``)."""
        del context, writer
        path = [p.decode() if isinstance(p, bytes) else p for p in (descriptor.path or [])]
        if len(path) != 3 or path[0] != "records" or not all(p.isdigit() for p in path[1:]):
            raise flight.FlightServerError(f"unknown upload {path[:3]!r}")
        table = reader.read_all()
        key = (int(path[1]), int(path[2]))
        with self.cond:
            self.records[key] = table
            self.cond.notify_all()

    def do_action(self, context: Any, action: flight.Action) -> Iterator[bytes]:
        """``ready``, ``changes`` and ``fail`` (module doc)."""
        del context
        body = _json(action.body.to_pybytes() if action.body is not None else b"{}")
        with self.cond:
            if action.type == "ready":
                self.ready.add(_whole(body, "worker"))
            elif action.type == "changes":
                file = body.get("file")
                if file is not None and not isinstance(file, str):
                    raise flight.FlightServerError("a change file's description must be a JSON string or null")
                self.changes[(_whole(body, "n"), _whole(body, "task"))] = file or ""
            elif action.type == "fail":
                text = body.get("text")
                self.failures[_whole(body, "task")] = text if isinstance(text, str) else repr(text)
            else:
                raise flight.FlightServerError(f"unknown action {action.type!r}")
            self.cond.notify_all()
        return iter([])

    def list_actions(self, context: Any) -> list[tuple[str, str]]:
        """The actions a task may call."""
        del context
        return [("ready", "a worker is built"), ("changes", "a task's change file of a round"),
                ("fail", "a task's traceback")]


def _json(data: bytes) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise flight.FlightServerError("a request body is not JSON") from None
    if not isinstance(value, dict):
        raise flight.FlightServerError("a request body is not a JSON object")
    return value


def _whole(body: dict[str, Any], name: str) -> int:
    value = body.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise flight.FlightServerError(f"{name!r} must be a whole number")
    return value


class FlightChannel:
    """The round exchange of :class:`~dkmsks.jobs.follow.channel.RoundChannel` over Arrow
    Flight (module doc). ``bind``/``host``/``port``: where the driver's server listens and how
    tasks call it (None: :func:`dkmsks.spark.session.driver_addresses` and
    ``$DKMSKS_FOLLOW_PORT``); ``poll``: seconds between the driver's looks for a failure or an
    ended stage while it waits for a round; ``build_slots``: builds at once per host."""

    def __init__(self, *, poll: float, build_slots: int, bind: str | None = None, host: str | None = None,
                 port: int | None = None) -> None:
        if bind is None or host is None:
            from dkmsks.spark.session import driver_addresses

            addresses = driver_addresses()
            bind = bind or addresses["spark.driver.bindAddress"]
            host = host or addresses["spark.driver.host"]
        self.bind, self.host = bind, host
        self.port = int(os.environ.get("DKMSKS_FOLLOW_PORT") or 0) if port is None else port
        self.poll = poll
        self.build_slots = build_slots
        self.session = uuid.uuid4().hex[:12]
        self.location: str | None = None
        self._token = secrets.token_urlsafe(32)
        self._tls = _tls_files()
        self._server: _RoundServer | None = None  # the driver's
        self._client: flight.FlightClient | None = None  # a task's, made on first use

    def __repr__(self) -> str:
        return f"FlightChannel(location={self.location!r}, session={self.session!r})"  # never the token

    def __getstate__(self) -> dict[str, Any]:
        # What crosses into a task: where to call and the token; no server, no client.
        return {**self.__dict__, "_server": None, "_client": None}

    # ------------------------------------------------------------------ the driver's side
    def open(self) -> None:
        """Start the server; tasks can call it from now on."""
        scheme = "grpc+tls" if self._tls else "grpc+tcp"
        certificates = []
        if self._tls:
            cert, key = self._tls
            certificates = [flight.CertKeyPair(Path(cert).read_bytes(), Path(key).read_bytes())]
        self._server = _RoundServer(f"{scheme}://{_url_host(self.bind)}:{self.port}", self._token,
                                    tls_certificates=certificates)
        self.location = f"{scheme}://{_url_host(self.host)}:{self._server.port}"

    @property
    def _srv(self) -> _RoundServer:
        if self._server is None:
            raise RuntimeError("the Flight channel is not open (a task's copy has no server)")
        return self._server

    def ready_workers(self) -> int:
        """How many workers the tasks said are built."""
        with self._srv.cond:
            return len(self._srv.ready)

    def put_round(self, n: int, rounds: Round | Sequence[Round]) -> list[int]:
        """Encode round ``n`` (:mod:`.wire`) and let the waiting tasks have it."""
        parts = [encode_round(rounds)] if isinstance(rounds, Round) else [encode_round(r) for r in rounds]
        srv = self._srv
        with srv.cond:
            srv.rounds[n] = parts
            srv.cond.notify_all()
        return [len(p) for p in parts]

    def collect(self, n: int, *, workers: int, tasks: int, alive: Callable[[], None]) -> RoundOutput:
        """Wait for every worker's records and ``tasks`` change descriptions of round ``n``,
        then forget the round."""
        srv = self._srv
        out = RoundOutput()
        with srv.cond:
            while True:
                if srv.failures:
                    raise RuntimeError(f"worker task failed:\n{srv.failures[min(srv.failures)]}")
                have = sum((n, w) in srv.records for w in range(workers))
                described = sum((n, t) in srv.changes for t in range(tasks))
                if have == workers and described == tasks:
                    break
                srv.cond.wait(self.poll)
                srv.cond.release()
                try:
                    alive()
                finally:
                    srv.cond.acquire()
            out.records = [srv.records.pop((n, w)) for w in range(workers)]
            for t in range(tasks):
                if text := srv.changes.pop((n, t)):
                    out.change_files.append(JournalFile.from_json(text))
            srv.rounds.pop(n, None)
        return out

    def check(self) -> None:
        """Raise the traceback a failed task left (the first by task number)."""
        srv = self._srv
        with srv.cond:
            if srv.failures:
                raise RuntimeError(f"worker task failed:\n{srv.failures[min(srv.failures)]}")

    def stop(self) -> None:
        """Answer ``stop`` to every task's next ask for a round."""
        if self._server is None:
            return
        with self._server.cond:
            self._server.stopped = True
            self._server.cond.notify_all()

    def close(self) -> None:
        """Shut the server down (the tasks have ended)."""
        if self._server is not None:
            self._server.shutdown()
            self._server = None

    # ------------------------------------------------------------------ a worker task's side
    def _call(self) -> tuple[flight.FlightClient, flight.FlightCallOptions, flight.FlightCallOptions]:
        if self._client is None:
            if self.location is None:
                raise RuntimeError("the Flight channel was shipped before the driver opened it")
            kwargs: dict[str, Any] = {}
            if self._tls:
                kwargs["tls_root_certs"] = Path(self._tls[0]).read_bytes()
            self._client = flight.FlightClient(self.location, **kwargs)
        headers = [(b"authorization", f"Bearer {self._token}".encode())]
        return (self._client, flight.FlightCallOptions(timeout=CALL_TIMEOUT, headers=headers),
                flight.FlightCallOptions(timeout=LONG_POLL + CALL_TIMEOUT, headers=headers))

    def _action(self, name: str, body: dict[str, Any]) -> None:
        client, options, _ = self._call()
        for _ in client.do_action(flight.Action(name, json.dumps(body).encode()), options=options):
            pass

    def build_slot(self) -> AbstractContextManager[int]:
        """One of ``build_slots`` lock files in this host's temporary folder for the session."""
        folder = Path(tempfile.gettempdir()) / f"dkmsks-follow-{self.session}"
        folder.mkdir(mode=0o700, exist_ok=True)
        return build_slot(folder, self.build_slots)

    def say_ready(self, worker: int) -> None:
        """Tell the driver ``worker`` is built."""
        self._action("ready", {"worker": worker})

    def get_round(self, n: int, task: int) -> Round | None:
        """The task's round ``n`` (asking again while the driver answers ``wait``); None once stopped."""
        client, _, long_poll = self._call()
        ticket = flight.Ticket(json.dumps({"round": n, "task": task}).encode())
        while True:
            table = client.do_get(ticket, options=long_poll).read_all()
            state = (table.schema.metadata or {}).get(b"state")
            if state == b"round":
                return decode_round(b"".join(chunk.as_py() for chunk in table.column("part")))
            if state == b"stop":
                return None
            if state != b"wait":
                raise RuntimeError(f"the follow driver answered a round with state {state!r}")

    def put_records(self, n: int, worker: int, records: pa.Table) -> None:
        """Send ``worker``'s records of round ``n`` (``do_put``)."""
        client, options, _ = self._call()
        descriptor = flight.FlightDescriptor.for_path("records", str(n), str(worker))
        writer, _reader = client.do_put(descriptor, records.schema, options=options)
        writer.write_table(records)
        writer.close()

    def put_changes(self, n: int, task: int, file: JournalFile | None) -> None:
        """Send the description of ``task``'s change file of round ``n`` (None: it wrote none)."""
        self._action("changes", {"n": n, "task": task, "file": file.to_json() if file is not None else None})

    def fail(self, task: int, text: str) -> None:
        """Send the traceback of a failed task; a driver that is gone is no further error."""
        with suppress(flight.FlightError, OSError, pa.ArrowException):
            self._action("fail", {"task": task, "text": text})


def _url_host(host: str) -> str:
    """``host`` as the host part of a URL (an IPv6 address in brackets)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _tls_files() -> tuple[str, str] | None:
    """``$DKMSKS_FOLLOW_TLS_CERT`` and ``$DKMSKS_FOLLOW_TLS_KEY`` (PEM files on the driver; the
    certificate also on every executor, to verify the driver by), or None for plain gRPC."""
    cert, key = os.environ.get("DKMSKS_FOLLOW_TLS_CERT"), os.environ.get("DKMSKS_FOLLOW_TLS_KEY")
    if bool(cert) != bool(key):
        raise ValueError("set both DKMSKS_FOLLOW_TLS_CERT and DKMSKS_FOLLOW_TLS_KEY, or neither")
    return (cert, key) if cert and key else None
