"""dkm serve's routes on a live warehouse in miniature (a real-data workload, rounds applied by the
in-memory engine and committed to the journal as runs commit): subscriptions, results and
objects through HTTP equal the oracle over what landed; ownership and scopes; publishes grouped
into few commits; idempotency keys; status, metrics and the vendored docs. The service runs in
this process on 127.0.0.1 (tests/service_harness.py)."""

from __future__ import annotations

import concurrent.futures
import math
import stat

import httpx
import numpy as np
import pytest

from dkmsks.client import Client
from dkmsks.storage import tables
from live_pipeline import live_pipeline, workload
from service_harness import running_service

pytestmark = [pytest.mark.unit, pytest.mark.realdata]


@pytest.fixture(scope="module")
def work():
    return workload()


@pytest.fixture
def pipeline(tmp_path, work):
    return live_pipeline(tmp_path / "wh", work)


@pytest.fixture
def svc(pipeline):
    with running_service(pipeline.warehouse) as running:
        yield running


def versions(pipeline):
    lake = pipeline.lake
    return {name: lake.version(name) for name in (tables.OBJECTS, tables.EVENTS, tables.QUARANTINE)}


def as_result(r):
    return r.object_ids.tolist(), r.distances.tolist()


def test_every_route_through_http_equals_the_oracle_over_what_landed(pipeline, work, svc):
    alice, root = svc.client("alice"), svc.client("root")
    # Two subscriptions of alice's where the stream publishes at t = 1 and 3.
    mine = {}
    for t in (1, 3):
        o = work.objects_at(t)[0]
        if t == 3:
            assert alice.get("/v1/status").json()["next_open"] == 3
        r = alice.post("/v1/subscriptions", json={"x": o["x"], "y": o["y"], "keywords": o["keywords"][:1], "k": 3})
        assert r.status_code == 201 and r.json()["t"] == t
        assert r.headers["location"] == f"/v1/subscriptions/{r.json()['id']}"
        mine[r.json()["id"]] = t
        got = alice.get(f"/v1/subscriptions/{r.json()['id']}").json()
        assert (got["status"], got["t"], got["k"], got["keywords"]) == ("pending", t, 3, o["keywords"][:1])
        # The stream's objects through the API (half without t, landing at the next open one),
        # its subscription events from "files" (the client), then a round.
        objects = work.objects_at(t)
        for row in objects[::2]:
            del row["t"]
        r = alice.post("/v1/objects", json=objects)
        assert r.status_code == 202 and r.json() == {"t": t, "accepted": len(objects), "refused": []}
        Client(pipeline.warehouse).publish(events=work.events_at(t))
        assert pipeline.round() == [t]
        if t == 1:
            Client(pipeline.warehouse).publish(work.objects_at(2), work.events_at(2))
            assert pipeline.round() == [2]
    for t in range(4):
        oracle = pipeline.oracle(t)
        for sid, since in mine.items():
            r = alice.get(f"/v1/subscriptions/{sid}/results", params={"as_of": t})
            if t < since:
                assert r.status_code == 404, r.text
                continue
            assert r.status_code == 200, r.text
            body = r.json()
            assert (body["sub_id"], body["t"]) == (sid, t)
            assert (body["object_ids"], body["distances"]) == as_result(oracle[sid]), (sid, t)
        # A subscription from the files: admin's only.
        sid = min(oracle)
        assert root.get(f"/v1/subscriptions/{sid}/results", params={"as_of": t}).json()["object_ids"] == \
            oracle[sid].object_ids.tolist()
        assert alice.get(f"/v1/subscriptions/{sid}/results").status_code == 404
    # Unsubscribe: lands at the next open timestamp; the result is gone once it is processed.
    sid = next(iter(mine))
    r = alice.delete(f"/v1/subscriptions/{sid}")
    assert r.status_code == 202 and r.json() == {"id": sid, "t": 4}
    again = alice.delete(f"/v1/subscriptions/{sid}")  # DELETE is idempotent: the same deletion, a replay
    assert (again.status_code, again.json()) == (202, r.json())
    assert pipeline.round() == [4]
    assert alice.get(f"/v1/subscriptions/{sid}").status_code == 404
    assert alice.delete(f"/v1/subscriptions/{sid}").status_code == 404
    assert alice.get(f"/v1/subscriptions/{sid}/results", params={"as_of": 3}).status_code == 200
    listed = alice.get("/v1/subscriptions").json()["subscriptions"]
    assert [(s["id"], s["status"]) for s in listed] == [(s, "live") for s in mine if s != sid]


def test_ownership_a_foreign_subscription_is_404_and_admin_sees_and_manages_all(svc, pipeline):
    alice, bob, root = svc.client("alice"), svc.client("bob"), svc.client("root")
    sid = alice.post("/v1/subscriptions", json={"id": 777, "x": 1, "y": 2, "keywords": ["cafe"], "k": 2}).json()["id"]
    assert sid == 777
    for path in (f"/v1/subscriptions/{sid}", f"/v1/subscriptions/{sid}/results"):
        r = bob.get(path)
        assert r.status_code == 404 and r.headers["content-type"] == "application/problem+json"
        assert "777" in r.json()["detail"] and "alice" not in r.text
    assert bob.delete(f"/v1/subscriptions/{sid}").status_code == 404
    assert bob.get("/v1/events", params={"sub": sid}).status_code == 404
    assert bob.get("/v1/subscriptions").json() == {"subscriptions": []}
    assert root.get(f"/v1/subscriptions/{sid}").json()["owner"] == "alice"
    assert alice.get(f"/v1/subscriptions/{sid}").json()["owner"] is None  # only admin is told owners
    # Deleted by admin, and the same id registered again by bob at the same timestamp (deletions
    # apply first, docs/design.md §1): the new registration is bob's, the old one stays alice's.
    assert root.delete(f"/v1/subscriptions/{sid}").status_code == 409  # registered at t = 1, not live there
    pipeline.round()
    assert root.delete(f"/v1/subscriptions/{sid}").json()["t"] == 2
    r = bob.post("/v1/subscriptions", json={"id": sid, "x": 0, "y": 0, "keywords": ["bar"], "k": 1})
    assert (r.status_code, r.json()["t"]) == (201, 2)
    registry = svc.service.registry
    assert (registry.owner_at(sid, 1), registry.owner_at(sid, 2, deletion=True), registry.owner_at(sid, 2)) == \
        ("alice", "alice", "bob")
    assert alice.get(f"/v1/subscriptions/{sid}").status_code == 200  # alice's is live until t = 2 is processed
    pipeline.round()
    assert alice.get(f"/v1/subscriptions/{sid}").status_code == 404
    assert bob.get(f"/v1/subscriptions/{sid}").json()["keywords"] == ["bar"]
    assert alice.get(f"/v1/subscriptions/{sid}/results", params={"as_of": 1}).status_code == 200
    assert bob.get(f"/v1/subscriptions/{sid}/results", params={"as_of": 1}).status_code == 404


def test_scopes_and_tokens(svc, pipeline):
    feed, bob = svc.client("feed"), svc.client("bob")
    body = {"x": 0, "y": 0, "keywords": ["cafe"], "k": 1}
    r = feed.post("/v1/subscriptions", json=body)
    assert r.status_code == 403 and "'subscribe' scope" in r.json()["detail"]
    assert bob.post("/v1/objects", json={"id": 1, "x": 0, "y": 0, "keywords": ["a"]}).status_code == 403
    assert bob.get("/metrics").status_code == 403
    r = svc.client(None).get("/v1/status")
    assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
    for bad in ("Bearer nope", "Bearer " + svc.tokens["bob"][:-1] + "x", "Basic abc", svc.tokens["bob"]):
        assert httpx.get(svc.url + "/v1/status", headers={"Authorization": bad}).status_code == 401
    # Revoked in the file: refused from the next request on, without a restart.
    from dkmsks.service.auth import TokenStore

    store = TokenStore(pipeline.warehouse.run_dir / "tokens.json")
    assert bob.get("/v1/status").status_code == 200
    store.revoke("bob")
    assert bob.get("/v1/status").status_code == 401
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    text = store.path.read_text()
    assert all(token not in text for token in svc.tokens.values())


def test_rate_limit_is_429_with_retry_after(pipeline):
    with running_service(pipeline.warehouse, rate=1.0, burst=3) as svc:
        bob = svc.client("bob")
        codes = [bob.get("/healthz").status_code for _ in range(2)]  # no token: not limited
        codes = [bob.get("/v1/status").status_code for _ in range(5)]
        assert codes[:3] == [200] * 3 and codes[3:] == [429, 429]
        r = bob.get("/v1/status")
        assert int(r.headers["retry-after"]) >= 1 and r.json()["type"] == "urn:dkmsks:problem:rate-limited"
        assert svc.client("alice").get("/v1/status").status_code == 200  # per token


def test_concurrent_publishes_are_grouped_into_few_commits(pipeline, work, svc):
    rows = work.objects_at(1) + work.objects_at(2)
    before = pipeline.lake.version(tables.OBJECTS)
    alice = svc.client("alice")

    def one(row):
        return alice.post("/v1/objects", json={k: v for k, v in row.items() if k != "t"})

    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        answers = list(pool.map(one, rows))
    assert {a.status_code for a in answers} == {202}
    assert {a.json()["t"] for a in answers} == {1}
    commits = pipeline.lake.version(tables.OBJECTS) - before
    assert 1 <= commits <= len(rows) // 4, commits
    landed = pipeline.lake.read(tables.OBJECTS, columns=["id", "t"])
    assert sorted(i for i, t in zip(*(landed.column(c).to_pylist() for c in ("id", "t")), strict=True) if t == 1) \
        == sorted(r["id"] for r in rows)
    assert svc.service.publisher.appends == commits


def test_concurrent_subscribes_and_unsubscribes_are_grouped_and_each_answered(pipeline, work, svc):
    """A hundred subscribes and deletes at once land in few appends (publisher.py); each is
    answered alone: its timestamp, 409 for a live id, 404 for another principal's or one that
    is gone; a refusal is not quarantined; each registration is its principal's."""
    alice, bob, root = svc.client("alice"), svc.client("bob"), svc.client("root")
    places = work.objects_at(1)
    body = [{"id": 5000 + i, "x": o["x"], "y": o["y"], "keywords": o["keywords"][:1], "k": 2}
            for i, o in enumerate(places)]
    before = {name: pipeline.lake.version(name) for name in (tables.EVENTS, tables.QUARANTINE)}
    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        made = list(pool.map(lambda b: (alice if b["id"] % 2 else bob).post("/v1/subscriptions", json=b), body))
    assert [(r.status_code, r.json()["t"]) for r in made] == [(201, 1)] * len(body)
    appends = pipeline.lake.version(tables.EVENTS) - before[tables.EVENTS]
    assert 1 <= appends <= len(body) // 4, appends
    registry = svc.service.registry
    assert [registry.owner_of_registration(b["id"], 1) for b in body] == \
        ["alice" if b["id"] % 2 else "bob" for b in body]
    assert pipeline.round() == [1]
    # Then deletions: alice's own (accepted), bob's by alice (404), an id live already (409), an
    # unknown id (404), admin deleting one of bob's (accepted), a file's by alice (404); at once.
    file_sub = min(pipeline.oracle(0))
    calls = [("delete", alice, 5001, 202), ("delete", alice, 5003, 202), ("delete", alice, 5000, 404),
             ("post", bob, 5004, 409), ("delete", bob, 424242, 404), ("delete", root, 5002, 202),
             ("delete", alice, file_sub, 404)]

    def call(c):
        verb, who, sid, _ = c
        if verb == "delete":
            return who.delete(f"/v1/subscriptions/{sid}")
        return who.post("/v1/subscriptions", json={**body[sid - 5000], "id": sid})

    with concurrent.futures.ThreadPoolExecutor(len(calls)) as pool:
        answers = list(pool.map(call, calls))
    assert [a.status_code for a in answers] == [c[3] for c in calls], [a.text for a in answers]
    assert all(a.json()["t"] == 2 for a in answers if a.status_code == 202)
    assert "of yours" in answers[2].json()["detail"] and answers[3].json()["errors"][0]["field"] == "id"
    assert pipeline.lake.version(tables.QUARANTINE) == before[tables.QUARANTINE]  # answered, not quarantined
    assert pipeline.round() == [2]
    live = pipeline.oracle(2)
    assert {5001, 5003, 5002} & set(live) == set() and {5000, 5004} <= set(live) and file_sub in live


def test_an_idempotency_key_returns_the_first_answer_and_refuses_another_body(pipeline, work, svc):
    alice = svc.client("alice")
    rows = [{k: v for k, v in r.items() if k != "t"} for r in work.objects_at(1)[:5]]
    first = alice.post("/v1/objects", json=rows, headers={"Idempotency-Key": "batch-1"})
    assert first.status_code == 202 and first.json()["t"] == 1
    pipeline.round()  # t = 1 is taken: the same rows without the key would land at t = 2 and be refused
    before = versions(pipeline)
    again = alice.post("/v1/objects", json=rows, headers={"Idempotency-Key": "batch-1"})
    assert (again.status_code, again.json()) == (202, first.json())
    assert again.headers["idempotent-replayed"] == "true"
    assert versions(pipeline) == before
    other = alice.post("/v1/objects", json=rows[:1], headers={"Idempotency-Key": "batch-1"})
    assert other.status_code == 422 and other.json()["errors"][0]["field"] == "Idempotency-Key"
    # The key is the principal's: another one's same key is another request.
    assert svc.client("feed").post("/v1/objects", json=rows, headers={"Idempotency-Key": "batch-1"}).status_code \
        == 422  # every row is a repeat of a landed id with another t, so refused (and quarantined)


def test_published_rows_refused_by_the_rules_are_quarantined_and_named(pipeline, svc):
    alice = svc.client("alice")
    rows = [{"id": 90001, "x": 0.5, "y": 0.5, "keywords": ["cafe"]},
            {"id": 90002, "x": 0.5, "y": 0.5, "keywords": ["Café"]},
            {"id": 90003, "x": 1e400 if False else 0.5, "y": 0.5, "keywords": ["a" * 300]},
            {"id": 2**63, "x": 0.5, "y": 0.5, "keywords": ["cafe"]}]
    r = alice.post("/v1/objects", json=rows)
    assert r.status_code == 202
    assert r.json()["accepted"] == 1
    assert [(x["index"], x["field"]) for x in r.json()["refused"]] == [(1, "keywords"), (2, "keywords"), (3, "id")]
    quarantined = pipeline.lake.read(tables.QUARANTINE).to_pylist()
    assert sorted(q["line"] for q in quarantined) == [2, 3, 4]
    assert {q["source"].split("#")[0] for q in quarantined} == {"api:alice"}
    r = alice.post("/v1/objects", json=rows[1:2])
    assert r.status_code == 422 and r.json()["errors"][0]["pointer"] == "#/0/keywords"
    r = alice.post("/v1/objects", json=rows[1])
    assert r.status_code == 422 and r.json()["errors"][0]["pointer"] == "#/keywords"


def test_status_metrics_docs_and_health(svc, pipeline):
    status = svc.client("bob").get("/v1/status").json()
    assert (status["plan_version"], status["method"], status["last_processed"], status["next_open"]) == \
        (0, "kop", 0, 1)
    assert status["live_subscriptions"] == len(pipeline.oracle(0))
    assert sum(w["subscriptions"] for w in status["worker_loads"]) == status["live_subscriptions"]
    assert svc.client("alice").post("/v1/objects", json={"id": 1, "x": 0, "y": 0, "keywords": ["x"], "t": 2})
    metrics = svc.client("root").get("/metrics")
    assert metrics.headers["content-type"].startswith("text/plain")
    for name in ("dkm_requests_total", "dkm_publish_seconds_bucket", "dkm_streams", "dkm_publish_appends_total",
                 "dkm_event_delay_seconds_bucket", "dkm_lag_seconds", "dkm_stream_events_total"):
        assert name in metrics.text, name
    docs = httpx.get(svc.url + "/docs").text
    assert "/static/swagger-ui/swagger-ui-bundle.js" in docs and "cdn" not in docs.lower()
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png"):
        assert httpx.get(f"{svc.url}/static/swagger-ui/{asset}").status_code == 200
    spec = httpx.get(svc.url + "/openapi.json").json()
    assert {"/v1/subscriptions", "/v1/subscriptions/{sub_id}", "/v1/subscriptions/{sub_id}/results", "/v1/objects",
            "/v1/events", "/v1/status", "/metrics", "/healthz"} <= set(spec["paths"])
    assert spec["paths"]["/v1/objects"]["post"]["requestBody"]["content"]["application/json"]["schema"]["oneOf"]
    assert httpx.get(svc.url + "/healthz").json() == {"ok": True, "events": True}


def test_distances_are_exact_floats_through_json(pipeline, work, svc):
    alice = svc.client("alice")
    o = work.objects_at(1)[3]
    sid = alice.post("/v1/subscriptions", json={"x": o["x"] + 1e-9, "y": o["y"], "keywords": o["keywords"],
                                                "k": 1}).json()["id"]
    alice.post("/v1/objects", json=work.objects_at(1))
    pipeline.round()
    got = alice.get(f"/v1/subscriptions/{sid}/results").json()
    expected = pipeline.oracle(1)[sid]
    assert got["distances"] == expected.distances.tolist() and math.isclose(got["distances"][0], 1e-9, rel_tol=1e-3)
    assert np.array_equal(got["object_ids"], expected.object_ids)
