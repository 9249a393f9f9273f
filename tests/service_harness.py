"""The service under test: ``dkm serve``'s application on a uvicorn server in a thread of the
test process (127.0.0.1, a free port), tokens made the way ``dkm token create`` makes them,
and a reader of Server-Sent Events."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from dkmsks.commands.serve import listening_socket, server
from dkmsks.service.app import ServiceConfig, create_app
from dkmsks.service.auth import Scope, TokenStore
from dkmsks.warehouse import Warehouse


@dataclass
class Running:
    """A running service: its address, an admin's, two subscribers' and a publisher's tokens."""

    url: str
    app: object
    tokens: dict[str, str]

    def client(self, who: str | None = "root", **kwargs) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.tokens[who]}"} if who else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=kwargs.pop("timeout", 30), **kwargs)

    @property
    def service(self):
        return self.app.state.service


def make_tokens(path: Path) -> dict[str, str]:
    store = TokenStore(path)
    return {name: store.create(name, scopes)[1] for name, scopes in (
        ("root", [Scope.ADMIN]), ("alice", [Scope.SUBSCRIBE, Scope.PUBLISH]), ("bob", [Scope.SUBSCRIBE]),
        ("feed", [Scope.PUBLISH]))}


@contextlib.contextmanager
def running_service(warehouse: Warehouse, *, sndbuf: int | None = None, port: int = 0,
                    **options) -> Iterator[Running]:
    """The service over ``warehouse`` until the block ends (``options``: ServiceConfig fields;
    ``sndbuf``: the connections' kernel send buffer, small to make a stalled client felt soon;
    ``port``: 0 for any free one)."""
    tokens_file = warehouse.run_dir / "tokens.json"
    tokens = make_tokens(tokens_file)
    options = {"poll": 0.05, "rate": 10_000.0, "burst": 10_000, **options}
    app = create_app(ServiceConfig(warehouse, tokens_file, warehouse.run_dir / "service-test.sqlite3", **options))
    sock = listening_socket("127.0.0.1", port)
    if sndbuf is not None:
        import socket

        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    served = server(app, log_level="warning")
    thread = threading.Thread(target=served.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/healthz", timeout=5).json()["events"]:
                    break
            time.sleep(0.05)
        else:
            raise AssertionError("the service did not start")
        yield Running(url, app, tokens)
    finally:
        served.should_exit = True
        thread.join(30)
        sock.close()
        assert not thread.is_alive(), "the service did not stop"


@dataclass
class Event:
    """One Server-Sent Event."""

    id: str | None
    event: str
    data: dict | None


def read_events(lines: Iterator[str]) -> Iterator[Event]:
    """The events of an SSE body's lines (comments and ``retry`` skipped)."""
    fields: dict[str, str] = {}
    for line in lines:
        if line == "":
            if "event" in fields or "data" in fields:
                yield Event(fields.get("id"), fields.get("event", "message"),
                            json.loads(fields["data"]) if "data" in fields else None)
            fields = {}
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        fields[name] = value[1:] if value.startswith(" ") else value


class Listener:
    """An event stream read in a background thread into a list, until closed or a stop."""

    def __init__(self, running: Running, who: str = "root", *, params: dict | None = None,
                 last_event_id: str | None = None) -> None:
        self.events: list[Event] = []
        self.status: int | None = None
        self.ended = threading.Event()
        self._stop = threading.Event()
        headers = {"Authorization": f"Bearer {running.tokens[who]}"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        self._args = (running.url + "/v1/events", headers, params or {})
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        url, headers, params = self._args
        try:
            with httpx.stream("GET", url, headers=headers, params=params, timeout=60) as r:
                self._response = r
                self.status = r.status_code
                if r.status_code != 200:
                    self.body = r.read()
                    return
                for event in read_events(r.iter_lines()):
                    self.events.append(event)
                    if self._stop.is_set():
                        return
        except httpx.HTTPError:
            pass
        finally:
            self.ended.set()

    def wait_for(self, predicate, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not predicate(self.events):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out; {len(self.events)} events: {self.events[-3:]}")
            if self.ended.is_set() and not predicate(self.events):
                raise AssertionError(f"the stream ended (status {self.status}); {self.events[-3:]}")
            time.sleep(0.02)

    def wait_processed(self, t: int, timeout: float = 30) -> None:
        self.wait_for(lambda events: any(e.event in ("processed", "reset") and e.data["t"] >= t for e in events),
                      timeout)

    def close(self) -> None:
        """Drop the connection (as a client that goes away does)."""
        self._stop.set()
        response = getattr(self, "_response", None)
        if response is not None:
            with contextlib.suppress(Exception):
                response.close()
        self.ended.wait(10)
