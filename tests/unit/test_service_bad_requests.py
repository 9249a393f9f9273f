"""Bad requests to dkm serve: malformed JSON, wrong types, NaN, a 10 MB body, 10,000 keywords,
unknown fields and more each get their 4xx problem naming the field, nothing is written, and the
service stays up — with a property-based fuzz of the request schema (hypothesis)."""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dkmsks.storage import tables
from live_pipeline import live_pipeline, workload
from service_harness import running_service

pytestmark = pytest.mark.realdata  # layers per test: the two fuzzes take seconds (slow), the rest unit

GOOD_SUB = {"x": 0.5, "y": 0.5, "keywords": ["cafe"], "k": 2}
GOOD_OBJ = {"id": 123456789, "x": 0.5, "y": 0.5, "keywords": ["cafe"]}


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    pipeline = live_pipeline(tmp_path_factory.mktemp("bad") / "wh", workload())
    with running_service(pipeline.warehouse, max_body=2 << 20) as running:
        running.pipeline = pipeline
        yield running


def landing_versions(svc):
    lake = svc.pipeline.lake
    return {name: lake.version(name) for name in (tables.OBJECTS, tables.EVENTS, tables.QUARANTINE)}


def with_(base, **changes):
    return json.dumps({**base, **changes}).encode()


CASES = [
    # (path, body bytes, headers, status, field)
    ("/v1/subscriptions", b'{"x": 0.5, "y": ', {}, 400, None),
    ("/v1/subscriptions", b"", {}, 400, None),
    ("/v1/subscriptions", b"[1, 2]", {}, 422, ""),
    ("/v1/subscriptions", with_(GOOD_SUB, x="1.5"), {}, 422, "x"),
    ("/v1/subscriptions", with_(GOOD_SUB, k=1.5), {}, 422, "k"),
    ("/v1/subscriptions", with_(GOOD_SUB, k=True), {}, 422, "k"),
    ("/v1/subscriptions", with_(GOOD_SUB, k="2"), {}, 422, "k"),
    ("/v1/subscriptions", with_(GOOD_SUB, id=5.0), {}, 422, "id"),
    ("/v1/subscriptions", with_(GOOD_SUB, keywords="cafe"), {}, 422, "keywords"),
    ("/v1/subscriptions", with_(GOOD_SUB, keywords=[1]), {}, 422, "keywords"),
    ("/v1/subscriptions", b'{"x": NaN, "y": 0.5, "keywords": ["cafe"], "k": 2}', {}, 422, "x"),
    ("/v1/subscriptions", b'{"x": 0.5, "y": -Infinity, "keywords": ["cafe"], "k": 2}', {}, 422, "y"),
    ("/v1/subscriptions", b'{"x": 1e400, "y": 0.5, "keywords": ["cafe"], "k": 2}', {}, 422, "x"),
    ("/v1/subscriptions", with_(GOOD_SUB, keywords=["w"] * 10_000), {}, 422, "keywords"),
    ("/v1/subscriptions", with_(GOOD_SUB, colour="red"), {}, 422, "colour"),
    ("/v1/subscriptions", with_(GOOD_SUB, k=0), {}, 422, "k"),
    ("/v1/subscriptions", with_(GOOD_SUB, k=1001), {}, 422, "k"),
    ("/v1/subscriptions", with_(GOOD_SUB, keywords=["Café"]), {}, 422, "keywords"),
    ("/v1/subscriptions", with_(GOOD_SUB, keywords=[]), {}, 422, "keywords"),
    ("/v1/subscriptions", with_(GOOD_SUB, id=2**64), {}, 422, "id"),
    ("/v1/subscriptions", with_(GOOD_SUB), {"content-type": "text/plain"}, 415, None),
    ("/v1/objects", b'{"id": 1, ', {}, 400, None),
    ("/v1/objects", b"[]", {}, 422, ""),
    ("/v1/objects", b'"cafe"', {}, 422, ""),
    ("/v1/objects", with_(GOOD_OBJ, x=None), {}, 422, "x"),
    ("/v1/objects", with_(GOOD_OBJ, t="soon"), {}, 422, "t"),
    ("/v1/objects", b'[{"id": 1, "x": NaN, "y": 0, "keywords": ["cafe"]}]', {}, 422, "x"),
    ("/v1/objects", json.dumps([{**GOOD_OBJ, "extra": 1}]).encode(), {}, 422, "extra"),
    ("/v1/objects", with_(GOOD_OBJ, keywords=["k"] * 10_000), {}, 422, "keywords"),
    ("/v1/objects", json.dumps([{**GOOD_OBJ, "id": i} for i in range(10_001)]).encode(), {}, 413, None),
    ("/v1/objects", b"x" * (10 << 20), {}, 413, None),
]


@pytest.mark.parametrize(("path", "body", "headers", "status", "field"), CASES,
                         ids=[f"{c[0].split('/')[-1]}-{i}" for i, c in enumerate(CASES)])
@pytest.mark.unit
def test_a_bad_request_is_a_4xx_problem_naming_the_field_and_writes_nothing(svc, path, body, headers, status, field):
    before = landing_versions(svc)
    r = svc.client("root").post(path, content=body, headers={"content-type": "application/json", **headers})
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    problem = r.json()
    assert problem["status"] == status and problem["type"].startswith("urn:dkmsks:problem:")
    if field is not None:
        assert problem["errors"][0]["field"] == field, problem
        assert problem["errors"][0]["pointer"].startswith("#")
    assert landing_versions(svc) == before
    assert httpx.get(svc.url + "/healthz").json()["ok"]


@pytest.mark.unit
def test_a_chunked_body_over_the_limit_is_cut_at_the_limit(svc):
    def chunks():
        for _ in range(10):
            yield b"x" * (1 << 20)

    r = svc.client("root").post("/v1/objects", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)
keyword = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_ ÉA", min_size=0, max_size=12)
field_value = {
    "id": st.integers(min_value=-(2**65), max_value=2**65) | json_values,
    "x": st.floats(allow_nan=True, allow_infinity=True) | st.integers() | json_values,
    "y": st.floats(allow_nan=True, allow_infinity=True) | st.integers() | json_values,
    "keywords": st.lists(keyword, max_size=6) | json_values,
    "k": st.integers(min_value=-5, max_value=2000) | json_values,
    "t": st.integers(min_value=-5, max_value=20) | json_values,
}


def request_body(fields: tuple[str, ...]):
    present = st.fixed_dictionaries({}, optional={f: field_value[f] for f in fields})
    extra = st.dictionaries(st.sampled_from(["zz", "lat", "op", "X"]), json_values, max_size=1)
    return st.builds(lambda a, b: {**a, **b}, present, extra)


def encode(value) -> bytes:
    return json.dumps(value, allow_nan=True).encode()


@pytest.mark.slow  # seconds: a property-based fuzz through the service
@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(body=request_body(("id", "x", "y", "keywords", "k")) | json_values)
def test_fuzzed_subscriptions_are_answered_and_only_good_ones_land(svc, body):
    before = landing_versions(svc)
    r = svc.client("alice").post("/v1/subscriptions", content=encode(body),
                                 headers={"content-type": "application/json"})
    assert r.status_code in (201, 400, 409, 413, 422), r.text
    if r.status_code == 201:
        assert set(body) <= {"id", "x", "y", "keywords", "k"} and r.json()["t"] >= 1
    else:
        assert r.headers["content-type"] == "application/problem+json"
        assert landing_versions(svc) == before


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(body=st.lists(request_body(("id", "x", "y", "keywords", "t")), min_size=1, max_size=4)
       | request_body(("id", "x", "y", "keywords", "t")) | json_values)
@pytest.mark.slow  # seconds: a property-based fuzz through the service
def test_fuzzed_publishes_are_answered_and_only_valid_rows_land(svc, body):
    before = landing_versions(svc)
    r = svc.client("alice").post("/v1/objects", content=encode(body), headers={"content-type": "application/json"})
    assert r.status_code in (202, 400, 413, 422), r.text
    after = landing_versions(svc)
    if r.status_code == 202:
        assert r.json()["accepted"] >= 1
    else:
        assert after[tables.OBJECTS] == before[tables.OBJECTS] and after[tables.EVENTS] == before[tables.EVENTS]
        if after[tables.QUARANTINE] != before[tables.QUARANTINE]:  # every row refused by the rules, recorded
            assert r.status_code == 422 and r.json()["detail"].startswith("no object was published")


@pytest.mark.slow  # runs after the fuzzes, in their layer
def test_the_service_is_up_after_the_fuzz(svc):
    assert httpx.get(svc.url + "/healthz").json()["ok"]
    assert svc.client("root").get("/v1/status").status_code == 200
