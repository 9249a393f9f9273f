"""dkm serve's event streams on a live warehouse in miniature: every change as its timestamp
commits, results rebuilt from a stream equal to the oracle at every timestamp; resuming with
Last-Event-ID after connections dropped at random points while rounds go on (from the ring and
from the journal) repeats and loses nothing; an id beyond the as-of horizon, malformed or from
the future gets a reset with the current results; a client that never reads is cut off and
slows nobody; heartbeats."""

from __future__ import annotations

import json
import random
import socket
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pyarrow as pa
import pytest

from dkmsks.client import Client
from dkmsks.core.workload import WorkloadSpec
from dkmsks.storage import tables
from live_pipeline import live_pipeline, workload
from service_harness import Listener, read_events, running_service

# Event streams over real sockets and a live pipeline: seconds a test.
pytestmark = [pytest.mark.slow, pytest.mark.realdata]
T = 5


@pytest.fixture(scope="module")
def work():
    return workload()


@pytest.fixture
def pipeline(tmp_path, work):
    return live_pipeline(tmp_path / "wh", work)


def land(pipeline, work, t, *, via=None):
    """The stream's timestamp ``t``: objects through the API (``via``) or the client, events from "files"."""
    if via is not None:
        assert via.post("/v1/objects", json=work.objects_at(t)).status_code == 202
    else:
        Client(pipeline.warehouse).publish(work.objects_at(t))
    Client(pipeline.warehouse).publish(events=work.events_at(t))


def changes(events):
    return [(e.id, e.data) for e in events if e.event == "change"]


def rebuild(start: dict, events) -> dict[int, tuple[list[int], list[float]]]:
    """Results after applying change events to ``start``."""
    state = dict(start)
    for e in events:
        if e.event != "change":
            continue
        d = e.data
        if d["change"] == "delete":
            state.pop(d["sub_id"], None)
        else:
            state[d["sub_id"]] = (d["object_ids"], d["distances"])
    return state


def results_of(oracle) -> dict[int, tuple[list[int], list[float]]]:
    return {sid: (r.object_ids.tolist(), r.distances.tolist()) for sid, r in oracle.items()}


def test_streams_carry_every_change_in_order_and_rebuild_the_oracle(pipeline, work):
    with running_service(pipeline.warehouse) as svc:
        alice = svc.client("alice")
        o = work.objects_at(2)[0]
        sid = alice.post("/v1/subscriptions", json={"x": o["x"], "y": o["y"], "keywords": o["keywords"][:1],
                                                    "k": 2}).json()["id"]
        everything, mine, listed = Listener(svc), Listener(svc, "alice"), Listener(svc, "alice", params={"sub": sid})
        for listener in (everything, mine, listed):
            listener.wait_for(lambda events: True)
        time.sleep(0.2)  # attached before the first round
        state = results_of(pipeline.oracle(0))
        for t in range(1, T + 1):
            land(pipeline, work, t, via=alice)
            assert pipeline.round() == [t]
            everything.wait_processed(t)
            upto = [e for e in everything.events if e.id is not None and int(e.id.split(":")[0]) <= t]
            assert rebuild(state, upto) == results_of(pipeline.oracle(t)), t
        mine.wait_processed(T)
        listed.wait_processed(T)
        # The same changes as Client.watch reads, in its order, with ids in stream order.
        expected = list(Client(pipeline.warehouse).watch(from_t=0, until=T, follow=False))
        got = changes(everything.events)
        assert [(d["t"], d["sub_id"], d["change"], tuple(d["object_ids"]), tuple(d["distances"])) for _, d in got] == \
            [(c.t, c.sub_id, c.change, c.object_ids, c.distances) for c in expected]
        keys = [tuple(int(p) for p in i.split(":")) for i, _ in got]
        assert keys == sorted(keys) and len(set(keys)) == len(keys)
        assert [e.data["t"] for e in everything.events if e.event == "processed"] == list(range(1, T + 1))
        # alice's streams: only her subscription's changes, its results the oracle's.
        assert {d["sub_id"] for _, d in changes(mine.events)} == {sid}
        assert changes(mine.events) == changes(listed.events)
        final = pipeline.oracle(T)[sid]
        assert rebuild({}, mine.events)[sid] == (final.object_ids.tolist(), final.distances.tolist())
        for listener in (everything, mine, listed):
            listener.close()


@pytest.mark.parametrize("ring", [100_000, 7])  # from the ring; mostly from the journal
def test_resume_after_drops_at_random_points_repeats_and_loses_nothing(pipeline, work, ring):
    rng = random.Random(ring)
    with running_service(pipeline.warehouse, ring=ring) as svc:
        rounds_done = threading.Event()

        def rounds():
            for t in range(1, T + 1):
                land(pipeline, work, t)
                pipeline.round()
                time.sleep(rng.uniform(0.05, 0.3))
            rounds_done.set()

        received, last, connections = [], "0", 0
        runner = threading.Thread(target=rounds)
        runner.start()
        while True:
            listener = Listener(svc, last_event_id=last)
            want = rng.randint(1, 12)
            connections += 1
            try:
                listener.wait_for(lambda events, n=want: len(events) >= n
                                  or (rounds_done.is_set() and any(e.event == "processed" and e.data["t"] == T
                                                                   for e in events)), timeout=30)
            finally:
                listener.close()
            got = list(listener.events)
            assert all(e.event != "reset" for e in got)
            received += got
            ids = [e.id for e in got if e.id is not None]
            if ids:
                last = ids[-1]
            if any(e.event == "processed" and e.data["t"] == T for e in got):
                break
        runner.join()
        expected = [(c.t, c.sub_id, c.change, c.object_ids) for c in
                    Client(pipeline.warehouse).watch(from_t=0, until=T, follow=False)]
        assert [(d["t"], d["sub_id"], d["change"], tuple(d["object_ids"])) for _, d in changes(received)] == expected
        assert connections > 3
        if ring < 100:
            assert svc.service.metrics.replays._value.get() > 0


def compact_and_vacuum(pipeline, through: int) -> None:
    """A new knn_state content exact at ``through`` (as a compaction commits it) and the older
    content's files removed (as VACUUM past the horizon does)."""
    from deltalake import CommitProperties, write_deltalake

    from dkmsks.storage.state_io import StateView

    lake = pipeline.lake
    old = set(lake.table(tables.STATE).file_uris())
    view = StateView.open(lake)
    rows = view.read()
    schema = pa.schema(lake.table(tables.STATE).schema().to_arrow())
    from dkmsks.storage.lake import conform

    write_deltalake(lake.table(tables.STATE), conform(rows, schema), mode="overwrite",
                    commit_properties=CommitProperties(custom_metadata={"userMetadata": json.dumps(
                        {"through_t": through})}))
    for uri in old:
        Path(uri.removeprefix("file://")).unlink()


def test_an_id_beyond_the_horizon_malformed_or_from_the_future_gets_a_reset(pipeline, work):
    with running_service(pipeline.warehouse) as svc:
        alice = svc.client("alice")
        o = work.objects_at(1)[0]
        sid = alice.post("/v1/subscriptions", json={"x": o["x"], "y": o["y"], "keywords": o["keywords"],
                                                    "k": 3}).json()["id"]
        for t in range(1, 5):
            land(pipeline, work, t)
            pipeline.round()
        compact_and_vacuum(pipeline, 3)
        hub = svc.service.hub
        hub._horizon_at = 0.0  # re-read at the next poll (every minute otherwise)
        deadline = time.monotonic() + 10
        while hub.horizon != 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert hub.horizon == 3
        oracle = pipeline.oracle(4)
        expected = {"sub_id": sid, "object_ids": oracle[sid].object_ids.tolist(),
                    "distances": oracle[sid].distances.tolist()}
        for last, why in (("1:2:5", "beyond the as-of horizon"), ("garbage", "not an event id"),
                          ("99", "after the last processed timestamp")):
            listener = Listener(svc, "alice", params={"sub": sid}, last_event_id=last)
            listener.wait_for(lambda events: len(events) >= 1)
            reset = listener.events[0]
            assert (reset.event, reset.id, reset.data["t"]) == ("reset", "4", 4)
            assert why in reset.data["reason"]
            assert reset.data["results"] == [expected]
            listener.close()
        # Within the horizon: a replay, no reset.
        listener = Listener(svc, "alice", params={"sub": sid}, last_event_id="3")
        listener.wait_for(lambda events: any(e.event == "processed" for e in events))
        assert [e.event for e in listener.events][-1] == "processed" and "reset" not in \
            [e.event for e in listener.events]
        listener.close()
        # An admin's unfiltered stream is reset without results (export them instead).
        listener = Listener(svc, last_event_id="1")
        listener.wait_for(lambda events: len(events) >= 1)
        assert listener.events[0].event == "reset" and listener.events[0].data["results"] is None
        listener.close()


BUSY = WorkloadSpec(o_init=2000, subscriptions=2500, timestamps=6, objects_per_ts=400, inserts_per_ts=20,
                    deletes_per_ts=10, k_max=8, seed=63)


def test_a_client_that_never_reads_is_cut_off_and_slows_nobody(tmp_path):
    work = workload(BUSY)
    pipeline = live_pipeline(tmp_path / "wh", work)
    with running_service(pipeline.warehouse, stream_buffer=16_384, sndbuf=8192) as svc:
        # The stalled client: a socket with a small receive buffer that sends its request and never reads.
        stalled = socket.socket()
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.connect(("127.0.0.1", int(svc.url.rsplit(":", 1)[1])))
        stalled.sendall(f"GET /v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {svc.tokens['root']}\r\n\r\n"
                        .encode())
        reader = Listener(svc)
        deadline = time.monotonic() + 10
        while len(svc.service.hub.streams) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        for t in range(1, BUSY.timestamps + 1):
            land(pipeline, work, t)
            pipeline.round()
            started = time.monotonic()
            reader.wait_processed(t, timeout=20)
            assert time.monotonic() - started < 10, "a reading client waited on the stalled one"
        dropped = svc.service.metrics.dropped.labels("overflow")._value.get()
        assert dropped == 1, "the stalled client was not cut off"
        assert len(svc.service.hub.streams) == 1
        assert httpx.get(svc.url + "/healthz").json()["ok"]
        # What the stalled client got is a prefix of the stream, then the end of the connection.
        stalled.settimeout(20)
        data = b""
        while chunk := stalled.recv(65536):
            data += chunk
        stalled.close()
        body = data.split(b"\r\n\r\n", 1)[1].decode()
        lines = []
        for line in body.split("\n"):  # chunked transfer: drop the chunk-size lines
            lines.append(line.rstrip("\r"))
        got = [e for e in read_events(iter(lines)) if e.event == "change"]
        expected = [e for e in reader.events if e.event == "change"]
        assert 0 < len(got) < len(expected)
        assert [e.id for e in got] == [e.id for e in expected[:len(got)]] or \
            [e.id for e in got][:-1] == [e.id for e in expected[:len(got) - 1]]  # the last one may be cut
        reader.close()


def test_heartbeats_keep_a_quiet_stream_open(pipeline):
    with running_service(pipeline.warehouse, heartbeat=0.2) as svc, httpx.stream(
            "GET", svc.url + "/v1/events", headers={"Authorization": f"Bearer {svc.tokens['bob']}"}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["cache-control"] == "no-store"
        seen, started = [], time.monotonic()
        for line in r.iter_lines():
            seen.append(line)
            if seen.count(": keep-alive") >= 2:
                break
        assert time.monotonic() - started < 5
        assert seen[0] == "retry: 3000"


def test_not_ready_before_anything_is_processed_and_bad_stream_requests(pipeline):
    with running_service(pipeline.warehouse) as svc:
        bob = svc.client("bob")
        assert bob.get("/v1/events", params={"sub": "abc"}).json()["errors"][0]["field"] == "sub"
        too_many = [("sub", str(i)) for i in range(1001)]
        r = svc.client("root").get("/v1/events", params=too_many)
        assert r.status_code == 422 and r.json()["errors"][0]["field"] == "sub"
        assert svc.client(None).get("/v1/events").status_code == 401
        assert svc.client("feed").get("/v1/events").status_code == 403
        hub = svc.service.hub
        position, hub.position = hub.position, None
        try:
            r = bob.get("/v1/events")
            assert r.status_code == 503 and r.headers["retry-after"] == "5"
        finally:
            hub.position = position


def test_event_ids_parse_and_order():
    from dkmsks.service.events import WHOLE, format_id, parse_id

    assert parse_id("12") == (12, WHOLE, 0) and format_id((12, WHOLE, 0)) == "12"
    assert parse_id("12:1:-5") == (12, 1, -5) and format_id((12, 1, -5)) == "12:1:-5"
    for bad in ("", "x", "1:2", "1:3:4", "1:-1:4", "1:a:2", None):
        assert parse_id(bad) is None
    ids = ["3:2:9", "3", "3:0:100", "2:2:1", "3:1:-4"]
    assert sorted(ids, key=parse_id) == ["2:2:1", "3:0:100", "3:1:-4", "3:2:9", "3"]
    assert np.all(np.diff([parse_id(i)[0] for i in sorted(ids, key=parse_id)]) >= 0)
