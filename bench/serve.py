"""dkm serve's delivery, measured: publish latency through the API, events delivered per second
to many concurrent streams, and the service's memory per idle stream.

    .venv/bin/python bench/serve.py [--streams 1000] [--objects 1000]

A warehouse in miniature is made from the real data (tests/live_pipeline.py: O_init, the
initial subscriptions with their exact kNN, rounds applied by the in-memory engine and
committed to the journal as runs commit), ``dkm serve`` runs in a process of its own on
127.0.0.1, and the clients are asyncio sockets in this one (no HTTP library per stream, so
a thousand of them fit beside the server on two cores):

1. ``--streams`` idle event streams opened on the fresh server: its RSS before and after, per stream;
2. a round of the stream's first timestamp committed with every stream open (unfiltered, admin):
   change frames delivered to all streams per second, from the commit to the last stream's
   ``processed`` event;
3. one POST of ``--objects`` objects, then ``--objects`` concurrent POSTs of one object each
   (latency per request, and how many Delta commits the publisher made of them).

Prints one line per measurement with the machine's load; nothing is written to docs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "lib"), str(REPO / "tests")]

import httpx  # noqa: E402

from dkmsks.core.workload import WorkloadSpec  # noqa: E402


def rss(pid: int) -> int:
    """Resident set size of ``pid`` in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


async def open_stream(port: int, token: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """An event stream of the admin's, its response headers read."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET /v1/events HTTP/1.1\r\nHost: b\r\nAuthorization: Bearer {token}\r\n\r\n".encode())
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    assert b" 200 " in head.split(b"\r\n")[0], head
    return reader, writer


async def count_until(reader: asyncio.StreamReader, marker: bytes) -> int:
    """Change frames read until a ``processed`` frame whose data holds ``marker``."""
    changes = 0
    while True:
        line = await reader.readline()
        if not line:
            return changes
        if line.startswith(b"event: change"):
            changes += 1
        elif line.startswith(b"data: ") and marker in line:
            return changes


async def streams_phase(port: int, token: str, pid: int, n: int, commit, t: int) -> None:
    """Measurements 2 and 3 (module doc)."""
    await asyncio.sleep(1.0)
    before = rss(pid)
    conns = []
    for i in range(0, n, 100):
        conns += await asyncio.gather(*(open_stream(port, token) for _ in range(min(100, n - i))))
    await asyncio.sleep(2.0)
    after = rss(pid)
    print(f"idle streams: {n}, server RSS {before / 2**20:.1f} -> {after / 2**20:.1f} MiB, "
          f"{(after - before) / n / 1024:.1f} KiB per stream")
    marker = f'"t":{t}}}'.encode()
    waits = [asyncio.create_task(count_until(r, marker)) for r, _ in conns]
    started = time.perf_counter()
    changes_committed = await asyncio.to_thread(commit)
    counts = await asyncio.gather(*waits)
    elapsed = time.perf_counter() - started
    total = sum(counts)
    print(f"one round ({changes_committed} changes) to {n} streams: {total:,} change frames in {elapsed:.2f} s "
          f"(commit and tailer's poll included) = {total / elapsed:,.0f} frames/s; every stream got "
          f"{min(counts)}..{max(counts)}")
    for _, w in conns:
        w.close()


def main(argv: list[str] | None = None) -> int:
    """Run the measurements (module doc)."""
    from dkmsks.client import Client
    from dkmsks.service.auth import Scope, TokenStore
    from live_pipeline import live_pipeline, workload

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--streams", type=int, default=1000)
    p.add_argument("--objects", type=int, default=1000)
    p.add_argument("--streams-only", action="store_true", help="stop after the streams' measurements")
    args = p.parse_args(argv)
    spec = WorkloadSpec(o_init=5000, subscriptions=3000, timestamps=4, objects_per_ts=args.objects,
                        inserts_per_ts=20, deletes_per_ts=10, k_max=8, seed=64)
    work = workload(spec)
    folder = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    pipeline = live_pipeline(folder / "wh", work)
    store = TokenStore(pipeline.warehouse.run_dir / "tokens.json")
    admin = store.create("bench", [Scope.ADMIN])[1]
    with socket_port() as port:
        pass
    proc = subprocess.Popen([sys.executable, "-m", "dkmsks.cli", "serve", "--warehouse", str(pipeline.warehouse.root),
                             "--port", str(port), "--rate", "1000000", "--burst", "1000000", "--log-level", "warning",
                             "--poll", "0.1"], env={**os.environ, "PYTHONPATH": str(REPO / "lib")})
    url = f"http://127.0.0.1:{port}"
    h = {"Authorization": f"Bearer {admin}"}
    try:
        for _ in range(300):
            try:
                if httpx.get(url + "/healthz", timeout=2).json()["events"]:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
        # 1 and 2. Streams, on a server that has served nothing else yet (the memory the
        # publishing's connections leave free would be reused by the streams and hide their cost).
        Client(pipeline.warehouse).publish(work.objects_at(1), work.events_at(1))

        def commit() -> int:
            pipeline.round()
            return len(list(Client(pipeline.warehouse).watch(from_t=0, until=1, follow=False)))

        asyncio.run(streams_phase(port, admin, proc.pid, args.streams, commit, 1))
        if args.streams_only:
            return 0
        # 3. Publishing.
        rows = work.objects_at(2)
        with httpx.Client(base_url=url, headers=h, timeout=120) as c:
            c.post("/v1/objects", json=[{**rows[0], "id": 10**15}])  # warm the publisher's tables
            started = time.perf_counter()
            r = c.post("/v1/objects", json=rows)
            one = time.perf_counter() - started
            assert r.status_code == 202, r.text
        print(f"one POST of {len(rows)} objects: {one * 1e3:.0f} ms")
        singles = [dict(o, id=o["id"] + 10**12) for o in work.objects_at(2)]
        for o in singles:
            o.pop("t")
        before = pipeline.lake.version("objects")
        latencies = asyncio.run(concurrent_posts(url, h, singles))
        commits = pipeline.lake.version("objects") - before
        q = statistics.quantiles(latencies, n=100)
        print(f"{len(singles)} concurrent POSTs of one object: median {statistics.median(latencies) * 1e3:.0f} ms, "
              f"p99 {q[98] * 1e3:.0f} ms, all done in {max(latencies) * 1e3:.0f} ms, {commits} Delta commits")
        text = httpx.get(url + "/metrics", headers=h).text
        m = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
             if line.startswith(("dkm_publish_append_seconds_sum", "dkm_publish_append_seconds_count",
                                 "dkm_publish_append_requests_sum", "dkm_publish_seconds_sum",
                                 "dkm_publish_seconds_count"))}
        print(f"  appends: {m['dkm_publish_append_seconds_count']:.0f}, mean "
              f"{m['dkm_publish_append_seconds_sum'] / m['dkm_publish_append_seconds_count'] * 1e3:.0f} ms, "
              f"{m['dkm_publish_append_requests_sum'] / m['dkm_publish_append_seconds_count']:.1f} requests each")
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(30)
        shutil.rmtree(folder, ignore_errors=True)
    return 0


async def concurrent_posts(url: str, headers: dict, rows: list[dict]) -> list[float]:
    """Each row POSTed at once on a connection of its own, by a minimal HTTP/1.1 client over
    asyncio sockets (httpx's pool scans its connections per request: at a thousand concurrent
    requests the client, not the server, took most of the time); each request's latency."""
    import json

    port = int(url.rsplit(":", 1)[1])
    auth = headers["Authorization"]

    async def one(row: dict) -> float:
        body = json.dumps(row).encode()
        started = time.perf_counter()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"POST /v1/objects HTTP/1.1\r\nHost: b\r\nAuthorization: {auth}\r\nContent-Type: "
                     f"application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        await writer.drain()
        answer = await reader.read()
        elapsed = time.perf_counter() - started
        writer.close()
        assert b" 202 " in answer.split(b"\r\n", 1)[0], answer[:300]
        return elapsed

    return list(await asyncio.gather(*(one(r) for r in rows)))


class socket_port:
    """A free port of 127.0.0.1."""

    def __enter__(self) -> int:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        return None


if __name__ == "__main__":
    sys.exit(main())
