"""Delivery through ``dkm serve`` at the paper's size: publishers, follow mode and a thousand event
streams, everything through the HTTP API.

The setting of issue 62: |O_init| = 1M, |S| = 1M, m = 20, DkM-SKS. After the initial phase
(``dkm run --until 0``), each party in processes of its own: ``dkm follow`` (warm workers),
``dkm serve`` (the service measured) and this process, the clients (asyncio sockets: a minimal
HTTP/1.1 client, no HTTP library per stream, so that thousands fit beside the service):

1. **memory per stream**: ``--idle-streams`` event streams opened on the fresh service, before it
   has served anything else; its resident size before and after, per stream;
2. **the clients' subscriptions**: each of ``--clients`` clients (a principal with a token of
   its own) registers ``--subs-per-client`` subscriptions with ``POST /v1/subscriptions``, all at
   once (the service groups them), at places, keywords and ``k`` drawn as the workload's
   insertions are; one round commits them;
3. **the run**: every client follows its subscriptions (``GET /v1/events?sub=...``, from before
   they registered) while a publisher posts one timestamp a second for ``--seconds``: one
   ``POST /v1/objects`` of 1,000 objects, 100 ``POST /v1/subscriptions`` and 100 ``DELETE
   /v1/subscriptions/{id}`` (the workload's events of that timestamp; an admin's token), all at
   once. A share ``--reconnect`` of the streams is cut at a random moment and resumed with
   ``Last-Event-ID``. Measured: each request's latency; the *delivery latency*, from the
   objects POST's answer (which names its timestamp ``t``) to each stream's receipt of the
   commit that holds ``t`` (its ``processed`` event, which closes the commit's chunk; a stream
   cut while ``t`` was committed is not counted for it); the service's CPU time and memory;
4. **the ramp**: more streams in steps (``--ramp``: each a duplicate of a client's), the
   publisher going on, ``--ramp-seconds`` of delivery latency at each step, until the p99
   doubles that of the run's ``--clients`` streams;
5. **exactness**: each client's received changes, replayed, against the journal's change
   records of its subscriptions (*lost*: a change it did not get; *repeated*: one it got twice,
   across reconnections too), and the results they make at every timestamp against the
   oracle's: a subscription registered at ``t_r`` sees the objects with ``t >= t_r``
   (docs/design.md §1), so its exact kNN at ``t`` is the ``k`` nearest matching objects of
   ``[t_r, t]`` (all landed through the API), by ``(d², id)``; computed timestamp by timestamp
   and checked against :func:`dkmsks.core.oracle.brute_force_knn` at the last one.

    dkm bench serve [--quick] [--doc docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dkmsks.bench.common import (
    DKM,
    REPO,
    Refused,
    Report,
    ResultFile,
    add_doc_flags,
    add_quick_flag,
    add_workload_flags,
    bench_main,
    load_average,
    paper_workload,
    run_command,
    say,
    workload_spec,
)
from dkmsks.bench.prose import Prose
from dkmsks.bench.stats import median, percentile

prose = Prose.load("serve")
TITLE = "Delivery through dkm serve"
#: Issue 62's targets on two cores.
TARGETS = {"publish_p50": 0.050, "delivery_p50": 0.5, "delivery_p99": 1.0, "streams": 1000, "kib_per_stream": 64.0}


# --------------------------------------------------------------------------- a minimal HTTP client
async def request(port: int, method: str, path: str, token: str, body: Any = None,
                  timeout: float = 120.0) -> tuple[int, Any, float]:
    """One request on a connection of its own: ``(status, JSON body, seconds)``."""
    data = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
    head = (f"{method} {path} HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\nConnection: close\r\n\r\n")
    started = time.perf_counter()
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
    try:
        writer.write(head.encode() + data)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), timeout)
    finally:
        writer.close()
    seconds = time.perf_counter() - started
    status_line, _, rest = answer.partition(b"\r\n")
    headers, _, payload = rest.partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" in headers.lower():
        payload = _unchunk(payload)
    status = int(status_line.split()[1])
    return status, json.loads(payload) if payload else None, seconds


def _unchunk(data: bytes) -> bytes:
    out: list[bytes] = []
    at = 0
    while True:
        end = data.index(b"\r\n", at)
        size = int(data[at:end].split(b";")[0], 16)
        if size == 0:
            return b"".join(out)
        out.append(data[end + 2:end + 2 + size])
        at = end + 2 + size + 2


@dataclass
class Stream:
    """One client's event stream: what it follows, what it received and when."""

    name: str
    token: str
    subs: list[int]
    after: str
    changes: list[tuple[str, bytes]] = field(default_factory=list)  # (event id, data)
    processed: dict[int, float] = field(default_factory=dict)  # t -> when first received
    last_id: str | None = None
    connected_at: list[tuple[float, float | None]] = field(default_factory=list)  # [(open, closed)]
    reconnects: int = 0
    writer: asyncio.StreamWriter | None = None
    error: str | None = None
    task: asyncio.Task[None] | None = None

    def query(self) -> str:
        """The stream's path and query."""
        return "/v1/events?" + "&".join(f"sub={s}" for s in self.subs)


async def follow_stream(port: int, stream: Stream, stop: asyncio.Event, opened: asyncio.Event | None = None) -> None:
    """Read ``stream`` until ``stop``; a cut connection is resumed from the last event id."""
    while not stop.is_set():
        resume = stream.last_id or stream.after
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError as err:
            stream.error = f"connect: {err}"
            await asyncio.sleep(0.5)
            continue
        stream.writer = writer
        writer.write((f"GET {stream.query()} HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {stream.token}\r\n"
                      f"Last-Event-ID: {resume}\r\nAccept: text/event-stream\r\n\r\n").encode())
        began = time.monotonic()
        try:
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            if b" 200 " not in head.split(b"\r\n", 1)[0]:
                stream.error = head.split(b"\r\n", 1)[0].decode()
                await asyncio.sleep(1.0)
                continue
            stream.connected_at.append((began, None))
            if opened is not None:
                opened.set()
            await _read_events(reader, stream)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            writer.close()
            if stream.connected_at and stream.connected_at[-1][1] is None:
                stream.connected_at[-1] = (stream.connected_at[-1][0], time.monotonic())
        if not stop.is_set():
            stream.reconnects += 1


async def _read_events(reader: asyncio.StreamReader, stream: Stream) -> None:
    """The chunked SSE body: each event's id, kind and data; ``processed`` events timed."""
    buffer = b""
    while True:
        size_line = await reader.readline()
        if not size_line:
            return
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return
        buffer += (await reader.readexactly(size + 2))[:-2]
        now = time.monotonic()
        while True:
            cut = buffer.find(b"\n\n")
            if cut < 0:
                break
            block, buffer = buffer[:cut], buffer[cut + 2:]
            event_id, kind, data = None, b"", b""
            for line in block.split(b"\n"):
                if line.startswith(b"id: "):
                    event_id = line[4:].decode()
                elif line.startswith(b"event: "):
                    kind = line[7:]
                elif line.startswith(b"data: "):
                    data = line[6:]
            if event_id is None:
                continue  # a comment (keep-alive, live-from note)
            stream.last_id = event_id
            if kind == b"change":
                stream.changes.append((event_id, data))
            elif kind in (b"processed", b"reset"):
                t = int(event_id)
                stream.processed.setdefault(t, now)


# --------------------------------------------------------------------------- the parties
def rss(pid: int) -> int:
    """Resident set size of ``pid`` in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of ``pid`` and its children so far."""
    import psutil

    total = 0.0
    for p in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            times = p.cpu_times()
            total += times.user + times.system
    return total


def free_port() -> int:
    """A free port of 127.0.0.1."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_serve(warehouse: Path, port: int, log: Path, poll: float) -> subprocess.Popen[bytes]:
    """``dkm serve`` in a process of its own (no rate limit: the benchmark is the load)."""
    fh = log.open("a")
    proc = subprocess.Popen([*DKM, "serve", "--warehouse", str(warehouse), "--port", str(port), "--rate", "1e9",
                             "--burst", "1000000000", "--poll", str(poll), "--log-level", "warning"],
                            stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": str(REPO / "lib")})
    import httpx

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError, ValueError):
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).json()["events"]:
                return proc
        if proc.poll() is not None:
            raise RuntimeError(f"dkm serve exited at start (see {log})")
        time.sleep(0.2)
    raise RuntimeError(f"dkm serve did not start within 120 s (see {log})")


def stop(proc: subprocess.Popen[Any] | None, timeout: float = 120) -> None:
    """SIGTERM to a party started here, by its PID; SIGKILL to its group after ``timeout``."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)


def raise_open_files() -> int:
    """The soft limit of open files raised to the hard one (thousands of sockets); the limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# --------------------------------------------------------------------------- the measurement
def _rows_by_t(objects: Any, events: Any, vocab: Any, first: int, last: int) -> dict[int, tuple[list, list]]:
    """The workload's objects and events of ``first..last`` as API bodies, by timestamp."""
    from dkmsks.core.model import Op

    out: dict[int, tuple[list, list]] = {t: ([], []) for t in range(first, last + 1)}
    o = objects
    for r in np.flatnonzero((o.t >= first) & (o.t <= last)).tolist():
        out[int(o.t[r])][0].append({"id": int(o.ids[r]), "x": float(o.x[r]), "y": float(o.y[r]),
                                    "keywords": sorted(vocab.word(int(k)) for k in o.keywords.row(r))})
    e = events
    for r in np.flatnonzero((e.t >= first) & (e.t <= last)).tolist():
        if e.op[r] == Op.DELETE:
            out[int(e.t[r])][1].append({"op": "delete", "id": int(e.ids[r])})
        else:
            out[int(e.t[r])][1].append({"op": "insert", "id": int(e.ids[r]), "x": float(e.x[r]), "y": float(e.y[r]),
                                        "keywords": sorted(vocab.word(int(k)) for k in e.keywords.row(r)),
                                        "k": int(e.k[r])})
    return out


def _client_specs(events: Any, vocab: Any, first: int, n: int) -> list[dict[str, Any]]:
    """``n`` subscriptions for the clients: the workload's insertions from timestamp ``first``
    on (place, keywords, k), under ids of their own."""
    from dkmsks.core.model import Op

    e = events
    rows = np.flatnonzero((e.t >= first) & (e.op == Op.INSERT))[:n]
    if rows.shape[0] < n:
        raise RuntimeError(f"the workload has {rows.shape[0]} insertions after t={first}; {n} are needed")
    return [{"id": 8_000_000_000 + i, "x": float(e.x[r]), "y": float(e.y[r]),
             "keywords": sorted(vocab.word(int(k)) for k in e.keywords.row(r)), "k": int(e.k[r])}
            for i, r in enumerate(rows.tolist())]


async def _register(port: int, tokens: list[str], specs: list[dict[str, Any]], per_client: int,
                    concurrency: int = 200) -> dict[int, int]:
    """Every client's subscriptions through the API, at once (``concurrency`` in flight); the
    timestamp each landed at."""
    gate = asyncio.Semaphore(concurrency)
    landed: dict[int, int] = {}

    async def one(i: int, spec: dict[str, Any]) -> None:
        async with gate:
            status, body, _ = await request(port, "POST", "/v1/subscriptions", tokens[i // per_client], spec)
        if status != 201:
            raise RuntimeError(f"subscribe {spec['id']}: {status} {body}")
        landed[spec["id"]] = int(body["t"])

    await asyncio.gather(*(one(i, s) for i, s in enumerate(specs)))
    return landed


async def _publish_one(port: int, token: str, objects: list, events: list) -> dict[str, Any]:
    """One second's publishing: the objects in one POST, each event a request of its own, at once."""
    async def event(row: dict[str, Any]) -> tuple[str, int, float]:
        if row["op"] == "insert":
            status, _, seconds = await request(port, "POST", "/v1/subscriptions", token,
                                               {k: v for k, v in row.items() if k != "op"})
        else:
            status, _, seconds = await request(port, "DELETE", f"/v1/subscriptions/{row['id']}", token)
        return row["op"], status, seconds

    async def post_objects() -> tuple[int, Any, float, float]:
        status, body, seconds = await request(port, "POST", "/v1/objects", token, objects)
        return status, body, seconds, time.monotonic()

    results = await asyncio.gather(post_objects(), *(event(r) for r in events))
    status, body, seconds, answered = results[0]
    if status != 202:
        raise RuntimeError(f"POST /v1/objects: {status} {body}")
    rest: list[tuple[str, int, float]] = list(results[1:])
    return {"t": int(body["t"]), "objects_s": seconds, "answered": answered,
            "subscribe_s": [s for op, st, s in rest if op == "insert" and st == 201],
            "unsubscribe_s": [s for op, st, s in rest if op == "delete" and st == 202],
            "refused": [(op, st) for op, st, _ in rest if st not in (201, 202)]}


def _delivery(streams: list[Stream], published: list[dict[str, Any]]) -> list[float]:
    """Delivery latencies (module doc): for each published ``t`` and each stream that was
    connected from its publish to its delivery, the receipt of the commit holding ``t``."""
    import bisect

    out = []
    for s in streams:
        ts, whens = list(s.processed), list(s.processed.values())  # in the order received: t ascending
        for p in published:
            at = bisect.bisect_left(ts, p["t"])
            if at == len(ts):
                continue
            when, answered = whens[at], p["answered"]
            if any(a <= answered and (b is None or b >= when) for a, b in s.connected_at):
                out.append(max(0.0, when - answered))
    return out


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Run the benchmark (module doc); its results."""
    from dkmsks.io.writers import write_events, write_objects
    from dkmsks.service.auth import Scope, TokenStore
    from dkmsks.storage.journal import last_processed
    from dkmsks.storage.lake import Lake
    from dkmsks.warehouse import Warehouse

    work: Path = args.workdir
    ramp = [int(n) for n in args.ramp.split(",") if n.strip()] if args.ramp else []
    pub_ts = args.seconds + len(ramp) * args.ramp_seconds + 10
    client_subs = args.clients * args.subs_per_client
    spec = workload_spec(args)
    needed = pub_ts + -(-client_subs // max(1, spec.inserts_per_ts)) + 1
    if needed > spec.timestamps:
        raise Refused(f"--timestamps {spec.timestamps} is too few: the publisher takes {pub_ts} and the clients' "
                      f"subscriptions need {needed - pub_ts} more; give --timestamps {needed}")
    params = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "func"}
    rec = ResultFile(work / "results.json", params, spark=True)
    rec.put("load_before", load_average())
    files = work / "workload"
    objects_file, events_file = files / "objects.tsv.gz", files / "events.tsv.gz"
    initial, warehouse_dir = work / "warehouse-t0", work / "warehouse"
    say(f"workload {spec}")
    objects, events, vocab = paper_workload(spec)
    if not (args.keep and (initial / "tables").exists()):
        shutil.rmtree(work, ignore_errors=True)
        files.mkdir(parents=True)
        write_objects(objects_file, objects, vocab)
        write_events(events_file, events, vocab)
        say("initial phase: dkm run --until 0")
        done = run_command([*DKM, "run", "--objects", str(objects_file), "--events", str(events_file),
                            "--warehouse", str(initial), "--workers", str(args.workers), "--until", "0"],
                           work / "initial.log")
        if done.returncode != 0:
            raise RuntimeError(f"the initial phase failed (see {work / 'initial.log'})")
        rec.put("initial_phase_s", done.seconds)
    shutil.rmtree(warehouse_dir, ignore_errors=True)
    shutil.copytree(initial, warehouse_dir, symlinks=True)  # every run from the end of the initial phase
    warehouse = Warehouse(warehouse_dir)
    lake = Lake.of(warehouse)
    rec.put("open_files", raise_open_files())
    store = TokenStore(warehouse.run_dir / "tokens.json")
    admin = store.create("bench-admin", [Scope.ADMIN])[1]
    client_tokens = [store.create(f"client-{i:05d}", [Scope.SUBSCRIBE])[1] for i in range(args.clients)]
    stream_rows = _rows_by_t(objects, events, vocab, 1, pub_ts)
    specs = _client_specs(events, vocab, pub_ts + 1, client_subs)
    port = free_port()
    serve = follow = None
    try:
        serve = start_serve(warehouse_dir, port, work / "serve.log", args.poll)
        say(f"dkm serve on 127.0.0.1:{port} (pid {serve.pid}); {args.idle_streams} idle streams")
        rec.put("idle", asyncio.run(_idle_streams(port, admin, serve.pid, args.idle_streams)))
        say("dkm follow")
        follow_log = (work / "follow.log").open("w")
        launched = time.perf_counter()
        follow = subprocess.Popen([*DKM, "follow", "--warehouse", str(warehouse_dir), "--slots",
                                   str(args.workers + 2), "--poll", str(args.poll)], stdout=follow_log,
                                  stderr=subprocess.STDOUT, start_new_session=True)
        status = warehouse.run_dir / "follow-default.status.json"
        deadline = time.monotonic() + 1800
        while not (status.exists() and json.loads(status.read_text()).get("state") == "following"):
            if follow.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"follow mode did not start (see {work / 'follow.log'})")
            time.sleep(1)
        rec.put("follow_startup_s", time.perf_counter() - launched)
        rec.put("load_following", load_average())
        say(f"{args.clients} clients register {client_subs} subscriptions through the API")
        started = time.perf_counter()
        registered = asyncio.run(_register(port, client_tokens, specs, args.subs_per_client))
        rec.put("register_s", time.perf_counter() - started)
        last_reg = max(registered.values())
        while (last_processed(lake) or 0) < last_reg:
            time.sleep(0.2)
        say(f"registered at t={min(registered.values())}..{last_reg}; the run")
        run, received = asyncio.run(_run(args, port, admin, client_tokens, specs, registered, stream_rows, ramp,
                                         serve.pid, follow.pid))
        rec.put("run", run)
    finally:
        stop(follow)
        stop(serve)
    rec.put("load_after", load_average())
    say("exactness: the streams against the journal and the oracle")
    rec.put("exactness", verify(lake, run, received, specs, registered))
    return rec.data


async def _service_metrics(port: int, token: str) -> dict[str, float]:
    """The service's own account of its publishing and fan-out (sums and counts from /metrics)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET /metrics HTTP/1.1\r\nHost: b\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
                 .encode())
    text = (await reader.read()).decode(errors="replace")
    writer.close()
    wanted = ("dkm_publish_seconds", "dkm_publish_append_seconds", "dkm_publish_append_requests",
              "dkm_event_delay_seconds", "dkm_fanout_seconds")
    out = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name.endswith(("_sum", "_count")) and name.rsplit("_", 1)[0] in wanted:
            out[name] = float(value)
    return out


async def _idle_streams(port: int, token: str, pid: int, n: int) -> dict[str, float]:
    """Step 1 (module doc): the service's RSS per idle stream."""
    await asyncio.sleep(1.0)
    before = rss(pid)
    conns = []
    for i in range(0, n, 200):
        conns += await asyncio.gather(*(_open_idle(port, token) for _ in range(min(200, n - i))))
    await asyncio.sleep(2.0)
    after = rss(pid)
    for w in conns:
        w.close()
    await asyncio.sleep(1.0)
    return {"streams": n, "rss_before_mib": before / 2**20, "rss_after_mib": after / 2**20,
            "kib_per_stream": (after - before) / n / 1024}


async def _open_idle(port: int, token: str) -> asyncio.StreamWriter:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET /v1/events HTTP/1.1\r\nHost: b\r\nAuthorization: Bearer {token}\r\n\r\n".encode())
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    if b" 200 " not in head.split(b"\r\n", 1)[0]:
        raise RuntimeError(head.decode(errors="replace"))
    return writer


async def _run(args: argparse.Namespace, port: int, admin: str, tokens: list[str], specs: list[dict[str, Any]],
               registered: dict[int, int], rows: dict[int, tuple[list, list]], ramp: list[int], serve_pid: int,
               follow_pid: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Steps 3 and 4 (module doc): the measurements, and what each client's stream received."""
    rng = random.Random(62)
    per = args.subs_per_client
    first_t = min(registered.values())
    streams = [Stream(f"client-{i:05d}", tokens[i], [s["id"] for s in specs[i * per:(i + 1) * per]],
                      str(first_t - 1)) for i in range(args.clients)]
    stop_event = asyncio.Event()
    for s in streams:
        s.task = asyncio.create_task(follow_stream(port, s, stop_event))
    deadline = time.monotonic() + 300
    while not all(s.connected_at for s in streams):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{sum(not s.connected_at for s in streams)} streams did not open: "
                               f"{next(s.error for s in streams if not s.connected_at)}")
        await asyncio.sleep(0.2)
    rss_streams = rss(serve_pid)
    say(f"{len(streams)} streams open; the service holds {rss_streams / 2**20:.0f} MiB")
    published: list[dict[str, Any]] = []
    extra: list[Stream] = []
    next_t = iter(range(1, len(rows) + 1))
    cut_at = {i: time.monotonic() + rng.uniform(5, max(6.0, args.seconds - 5))
              for i in rng.sample(range(len(streams)), int(len(streams) * args.reconnect))}

    in_flight: list[asyncio.Task[None]] = []

    async def publish_one(t: int, phase: str) -> None:
        outcome = await _publish_one(port, admin, rows[t][0], rows[t][1])
        outcome.update(phase=phase, workload_t=t, streams=len(streams) + len(extra))
        published.append(outcome)

    async def publish_for(seconds: float, phase: str) -> None:
        """One timestamp's requests every second, each second's sent whether or not the last
        second's are answered (a publisher that keeps its cadence)."""
        begin = time.monotonic()
        tick = 0
        while time.monotonic() - begin < seconds:
            await asyncio.sleep(max(0.0, begin + tick - time.monotonic()))
            in_flight.append(asyncio.create_task(publish_one(next(next_t), phase)))
            tick += 1
            now = time.monotonic()
            for i, when in list(cut_at.items()):
                writer = streams[i].writer
                if now >= when and writer is not None:
                    writer.transport.abort()  # a dropped connection; the client resumes
                    del cut_at[i]
        await asyncio.gather(*in_flight)
        published.sort(key=lambda p: p["t"])

    cpu0, wall0, follow_cpu0 = cpu_seconds(serve_pid), time.monotonic(), cpu_seconds(follow_pid)
    await publish_for(args.seconds, "run")
    cpu1, wall1, follow_cpu1 = cpu_seconds(serve_pid), time.monotonic(), cpu_seconds(follow_pid)
    rss_run = rss(serve_pid)
    steps: list[dict[str, Any]] = [{"streams": len(streams),
                                    "published": len([p for p in published if p["phase"] == "run"])}]
    for target in ramp:
        say(f"ramp: {target} streams")
        while len(streams) + len(extra) < target:
            base = streams[len(extra) % len(streams)]
            s = Stream(f"{base.name}+{len(extra)}", base.token, base.subs, str(max(p["t"] for p in published)))
            s.task = asyncio.create_task(follow_stream(port, s, stop_event))
            extra.append(s)
        wait = time.monotonic() + 300
        while not all(s.connected_at for s in extra) and time.monotonic() < wait:
            await asyncio.sleep(0.2)
        phase = f"ramp-{target}"
        c0, w0 = cpu_seconds(serve_pid), time.monotonic()
        await publish_for(args.ramp_seconds, phase)
        everyone = streams + extra
        steps.append({"streams": len(everyone), "phase": phase, "members": len(everyone),
                      "connected": sum(bool(s.connected_at) for s in everyone), "rss_mib": rss(serve_pid) / 2**20,
                      "cpu_cores": (cpu_seconds(serve_pid) - c0) / (time.monotonic() - w0)})
        say(f"  {steps[-1]['rss_mib']:.0f} MiB, {steps[-1]['cpu_cores']:.2f} cores")
    last = max(p["t"] for p in published)
    wait = time.monotonic() + 120
    while time.monotonic() < wait and not all(any(t >= last for t in s.processed) for s in streams + extra):
        await asyncio.sleep(0.2)
    stop_event.set()
    for s in streams + extra:
        if s.writer is not None:
            s.writer.close()
        if s.task is not None:
            s.task.cancel()
    await asyncio.gather(*(s.task for s in streams + extra if s.task is not None), return_exceptions=True)
    for step in steps[1:]:  # now that every commit has reached every stream that follows on
        everyone = (streams + extra)[:step.pop("members")]
        lat = _delivery(everyone, [p for p in published if p["phase"] == step["phase"]][2:])  # 2 to settle
        step.update({"p50": median(lat), "p95": percentile(lat, 0.95), "p99": percentile(lat, 0.99),
                     "samples": len(lat)})
    metrics = await _service_metrics(port, admin)
    main = [p for p in published if p["phase"] == "run"]
    lat = _delivery(streams, main[2:])
    steps[0].update({"p50": median(lat), "p95": percentile(lat, 0.95), "p99": percentile(lat, 0.99),
                     "samples": len(lat), "rss_mib": rss_run / 2**20, "cpu_cores": (cpu1 - cpu0) / (wall1 - wall0)})
    received = {s.name: {"subs": s.subs, "changes": [(i, d.decode()) for i, d in s.changes]} for s in streams}
    return {
        "streams": len(streams), "rss_with_streams_mib": rss_streams / 2**20, "rss_run_mib": rss_run / 2**20,
        "serve_cpu_cores": (cpu1 - cpu0) / (wall1 - wall0),
        "follow_cpu_cores": (follow_cpu1 - follow_cpu0) / (wall1 - wall0),
        "published": [{k: v for k, v in p.items() if k != "answered"} for p in published],
        "delivery": {"p50": median(lat), "p95": percentile(lat, 0.95), "p99": percentile(lat, 0.99),
                     "samples": len(lat), "max": max(lat) if lat else float("nan")},
        "reconnects": sum(s.reconnects for s in streams), "last_t": last,
        "steps": steps, "service_metrics": metrics,
        "incomplete": [s.name for s in streams if not any(t >= last for t in s.processed)],
    }, received


# --------------------------------------------------------------------------- exactness
def verify(lake: Any, run: dict[str, Any], received: dict[str, Any], specs: list[dict[str, Any]],
           registered: dict[int, int]) -> dict[str, Any]:
    """Step 5 (module doc): lost, repeated and wrong changes."""
    from dkmsks.core.model import KeywordSets, Objects, Subscriptions, Vocabulary
    from dkmsks.core.oracle import brute_force_knn
    from dkmsks.storage import tables
    from dkmsks.storage.lake import where

    last = int(run["last_t"])
    first = min(registered.values())
    followed = sorted(registered)
    journal = lake.read(tables.JOURNAL, columns=["t", "sub_id", "change", "object_ids", "d2"],
                        predicate=where(record__eq="change", t__ge=first, t__le=last), sub_ids=followed)
    truth: dict[str, tuple[int, list[int]]] = {}
    order = {"delete": 0, "insert": 1, "update": 2}
    for r in journal.to_pylist():
        truth[f"{r['t']}:{order[r['change']]}:{r['sub_id']}"] = (int(r["sub_id"]), list(r["object_ids"] or []))
    lost = repeated = 0
    streams_with_loss = 0
    results: dict[int, dict[int, list[int]]] = {}  # sub -> t -> object ids after the stream's changes of t
    for got in received.values():
        ids = [i for i, _ in got["changes"]]
        repeated += len(ids) - len(set(ids))
        mine = {k for k, (sid, _) in truth.items() if sid in set(got["subs"])}
        missing = mine - set(ids)
        lost += len(missing)
        streams_with_loss += bool(missing)
        for _, data in got["changes"]:
            change = json.loads(data)
            results.setdefault(change["sub_id"], {})[change["t"]] = change["object_ids"]
    # The oracle: each subscription's exact kNN at every t in [t_r, last], from the landed objects.
    objects = lake.read(tables.OBJECTS, columns=["id", "x", "y", "keywords", "t"], predicate=where(t__ge=first,
                                                                                                     t__le=last))
    ox = np.asarray(objects.column("x").to_numpy(), dtype=np.float64)
    oy = np.asarray(objects.column("y").to_numpy(), dtype=np.float64)
    oid = np.asarray(objects.column("id").to_numpy(), dtype=np.int64)
    ot = np.asarray(objects.column("t").to_numpy(), dtype=np.int64)
    postings: dict[str, list[int]] = {}
    for r, kws in enumerate(objects.column("keywords").to_pylist()):
        for w in kws or ():
            postings.setdefault(w, []).append(r)
    wrong = checked = 0
    by_id = {s["id"]: s for s in specs}
    final: dict[int, list[int]] = {}
    for sid in followed:
        spec, t_r = by_id[sid], registered[sid]
        cand = np.unique(np.concatenate([np.asarray(postings.get(w, []), dtype=np.int64) for w in spec["keywords"]]
                                        + [np.zeros(0, dtype=np.int64)]))
        cand = cand[ot[cand] >= t_r]
        cand = cand[np.argsort(ot[cand], kind="stable")]
        d2 = (ox[cand] - spec["x"]) ** 2 + (oy[cand] - spec["y"]) ** 2
        ends = np.searchsorted(ot[cand], np.arange(t_r, last + 1), side="right")
        seen = results.get(sid, {})
        top = np.zeros(0, dtype=np.int64)  # positions in cand of the current kNN
        replayed: list[int] | None = None
        start = 0
        for t, end in zip(range(t_r, last + 1), ends.tolist(), strict=True):
            if end > start:  # the objects of t join: the k nearest of the old kNN and them, by (d², id)
                pool = np.concatenate([top, np.arange(start, end)])
                top = pool[np.lexsort((oid[cand[pool]], d2[pool]))[: spec["k"]]]
                start = end
            if t in seen:
                replayed = seen[t]
            checked += 1
            wrong += (replayed or []) != oid[cand[top]].tolist()
        final[sid] = oid[cand[top]].tolist()
    # The incremental oracle against the brute-force one at the last timestamp.
    vocab = Vocabulary()
    kw = KeywordSets.from_lists([[vocab.id_of(w) for w in (k or [])] for k in objects.column("keywords").to_pylist()])
    objs = Objects(oid, ox, oy, kw, ot)
    subs = Subscriptions(np.array(followed, dtype=np.int64), np.array([by_id[s]["x"] for s in followed]),
                         np.array([by_id[s]["y"] for s in followed]),
                         KeywordSets.from_lists([[vocab.id_of(w) for w in by_id[s]["keywords"]] for s in followed]),
                         np.array([by_id[s]["k"] for s in followed], dtype=np.int32),
                         np.array([registered[s] for s in followed], dtype=np.int64))
    brute = brute_force_knn(objs, subs, last)
    oracle_agrees = all(brute[s].object_ids.tolist() == final[s] for s in followed)
    return {"journal_changes": len(truth), "received_changes": sum(len(g["changes"]) for g in received.values()),
            "lost": lost, "repeated": repeated, "streams_with_loss": streams_with_loss, "wrong": wrong,
            "checked": checked, "oracle_agrees": oracle_agrees, "incomplete_streams": len(run["incomplete"])}


# --------------------------------------------------------------------------- the report
def summary(d: dict[str, Any]) -> dict[str, Any]:
    """The headline numbers."""
    steps, run = d["steps"], d["steps"]["run"]
    main = [p for p in run["published"] if p["phase"] == "run"]
    obj = [p["objects_s"] for p in main]
    subs = [s for p in main for s in p["subscribe_s"]]
    unsubs = [s for p in main for s in p["unsubscribe_s"]]
    base = run["steps"][0]["p99"]
    doubled = next((s["streams"] for s in run["steps"][1:] if s["p99"] >= 2 * base), None)
    return {"publish_p50": median(obj), "publish_p95": percentile(obj, 0.95), "publish_p99": percentile(obj, 0.99),
            "subscribe_p50": median(subs), "subscribe_p99": percentile(subs, 0.99),
            "unsubscribe_p50": median(unsubs), "unsubscribe_p99": percentile(unsubs, 0.99),
            "by_status": ", ".join(f"{n} {op} answered {st}" for (op, st), n in sorted(Counter(
                (op, st) for p in main for op, st in p["refused"]).items())),
            "refused": sum(len(p["refused"]) for p in main),
            "events": sum(len(p["subscribe_s"]) + len(p["unsubscribe_s"]) + len(p["refused"]) for p in main),
            "delivery_p50": run["delivery"]["p50"], "delivery_p95": run["delivery"]["p95"],
            "delivery_p99": run["delivery"]["p99"], "samples": run["delivery"]["samples"],
            "kib_per_stream": steps["idle"]["kib_per_stream"], "streams": run["streams"], "doubled": doubled,
            "max_streams": max(s["streams"] for s in run["steps"]), "timestamps": len(main)}


def report(d: dict[str, Any]) -> str:
    """The Markdown report of a measurement, each target met or not."""
    s, p, st = summary(d), d["params"], d["steps"]
    run, ex = st["run"], st["exactness"]
    exact = ex["lost"] == 0 and ex["repeated"] == 0 and ex["wrong"] == 0 and ex["oracle_agrees"]
    met = {"publish": s["publish_p50"] <= TARGETS["publish_p50"],
           "delivery": s["delivery_p50"] <= TARGETS["delivery_p50"] and s["delivery_p99"] <= TARGETS["delivery_p99"],
           "streams": s["streams"] >= TARGETS["streams"], "memory": s["kib_per_stream"] <= TARGETS["kib_per_stream"]}
    ramp = "\n".join(["| streams | p50 (s) | p95 (s) | p99 (s) | samples | service RSS (MiB) | service CPU (cores) |",
                      "|---:|---:|---:|---:|---:|---:|---:|",
                      *(f"| {r['streams']:,} | {r['p50']:.3f} | {r['p95']:.3f} | {r['p99']:.3f} | {r['samples']:,} | "
                        f"{r['rss_mib']:.0f} | {r['cpu_cores']:.2f} |" for r in run["steps"])])
    return "\n\n".join([
        prose("head", title=TITLE, commit=d["commit"], date=d["date"], machine=d["machine"].get("cpu", ""),
              load_before=f"{st['load_before']:.1f}", load_following=f"{st.get('load_following', float('nan')):.1f}",
              load_after=f"{st['load_after']:.1f}", o_init=f"{p['o_init']:,}", subs=f"{p['subscriptions']:,}",
              m=p["workers"], clients=f"{p['clients']:,}", per=p["subs_per_client"], seconds=p["seconds"],
              reconnect=f"{p['reconnect']:.0%}", poll=f"{p['poll']:g}", timestamps=s["timestamps"],
              follow_s=f"{st['follow_startup_s']:.0f}", register_s=f"{st['register_s']:.1f}",
              registrations=f"{p['clients'] * p['subs_per_client']:,}"),
        "\n".join([
            "| measure | p50 | p95 | p99 | target | |", "|---|---:|---:|---:|---|---|",
            f"| POST of 1,000 objects (ms) | {s['publish_p50'] * 1e3:.0f} | {s['publish_p95'] * 1e3:.0f} | "
            f"{s['publish_p99'] * 1e3:.0f} | ≤ 50 p50 | {prose.status(met['publish'])} |",
            f"| POST /v1/subscriptions (ms) | {s['subscribe_p50'] * 1e3:.0f} | | {s['subscribe_p99'] * 1e3:.0f} | | |",
            f"| DELETE /v1/subscriptions/{{id}} (ms) | {s['unsubscribe_p50'] * 1e3:.0f} | | "
            f"{s['unsubscribe_p99'] * 1e3:.0f} | | |",
            f"| delivery, publish answer to event ({s['samples']:,} samples, s) | {s['delivery_p50']:.3f} | "
            f"{s['delivery_p95']:.3f} | {s['delivery_p99']:.3f} | ≤ 0.5 p50, ≤ 1 p99 | "
            f"{prose.status(met['delivery'])} |",
            f"| service memory per idle stream ({st['idle']['streams']:,} open, KiB) | {s['kib_per_stream']:.1f} | | | "
            f"≤ 64 | {prose.status(met['memory'])} |",
            f"| concurrent streams followed | {s['streams']:,} | | | ≥ 1,000 | {prose.status(met['streams'])} |"]),
        prose("exact" if exact else "inexact", received=f"{ex['received_changes']:,}",
              journal=f"{ex['journal_changes']:,}",
              lost=ex["lost"], repeated=ex["repeated"], wrong=ex["wrong"], checked=f"{ex['checked']:,}",
              reconnects=run["reconnects"], oracle="agrees" if ex["oracle_agrees"] else "DISAGREES",
              incomplete=ex["incomplete_streams"]),
        prose("resources", serve_cpu=f"{run['serve_cpu_cores']:.2f}", follow_cpu=f"{run['follow_cpu_cores']:.2f}",
              append_ms=_mean_ms(run, "dkm_publish_append_seconds"), request_ms=_mean_ms(run, "dkm_publish_seconds"),
              per_append=f"{_ratio(run, 'dkm_publish_append_requests_sum', 'dkm_publish_append_requests_count'):.1f}",
              event_delay_ms=_mean_ms(run, "dkm_event_delay_seconds"),
              rss_streams=f"{run['rss_with_streams_mib']:.0f}", rss_run=f"{run['rss_run_mib']:.0f}",
              refused=s["refused"], events=f"{s['events']:,}", by_status=s["by_status"] or "none"),
        prose("ramp.doubled" if s["doubled"] else "ramp.held", doubled=f"{s['doubled'] or 0:,}",
              max_streams=f"{s['max_streams']:,}", base=f"{run['steps'][0]['p99']:.3f}",
              ramp_seconds=p["ramp_seconds"]),
        ramp,
    ])


def _ratio(run: dict[str, Any], a: str, b: str) -> float:
    m = run.get("service_metrics", {})
    return m.get(a, float("nan")) / m[b] if m.get(b) else float("nan")


def _mean_ms(run: dict[str, Any], name: str) -> str:
    return f"{_ratio(run, name + '_sum', name + '_count') * 1e3:.0f}"


def main(argv: Sequence[str] | None = None) -> int:
    """``dkm bench serve``; the exit status."""
    p = argparse.ArgumentParser(prog="dkm bench serve", description=__doc__.splitlines()[0])
    add_workload_flags(p, o_init=1_000_000, subscriptions=1_000_000, timestamps=400, seed=7, workers=20,
                       helps={"timestamps": "the workload's timestamps: the publisher's, then the clients' "
                                            "subscriptions are drawn from the insertions after them"})
    p.add_argument("--clients", type=int, default=1000, help="clients, each a principal with a stream (%(default)s)")
    p.add_argument("--subs-per-client", type=int, default=10, help="subscriptions each client follows (%(default)s)")
    p.add_argument("--seconds", type=int, default=120, help="seconds of publishing, one timestamp each (%(default)s)")
    p.add_argument("--reconnect", type=float, default=0.1,
                   help="share of the streams cut once during the run and resumed (%(default)s)")
    p.add_argument("--ramp", default="2000,4000,8000,16000",
                   help="then this many streams in all, step by step (default %(default)s; '' for none)")
    p.add_argument("--ramp-seconds", type=int, default=30, help="seconds of publishing at each step (%(default)s)")
    p.add_argument("--idle-streams", type=int, default=1000, help="idle streams for the memory step (%(default)s)")
    p.add_argument("--poll", type=float, default=0.1, help="follow mode's and the service's poll (%(default)s)")
    p.add_argument("--workdir", type=Path, default=REPO / ".cache" / "bench" / "serve")
    p.add_argument("--keep", action="store_true",
                   help="reuse the workdir's workload and initial phase (warehouse-t0) of an earlier run")
    p.add_argument("--report-only", type=Path, default=None, help="render an earlier results.json")
    add_quick_flag(p, "20k/20k, m = 4, 100 clients, 20 s, ramp to 400 streams", o_init=20_000,
                   subscriptions=20_000, timestamps=60, workers=4, clients=100, seconds=20, ramp="200,400",
                   ramp_seconds=8, idle_streams=200)
    add_doc_flags(p)
    return bench_main(p, argv, run)


def run(args: argparse.Namespace) -> Report:
    """Measure (or reread a ``results.json``); the report for the docs."""
    data = json.loads(args.report_only.read_text()) if args.report_only else measure(args)
    return Report("dkm bench serve", report(data))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
