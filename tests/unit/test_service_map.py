"""The live map's reads through HTTP (GET /v1/snapshot, GET /v1/objects) equal the oracle on a
live warehouse in miniature, admin sees every subscription and a subscriber its own, and the
page is served with its policy: this origin only, framed by the origins given (Airflow's)."""

from __future__ import annotations

import math

import pytest

from dkmsks.client import Client
from dkmsks.io.formats import WGS84, Bounds
from dkmsks.service.livemap import content_security_policy, map_crs
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
    with running_service(pipeline.warehouse, frame_ancestors=("http://127.0.0.1:8080",)) as running:
        yield running


def test_the_snapshot_and_the_objects_equal_the_oracle_admin_sees_all_a_subscriber_its_own(pipeline, work, svc):
    alice, bob, root = svc.client("alice"), svc.client("bob"), svc.client("root")
    o = work.objects_at(1)[0]
    made = alice.post("/v1/subscriptions", json={"x": o["x"], "y": o["y"], "keywords": o["keywords"][:1], "k": 2})
    sid = made.json()["id"]
    Client(pipeline.warehouse).publish(work.objects_at(1), work.events_at(1))
    assert pipeline.round() == [1]
    oracle = pipeline.oracle(1)
    snap = root.get("/v1/snapshot").json()
    assert (snap["t"], snap["last_processed"], snap["total"], snap["truncated"]) == (1, 1, len(oracle), False)
    assert snap["crs"] == "wgs84"  # the plan's space (the data's) lies within longitude/latitude's range
    got = {s["id"]: s for s in snap["subscriptions"]}
    assert sorted(got) == sorted(oracle)
    for s, r in got.items():
        assert s == r["id"] and r["object_ids"] == oracle[s].object_ids.tolist()
        assert r["distances"] == [math.sqrt(d) for d in oracle[s].d2.tolist()]
        x, y, keywords, k, registered = pipeline.info[s]
        assert (r["x"], r["y"], r["keywords"], r["k"], r["registered_t"]) == (x, y, keywords, k, registered)
        assert r["worker"] == pipeline.workers[s]
    assert got[sid]["owner"] == "alice" and got[min(oracle)]["owner"] is None  # a file's: nobody's
    # Every result object, with its coordinates.
    where = {obj["id"]: obj for obj in snap["objects"]}
    assert set(where) == {obj for r in got.values() for obj in r["object_ids"]}
    landed = {row["id"]: row for t in (0, 1) for row in (work.objects_at(t) if t else [])}
    for obj_id in set(where) & set(landed):
        assert {k: where[obj_id][k] for k in ("x", "y", "t")} == {k: landed[obj_id][k] for k in ("x", "y", "t")}
    # A subscriber sees its own only, without owners; another sees none.
    mine = alice.get("/v1/snapshot").json()
    assert [s["id"] for s in mine["subscriptions"]] == [sid] and mine["subscriptions"][0]["owner"] is None
    assert mine["subscriptions"][0]["object_ids"] == oracle[sid].object_ids.tolist()
    assert bob.get("/v1/snapshot").json()["subscriptions"] == []
    assert bob.get("/v1/snapshot", params={"sub": sid}).json()["subscriptions"] == []
    # A box, a limit, some ids.
    limited = root.get("/v1/snapshot", params={"limit": 7}).json()
    assert (limited["total"], limited["truncated"], len(limited["subscriptions"])) == (len(oracle), True, 7)
    xs = sorted(r["x"] for r in got.values())
    middle = xs[len(xs) // 2]
    boxed = root.get("/v1/snapshot", params={"box": f"{middle},-90,180,90"}).json()
    assert sorted(s["id"] for s in boxed["subscriptions"]) == sorted(s for s, r in got.items() if r["x"] >= middle)
    picked = sorted(got)[:3]
    assert [s["id"] for s in root.get("/v1/snapshot", params={"sub": picked}).json()["subscriptions"]] == picked
    # As of t = 0: before alice's subscription.
    before = root.get("/v1/snapshot", params={"as_of": 0}).json()
    assert sid not in {s["id"] for s in before["subscriptions"]} and before["t"] == 0
    # The objects of timestamp 1, and some by id.
    objects = alice.get("/v1/objects", params={"since": 0}).json()
    expected = sorted(work.objects_at(1), key=lambda row: row["id"])
    assert objects["objects"] == expected and (objects["since"], objects["until"], objects["total"]) == (0, 1, 40)
    assert alice.get("/v1/objects", params={"since": 0, "limit": 5}).json()["truncated"] is True
    ids = [expected[3]["id"], expected[0]["id"]]
    assert alice.get("/v1/objects", params={"ids": ids}).json()["objects"] == [expected[0], expected[3]]
    assert alice.get("/v1/objects", params={"since": 1}).json()["objects"] == []


def test_the_reads_refuse_what_they_cannot_answer(svc):
    root, feed = svc.client("root"), svc.client("feed")
    assert svc.client(None).get("/v1/snapshot").status_code == 401
    assert feed.get("/v1/snapshot").status_code == 403  # publish only
    assert feed.get("/v1/objects", params={"since": 0}).status_code == 403
    for box in ("1,2,3", "a,b,c,d", "3,0,1,1", "0,0,inf,1"):
        r = root.get("/v1/snapshot", params={"box": box})
        assert r.status_code == 422 and r.json()["errors"][0]["field"] == "box", box
    r = root.get("/v1/snapshot", params={"as_of": 99})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "as_of" and "not been processed" in r.text
    assert root.get("/v1/snapshot", params={"limit": 0}).status_code == 422
    r = root.get("/v1/objects")
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "since"
    assert root.get("/v1/objects", params={"since": 0, "ids": [1]}).status_code == 422


def test_the_page_its_files_and_its_policy(svc):
    anyone = svc.client(None)
    page = anyone.get("/map")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "dkmsks live map" in page.text and "Authorization" in page.text
    policy = page.headers["content-security-policy"]
    assert "script-src 'self';" in policy and "connect-src 'self';" in policy and "unsafe" not in policy
    assert "frame-ancestors 'self' http://127.0.0.1:8080;" in policy
    assert page.headers["referrer-policy"] == "no-referrer"
    for name, kind in (("map.js", "text/javascript"), ("map.css", "text/css")):
        r = anyone.get(f"/map/{name}")
        assert r.status_code == 200 and r.headers["content-type"].startswith(kind)
    assert anyone.get("/map/../app.py").status_code == 404
    assert anyone.get("/map/app.py").status_code == 404
    # Every script and style sheet the page names is served here (no CDN).
    import re

    for ref in re.findall(r'(?:src|href)="([^"]+)"', page.text):
        assert not ref.startswith(("http:", "https:", "//")), ref
        assert anyone.get("/" + ref).status_code == 200, ref
    assert anyone.get("/static/world-atlas/countries-50m.json").json()["type"] == "Topology"
    assert anyone.get("/static/us-atlas/states-10m.json").json()["type"] == "Topology"


def test_which_coordinates_the_map_draws():
    assert map_crs("projected", WGS84, None) == "projected" and map_crs("wgs84", None, None) == "wgs84"
    assert map_crs("auto", WGS84, (500_000.0, 0.0, 600_000.0, 1.0)) == "wgs84"
    assert map_crs("auto", Bounds(0, 0, 10, 10), (0.0, 0.0, 1.0, 1.0)) == "projected"
    assert map_crs("auto", None, (-124.7, 24.5, -66.9, 49.4)) == "wgs84"
    assert map_crs("auto", None, (300_000.0, 4_000_000.0, 800_000.0, 4_600_000.0)) == "projected"
    assert map_crs("auto", None, None) == "projected"
    assert "frame-ancestors 'self';" in content_security_policy(())


def test_frame_ancestors_are_origins_only():
    from dkmsks.commands.serve import check_origin

    assert check_origin("http://127.0.0.1:8080") == "http://127.0.0.1:8080"
    assert check_origin("https://airflow.example.org") == "https://airflow.example.org"
    for bad in ("127.0.0.1:8080", "http://a/b", "http://a; script-src *", "*", "http://a:8080/"):
        with pytest.raises(ValueError, match="origin"):
            check_origin(bad)
