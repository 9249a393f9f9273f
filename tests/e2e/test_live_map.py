"""The live map (dkm serve's /map) in headless Chromium, on a live warehouse in miniature
(tests/live_pipeline.py: real data, rounds applied by the in-memory engine and committed to the
journal as runs commit them):

- the page asks for a token and keeps it out of every URL; with admin's it shows every
  subscription at the last processed timestamp, coloured by worker, over country and state
  outlines, and follows the event stream: a subscription made through the API, an object
  published for it, a round committed — the page shows the new result (its state and the
  subscription's panel, after a click on its marker), with no reload;
- the time slider shows an earlier timestamp (before that subscription) and Live comes back;
- a subscriber's page shows its own subscription only;
- coordinates in metres (EPSG:3857): no basemap, the same drawing;
- Airflow's "Live map" entry (plugins/dkmsks_map.py) opens the page inside Airflow.

Screenshots go to ``$DKMSKS_SCREENSHOTS`` (the README's: ``DKMSKS_SCREENSHOTS=docs/img
scripts/test.sh tests/e2e/test_live_map.py -n 0``), else to the test's temporary folder.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from browser import chromium, shot, wait_until
from conftest import web_mercator
from dkmsks.client import Client
from dkmsks.core.model import Objects, SubscriptionEvents
from dkmsks.core.workload import WorkloadSpec
from live_pipeline import Workload, live_pipeline, workload
from service_harness import running_service

pytestmark = [pytest.mark.e2e, pytest.mark.realdata]

#: Denser than the service tests' workload, so that the map has something to show.
SPEC = WorkloadSpec(o_init=3000, subscriptions=120, timestamps=4, objects_per_ts=150, inserts_per_ts=6,
                    deletes_per_ts=4, k_max=5, seed=63)
S = "(window.dkmMap && window.dkmMap.summary())"


@pytest.fixture(scope="module")
def work() -> Workload:
    return workload(SPEC)


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    folder = Path(os.environ.get("DKMSKS_SCREENSHOTS") or tmp_path_factory.mktemp("shots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def publish_rounds(pipeline, work: Workload, timestamps) -> None:
    client = Client(pipeline.warehouse)
    for t in timestamps:
        client.publish(work.objects_at(t), work.events_at(t))
        assert pipeline.round() == [t]


def open_map(ctx, url: str, token: str, problems: list[str]):
    page = ctx.new_page()
    page.set_default_timeout(60_000)
    page.on("console", lambda m: m.type in ("error", "warning") and problems.append(f"{m.type}: {m.text}"))
    page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
    page.goto(url + "/map")
    page.locator("#login-form").wait_for()
    page.fill("#token", token)
    page.click("#login-form button[type=submit]")
    return page


def test_the_map_follows_a_new_result_and_goes_back_in_time(tmp_path, work, shots):
    pipeline = live_pipeline(tmp_path / "wh", work, workers=4)
    publish_rounds(pipeline, work, (1, 2))
    requests: list[str] = []
    problems: list[str] = []
    with running_service(pipeline.warehouse) as svc, chromium(tmp_path / "profile") as ctx:
        ctx.on("request", lambda r: requests.append(r.url))
        page = open_map(ctx, svc.url, svc.tokens["root"], problems)
        first = wait_until(page, f"() => {{ const s = {S}; return s && s.t === 2 && s.connected && s; }}",
                           what="the map at t = 2, following the stream")
        oracle = pipeline.oracle(2)
        assert first["crs"] == "wgs84" and first["outlines"] == 2 and first["total"] == len(oracle)
        assert {int(s) for s in first["subscriptions"]} == set(oracle)
        for sid, s in first["subscriptions"].items():
            assert s["object_ids"] == oracle[int(sid)].object_ids.tolist() and s["worker"] == pipeline.workers[int(sid)]
        workers = {s["worker"] for s in first["subscriptions"].values()}
        assert len(workers) == 4 and page.locator("#legend li").count() == 4
        assert page.locator("path.dkm-sub").count() == len(oracle)
        shot(page, shots, "map-live")

        # Alice subscribes through the API; an object for her lands; a round commits both.
        alice = svc.client("alice")
        place = work.objects_at(3)[0]
        made = alice.post("/v1/subscriptions", json={"x": place["x"] + 0.01, "y": place["y"] + 0.01,
                                                    "keywords": ["dkmsks_map_test"], "k": 1})
        assert made.status_code == 201 and made.json()["t"] == 3
        sid = made.json()["id"]
        obj = {"id": 9_900_001, "x": place["x"], "y": place["y"], "keywords": ["dkmsks_map_test", "cafe"]}
        assert alice.post("/v1/objects", json=obj).json()["t"] == 3
        publish_rounds(pipeline, work, (3,))
        seen = wait_until(page, f"() => {{ const s = {S}; const mine = s && s.subscriptions['{sid}'];"
                                f" return s.t === 3 && mine && mine.object_ids.length === 1 && s; }}",
                          what="alice's subscription with its result on the map")
        oracle = pipeline.oracle(3)
        mine = seen["subscriptions"][str(sid)]
        assert mine["object_ids"] == [obj["id"]] == oracle[sid].object_ids.tolist()
        assert mine["distances"] == pytest.approx([float(np.sqrt(oracle[sid].d2[0]))])
        assert seen["commits"] >= 1  # from the stream, not a reload
        assert {int(s) for s in seen["subscriptions"]} == set(oracle)
        for s, r in seen["subscriptions"].items():
            assert r["object_ids"] == oracle[int(s)].object_ids.tolist(), s
        # Its panel, from a click on its marker.
        page.locator(f"path.dkm-sub-{sid}").click(force=True)
        row = page.locator(f"#results tr[data-object='{obj['id']}']")
        row.wait_for()
        assert "dkmsks_map_test" in row.inner_text()
        assert page.locator("#details").get_attribute("data-sub") == str(sid)
        facts = page.locator("#details dl").inner_text()
        assert "owner" in facts and "alice" in facts
        page.click("#zoom-to")
        page.wait_for_timeout(800)  # the zoom's animation
        shot(page, shots, "map-result")

        # The slider back to t = 2: before alice's subscription; then Live again.
        page.locator("#slider").fill("2")
        before = wait_until(page, f"() => {{ const s = {S}; return s.t === 2 && !s.live && s; }}",
                            what="the map as of t = 2")
        assert str(sid) not in before["subscriptions"] and len(before["subscriptions"]) == len(pipeline.oracle(2))
        assert "as of" in page.locator("#status").inner_text()
        shot(page, shots, "map-as-of")
        page.click("#live")
        wait_until(page, f"() => {{ const s = {S}; return s.t === 3 && s.live && s.connected; }}",
                   what="live again")

        # Alice's own page: her subscription only.
        other = open_map(ctx, svc.url, svc.tokens["alice"], problems)
        hers = wait_until(other, f"() => {{ const s = {S}; return s && s.t === 3 && s.connected && s; }}",
                          what="alice's map")
        assert list(hers["subscriptions"]) == [str(sid)]
        # A wrong token is refused at the form.
        third = open_map(ctx, svc.url, "dkm_00000000_" + "x" * 43, problems)
        third.locator("#login-error").filter(has_text="not valid").wait_for()

    tokens = set(svc.tokens.values())
    assert requests and not [u for u in requests if any(tok in u for tok in tokens)], "a token went into a URL"
    assert all(u.startswith(svc.url) for u in requests), [u for u in requests if not u.startswith(svc.url)][:3]
    assert not [p for p in problems if "Content Security Policy" in p or "pageerror" in p], problems


def test_coordinates_in_metres_get_no_basemap(tmp_path, work, shots):
    x, y = web_mercator(work.objects.x, work.objects.y)
    ex, ey = web_mercator(work.events.x, work.events.y)
    metres = Workload(Objects(work.objects.ids, x, y, work.objects.keywords, work.objects.t),
                      SubscriptionEvents(work.events.op, work.events.ids, ex, ey, work.events.keywords, work.events.k,
                                         work.events.t), work.vocab)
    pipeline = live_pipeline(tmp_path / "wh", metres)
    publish_rounds(pipeline, metres, (1,))
    problems: list[str] = []
    with running_service(pipeline.warehouse) as svc, chromium(tmp_path / "profile") as ctx:
        page = open_map(ctx, svc.url, svc.tokens["root"], problems)
        seen = wait_until(page, f"() => {{ const s = {S}; return s && s.t === 1 && s; }}", what="the map")
        assert seen["crs"] == "projected" and seen["outlines"] == 0
        assert "projected" in page.locator("#map").get_attribute("class")
        assert page.locator("#outlines-toggle").is_hidden()
        oracle = pipeline.oracle(1)
        assert {int(s) for s in seen["subscriptions"]} == set(oracle)
        sid = next(s for s in oracle if len(oracle[s].object_ids))
        assert seen["subscriptions"][str(sid)]["x"] == pipeline.info[sid][0]
        assert abs(seen["subscriptions"][str(sid)]["x"]) > 180  # metres
        page.locator(f"path.dkm-sub-{sid}").click(force=True)
        page.locator(f"#results tr[data-object='{oracle[sid].object_ids[0]}']").wait_for()
        shot(page, shots, "map-projected")
    assert not [p for p in problems if "Content Security Policy" in p or "pageerror" in p], problems


def test_airflow_s_live_map_entry_opens_the_map(tmp_path, work, shots, airflow):
    pipeline = live_pipeline(tmp_path / "wh", work)
    publish_rounds(pipeline, work, (1,))
    with running_service(pipeline.warehouse, port=airflow.map_port, frame_ancestors=(airflow.url,)) as svc, \
            chromium(tmp_path / "profile") as ctx:
        page = ctx.new_page()
        page.set_default_timeout(60_000)
        page.goto(airflow.url + "/dags")
        page.wait_for_url("**/auth/login**")
        page.get_by_label("Username").fill("admin")
        page.get_by_label("Password").fill(airflow.password())
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url("**/dags")
        page.get_by_role("button", name="Browse").click()
        page.get_by_role("menuitem", name="Live map").click()
        page.wait_for_url("**/plugin/dkmsks-map")
        frame = page.frame_locator("iframe")
        frame.locator("#token").fill(svc.tokens["root"])
        frame.locator("#login-form button[type=submit]").click()
        inner = next(f for f in page.frames if f.url.startswith(svc.url))
        seen = wait_until(inner, f"() => {{ const s = {S}; return s && s.t === 1 && s.connected && s; }}",
                          what="the map inside Airflow")
        assert {int(s) for s in seen["subscriptions"]} == set(pipeline.oracle(1))
        page.wait_for_timeout(1000)
        shot(page, shots, "map-in-airflow")
