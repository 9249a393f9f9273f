"""The routes of ``dkm serve`` and the application's wiring (:func:`create_app`).

======================================  =========  ==================================================
route                                   scope      what
======================================  =========  ==================================================
``POST /v1/subscriptions``              subscribe  register at the next open timestamp: 201, Location
``GET /v1/subscriptions``               subscribe  the caller's subscriptions (admin: all it made)
``GET /v1/subscriptions/{id}``          subscribe  one subscription, ``live`` or ``pending``
``DELETE /v1/subscriptions/{id}``       subscribe  unsubscribe at the next open timestamp: 202
``GET /v1/subscriptions/{id}/results``  subscribe  its exact kNN at the last (or ``as_of``) timestamp
``POST /v1/objects``                    publish    one object or an array: 202 and their timestamp
``GET /v1/events``                      subscribe  Server-Sent Events of result changes (events.py)
``GET /v1/snapshot``, ``/v1/objects``   subscribe  what the live map draws (livemap.py), and ``GET /map``
``GET /v1/status``                      any        the pipeline's plan, progress, lag, worker loads
``GET /metrics``                        admin      Prometheus text format
``GET /healthz``                        none       liveness
``GET /docs``, ``/openapi.json``        none       the OpenAPI document and Swagger UI (vendored)
======================================  =========  ==================================================

A subscription another principal owns answers 404, as one that does not exist: its id tells
nothing. ``admin`` holds every scope and sees every subscription, also those landed from files.
Every error is a problem document (:mod:`~dkmsks.service.problems`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from pydantic import TypeAdapter
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Receive, Scope, Send

from dkmsks.client import Client, prepare_rows
from dkmsks.io.formats import Bounds
from dkmsks.service import schemas
from dkmsks.service.auth import Principal, RateLimiter, TokenStore, bearer, retry_after
from dkmsks.service.auth import Scope as TokenScope
from dkmsks.service.bodies import ERRORS, OBJECTS, SUBSCRIPTION, json_body, refusal, request_schema, validated
from dkmsks.service.events import HEARTBEAT, Hub, Position, Stream, format_id, parse_id
from dkmsks.service.metrics import CONTENT_TYPE, Metrics
from dkmsks.service.middleware import BodyLimit, RequestMetrics, problem_response
from dkmsks.service.problems import PROBLEM_JSON, FieldError, Problem, field_of, invalid, pointer
from dkmsks.service.publisher import Announced, Publisher
from dkmsks.service.registry import Registry
from dkmsks.storage.lake import Lake
from dkmsks.storage.landing import RefusedRows
from dkmsks.warehouse import Warehouse

log = logging.getLogger("dkmsks.service")
STATIC = Path(__file__).resolve().parent / "static"
API_VERSION = "1"


@dataclass
class ServiceConfig:
    """What a service serves and its limits (``dkm serve``'s flags)."""

    warehouse: Warehouse
    tokens: Path
    registry: Path
    bounds: Bounds | None = None
    rate: float = 50.0  # requests a second per token, on average
    burst: int = 100
    max_body: int = 2 << 20  # bytes
    poll: float = 0.25  # seconds between looks at the journal
    heartbeat: float = 15.0  # seconds between SSE comments on a quiet stream
    ring: int = 100_000  # recent changes kept for resumes
    stream_buffer: int = 1 << 20  # bytes a stream may have unwritten before it is dropped
    send_timeout: float = 30.0  # seconds a write to a stream may wait for the client
    linger: float = 0.005  # seconds the publisher waits for more requests to group
    status_ttl: float = 5.0  # seconds a /v1/status answer is reused
    map_crs: str = "auto"  # the live map's coordinates: auto, wgs84 or projected (livemap.map_crs)
    frame_ancestors: tuple[str, ...] = ()  # origins that may embed the map (Airflow's), besides this one


@dataclass
class Service:
    """The running parts of one app: what the routes use."""

    config: ServiceConfig
    lake: Lake
    client: Client
    tokens: TokenStore
    limiter: RateLimiter
    registry: Registry
    metrics: Metrics
    hub: Hub
    publisher: Publisher
    inflight: dict[tuple[str, str], asyncio.Future[tuple[int, dict[str, Any]]]] = field(default_factory=dict)
    status_cache: tuple[float, dict[str, Any]] | None = None


# --------------------------------------------------------------------------- who asks


_bearer = HTTPBearer(auto_error=False, description="a token from dkm token create")


def service_of(request: Request) -> Service:
    """The service of the app handling ``request``."""
    service: Service = request.app.state.service
    return service


def require(scope: TokenScope | None) -> Callable[..., Awaitable[Principal]]:
    """A dependency: the request's principal, which must hold ``scope`` (None: any token);
    401 without a valid token, 403 without the scope, 429 over the token's rate."""

    async def principal(request: Request,
                        _: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)] = None) -> Principal:
        service = service_of(request)
        token = bearer(request.headers.get("authorization"))
        who = service.tokens.verify(token) if token is not None else None
        if who is None:
            raise Problem(401, "unauthorized", "Unauthorized",
                          "a valid bearer token is required (Authorization: Bearer <token>; dkm token create)",
                          headers={"WWW-Authenticate": 'Bearer realm="dkm"'})
        wait = service.limiter.take(who.token_id)
        if wait > 0:
            raise Problem(429, "rate-limited", "Too many requests",
                          f"this token may make {service.config.rate:g} requests a second (bursts of "
                          f"{service.config.burst}); retry after the time given",
                          headers={"Retry-After": retry_after(wait)})
        if scope is not None and not who.can(scope):
            raise Problem(403, "forbidden", "Forbidden", f"this token lacks the '{scope.value}' scope")
        return who

    return principal


Publishing = Annotated[Principal, Depends(require(TokenScope.PUBLISH))]
Subscriber = Annotated[Principal, Depends(require(TokenScope.SUBSCRIBE))]
Admin = Annotated[Principal, Depends(require(TokenScope.ADMIN))]
Anyone = Annotated[Principal, Depends(require(None))]


# --------------------------------------------------------------------------- subscriptions


@dataclass(frozen=True)
class _Found:
    sub_id: int
    x: float
    y: float
    keywords: list[str]
    k: int
    t: int
    status: str


def _lookup(service: Service, sub_ids: list[int]) -> dict[int, _Found]:
    """The live or pending registration of each of ``sub_ids`` (blocking: in a thread)."""
    from dkmsks.storage import tables
    from dkmsks.storage.journal import last_processed
    from dkmsks.storage.lake import where
    from dkmsks.storage.plans import current_plan
    from dkmsks.storage.state_io import StateView

    lake = service.lake
    info = current_plan(lake)
    view = StateView.open(lake, fallback_plan=None if info is None else info.plan_version)
    rows = view.read(columns=["sub_id", "x", "y", "keywords", "k", "registered_t"], sub_ids=sub_ids)
    found = {int(r["sub_id"]): _Found(int(r["sub_id"]), r["x"], r["y"], sorted(r["keywords"] or []), int(r["k"]),
                                      int(r["registered_t"]), "live") for r in rows.to_pylist()}
    processed = last_processed(lake, view.journal_version)
    pending = lake.read(tables.EVENTS, columns=["op", "id", "x", "y", "keywords", "k", "t"],
                        predicate=where(t__gt=processed))
    wanted = set(sub_ids)
    for r in sorted((r for r in pending.to_pylist() if r["id"] in wanted), key=lambda r: (r["t"], r["op"] == "insert")):
        sid = int(r["id"])
        if r["op"] == "insert" and sid not in found:
            found[sid] = _Found(sid, r["x"], r["y"], sorted(r["keywords"] or []), int(r["k"]), int(r["t"]), "pending")
    return found


async def _owned(request: Request, who: Principal, sub_id: int) -> _Found:
    """The subscription ``sub_id`` if ``who`` may see it, else 404 (module doc)."""
    service = service_of(request)
    found = (await asyncio.to_thread(_lookup, service, [sub_id])).get(sub_id)
    if found is not None and (who.is_admin or service.registry.owner_of_registration(sub_id, found.t) == who.name):
        return found
    raise Problem(404, "not-found", "Not found", f"no subscription {sub_id} of yours is live or pending")


def _subscription(service: Service, who: Principal, found: _Found) -> schemas.Subscription:
    owner = service.registry.owner_of_registration(found.sub_id, found.t) if who.is_admin else None
    return schemas.Subscription(id=found.sub_id, x=found.x, y=found.y, keywords=found.keywords, k=found.k, t=found.t,
                                status="live" if found.status == "live" else "pending", owner=owner)


def _routes(app: FastAPI) -> None:
    @app.post("/v1/subscriptions", status_code=201, response_model=schemas.SubscriptionCreated,
              responses={**ERRORS, 409: ERRORS[404] | {"description": "the id is live"}},
              openapi_extra=request_schema(schemas.SubscriptionIn), tags=["subscriptions"])
    async def create_subscription(request: Request, who: Subscriber) -> Response:
        """Register a subscription at the next open timestamp; its result is exact from then on
        (watch it with ``/v1/events?sub=ID&after=<t - 1>``)."""
        service = service_of(request)
        body = validated(SUBSCRIPTION, json_body(await request.body(), request.headers.get("content-type")))
        sid = body.id if body.id is not None else _new_id(service)
        row = {"op": "insert", "id": sid, "x": body.x, "y": body.y, "keywords": body.keywords, "k": body.k}
        t = await _subscription_event(service, who, row)
        created = schemas.SubscriptionCreated(id=sid, t=t)
        return JSONResponse(created.model_dump(), status_code=201, headers={"Location": f"/v1/subscriptions/{sid}"})

    @app.get("/v1/subscriptions", response_model=schemas.SubscriptionList, responses=ERRORS,
             tags=["subscriptions"])
    async def list_subscriptions(request: Request, who: Subscriber,
                                 limit: Annotated[int, Query(ge=1, le=10_000)] = 1000) -> schemas.SubscriptionList:
        """The caller's live and pending subscriptions (admin: every one made through the service)."""
        service = service_of(request)
        if who.is_admin:
            ids = service.registry.claimed_ids()
        else:
            ids = sorted({sid for sid, _ in service.registry.owned_by(who.name)})
        found = await asyncio.to_thread(_lookup, service, sorted(ids)[:limit]) if ids else {}
        mine = [f for sid, f in sorted(found.items())
                if who.is_admin or service.registry.owner_of_registration(sid, f.t) == who.name]
        return schemas.SubscriptionList(subscriptions=[_subscription(service, who, f) for f in mine])

    @app.get("/v1/subscriptions/{sub_id}", response_model=schemas.Subscription, responses=ERRORS,
             tags=["subscriptions"])
    async def get_subscription(request: Request, sub_id: int, who: Subscriber) -> schemas.Subscription:
        """One subscription: where, which keywords, ``k``, when it registered, live or pending."""
        return _subscription(service_of(request), who, await _owned(request, who, sub_id))

    @app.delete("/v1/subscriptions/{sub_id}", status_code=202, response_model=schemas.SubscriptionDeleted,
                responses=ERRORS, tags=["subscriptions"])
    async def delete_subscription(request: Request, sub_id: int, who: Subscriber) -> schemas.SubscriptionDeleted:
        """Unsubscribe at the next open timestamp (no result from then on)."""
        t = await _subscription_event(service_of(request), who, {"op": "delete", "id": sub_id})
        return schemas.SubscriptionDeleted(id=sub_id, t=t)

    @app.get("/v1/subscriptions/{sub_id}/results", response_model=schemas.Result,
             responses={**ERRORS, 409: {"description": "registered, not processed yet"},
                        410: {"description": "as_of is beyond the as-of horizon"}}, tags=["subscriptions"])
    async def subscription_results(request: Request, sub_id: int, who: Subscriber,
                                   as_of: Annotated[int | None, Query(description="a processed timestamp "
                                                                                  "(default: the last)")] = None,
                                   ) -> schemas.Result:
        """The exact kNN of a subscription at the last processed timestamp, or at ``as_of``."""
        service = service_of(request)
        found = None
        if as_of is None:
            found = await _owned(request, who, sub_id)
        elif not who.is_admin and service.registry.owner_at(sub_id, as_of) != who.name:
            # A past result is its owner's then, live or not now (the registry's claims).
            raise Problem(404, "not-found", "Not found", f"no subscription {sub_id} of yours at t={as_of}")
        try:
            r = await asyncio.to_thread(service.client.results, sub_id, as_of)
        except ValueError as err:
            text = str(err)
            if "beyond the as-of horizon" in text:
                raise Problem(410, "beyond-horizon", "Gone", text) from None
            if found is not None and found.status == "pending":
                raise Problem(409, "pending", "Not processed yet", text) from None
            if "not live" in text:
                raise Problem(404, "not-found", "Not found", text) from None
            raise invalid([FieldError("#as_of", "as_of", text)]) from None
        return schemas.Result(sub_id=r.sub_id, t=r.t, object_ids=r.object_ids, distances=r.distances)

    # ------------------------------------------------------------------ publishing
    @app.post("/v1/objects", status_code=202, response_model=schemas.PublishAccepted,
              responses={**ERRORS, 422: ERRORS[422] | {"description": "no row could be published"}},
              openapi_extra={**request_schema(schemas.ObjectIn, batch=True), "parameters": [
                  {"name": "Idempotency-Key", "in": "header", "required": False, "schema": {"type": "string",
                                                                                            "maxLength": 200},
                   "description": "a retry with the same key and body gets the first answer"}]},
              tags=["objects"])
    async def publish_objects(request: Request, who: Publishing) -> Response:
        """Publish one object or an array of them; rows without ``t`` land at the next open
        timestamp (the answer says which). Rows the readers' rules refuse are quarantined and
        listed; the rest land. Concurrent requests are grouped into one Delta append."""
        service = service_of(request)
        raw = await request.body()
        key = request.headers.get("idempotency-key")
        if key is None:
            status, body = await _publish(service, who, raw, request.headers.get("content-type"))
            return _publish_response(status, body)
        if not 0 < len(key) <= 200:
            raise invalid([FieldError("#Idempotency-Key", "Idempotency-Key", "give 1-200 characters")])
        digest = hashlib.sha256(raw).hexdigest()
        slot = (who.name, key)
        while True:
            stored = service.registry.stored(who.name, key)
            if stored is not None:
                if stored.body_sha256 != digest:
                    raise invalid([FieldError("#Idempotency-Key", "Idempotency-Key",
                                              "this key was used with another body; use a new key")])
                return _publish_response(stored.status, stored.response, replayed=True)
            running = service.inflight.get(slot)
            if running is None:
                break
            with contextlib.suppress(Exception):
                await asyncio.shield(running)
        future: asyncio.Future[tuple[int, dict[str, Any]]] = asyncio.get_running_loop().create_future()
        future.add_done_callback(lambda f: f.cancelled() or f.exception())  # a waiter may not come
        service.inflight[slot] = future
        try:
            status, body = await _publish(service, who, raw, request.headers.get("content-type"))
            service.registry.store(who.name, key, digest, status, body)
            future.set_result((status, body))
        except Problem as problem:
            if problem.status < 500 and problem.status != 429:
                body = problem.body(request.url.path)
                service.registry.store(who.name, key, digest, problem.status, body)
            future.set_exception(problem)
            raise
        finally:
            service.inflight.pop(slot, None)
            if not future.done():
                future.cancel()
        return _publish_response(status, body)

    # ------------------------------------------------------------------ events
    @app.get("/v1/events", responses={**ERRORS, 200: {"content": {"text/event-stream": {}},
                                                       "description": "the stream (events.py)"}},
             response_class=Response, tags=["events"])
    async def events(request: Request, who: Subscriber,
                     sub: Annotated[list[int] | None, Query(description="subscription ids (repeat); default: "
                                                                        "all of the caller's (admin: all)")] = None,
                     after: Annotated[str | None, Query(description="resume after this event id (or a "
                                                                    "timestamp); Last-Event-ID wins")] = None,
                     ) -> Response:
        """Result changes as Server-Sent Events: ``change`` (id ``<t>:<order>:<sub>``),
        ``processed`` (id ``<t>``) after each commit, ``reset`` when the stream cannot resume,
        and a comment every heartbeat. Resume with ``Last-Event-ID``: no gap, no repeat."""
        service = service_of(request)
        hub = service.hub
        if hub.position is None:
            raise Problem(503, "not-ready", "Not ready", "nothing is processed yet, or the service is starting",
                          headers={"Retry-After": "5"})
        subs = None
        if sub is not None:
            if len(set(sub)) > schemas.MAX_STREAM_SUBS:
                raise invalid([FieldError("#sub", "sub", f"at most {schemas.MAX_STREAM_SUBS} subscriptions a stream")])
            if not who.is_admin:
                foreign = [s for s in sub if who.name not in service.registry.principals_of(s)]
                if foreign:
                    raise Problem(404, "not-found", "Not found", f"no subscription {foreign[0]} of yours")
            subs = frozenset(sub)
        resume_text = request.headers.get("last-event-id") or after
        resume = parse_id(resume_text) if resume_text is not None else None
        stream = Stream(who.name, admin=who.is_admin, subs=subs)
        mode, start, at = hub.attach(stream, resume)
        reason = None
        if resume_text is not None and resume is None:
            mode, reason = "reset", f"{resume_text!r} is not an event id of this service"
        elif mode == "reset":
            reason = (f"event {resume_text} is beyond the as-of horizon (oldest timestamp available: {hub.horizon})"
                      if resume is not None and resume[0] <= at else
                      f"event {resume_text} is after the last processed timestamp {at}")
        return EventStream(service, stream, mode, start, at, reason)

    # ------------------------------------------------------------------ status
    @app.get("/v1/status", response_model=schemas.Status, responses=ERRORS, tags=["service"])
    async def status(request: Request, _: Anyone) -> dict[str, Any]:
        """The pipeline's plan, last processed and next open timestamps, pending timestamps and
        lag, worker loads (``dkm status``), and the service's streams."""
        service = service_of(request)
        cached = service.status_cache
        if cached is None or time.monotonic() - cached[0] > service.config.status_ttl:
            body = await asyncio.to_thread(_status, service)
            service.status_cache = cached = (time.monotonic(), body)
        return {**cached[1], "streams": len(service.hub.streams), "events_through": service.hub.position}

    @app.get("/metrics", response_class=Response, responses=ERRORS, tags=["service"])
    async def metrics(request: Request, _: Admin) -> Response:
        """Prometheus metrics (text format 0.0.4)."""
        service = service_of(request)
        service.metrics.streams.set(len(service.hub.streams))
        if service.hub.position is not None:
            service.metrics.events_through.set(service.hub.position)
        return Response(service.metrics.render(), media_type=CONTENT_TYPE)

    @app.get("/healthz", tags=["service"])
    async def healthz(request: Request) -> dict[str, Any]:
        """Liveness: the process answers; ``events`` says whether the tailer has started."""
        return {"ok": True, "events": service_of(request).hub.position is not None}


#: Ids the service picks lie below 2**53: JavaScript reads integers up to there exactly (the live
#: map, any browser client), and 2**53 leaves room enough for ids drawn at random.
NEW_ID_BITS = 53


async def _subscription_event(service: Service, who: Principal, row: dict[str, Any]) -> int:
    """Land one subscribe or unsubscribe with the publisher's next group (publisher.py); the
    timestamp it lands at. Refused: 422 naming the field, 409 for an id that is live, 404 for
    a deletion of a subscription that is not live or pending, or is another principal's."""
    from dkmsks.service.publisher import NOT_YOURS
    from dkmsks.storage import tables

    sid = int(row["id"])
    # One row: ~0.6 ms here, less than a trip to a worker thread and back.
    prepared = prepare_rows((), [row], t=None, source=f"api-subscription:{who.name}", bounds=service.config.bounds)
    if prepared.rejected:
        raise refusal(ValueError(prepared.rejected[0][1].reason))
    outcome = await service.publisher.subscription(prepared, row["op"], sid, principal=who.name, admin=who.is_admin)
    if outcome.refused:
        reason = outcome.refused[0].reason
        if reason == NOT_YOURS % sid:
            raise Problem(404, "not-found", "Not found", f"no subscription {sid} of yours is live or pending")
        raise refusal(RefusedRows([(tables.EVENTS, r) for r in outcome.refused]))
    assert outcome.t is not None, "a row without t lands at the next open timestamp"
    return int(outcome.t)


def _new_id(service: Service) -> int:
    """An id for a subscription that came without one: random, positive, below ``2**53``
    (:data:`NEW_ID_BITS`), never claimed here."""
    while True:
        sid = secrets.randbelow(2**NEW_ID_BITS - 1) + 1
        if not service.registry.claimed(sid):
            return sid


async def _publish(service: Service, who: Principal, raw: bytes,
                   content_type: str | None) -> tuple[int, dict[str, Any]]:
    """Validate and land a publish request's rows (module doc of publisher.py); its status and body."""
    started = time.perf_counter()
    with service.publisher.announce() as ticket:  # events ready meanwhile wait for these objects
        return await _publish_announced(service, who, raw, content_type, started, ticket)


async def _publish_announced(service: Service, who: Principal, raw: bytes, content_type: str | None,
                             started: float, ticket: Announced) -> tuple[int, dict[str, Any]]:
    data = json_body(raw, content_type)
    single = isinstance(data, dict)
    rows = [data] if single else data
    if not isinstance(rows, list):
        raise invalid([FieldError("#", "", "send one object or an array of objects")])
    if len(rows) > schemas.MAX_BATCH:
        raise Problem(413, "batch-too-large", "Content too large",
                      f"{len(rows):,} objects in one request; send at most {schemas.MAX_BATCH:,}")
    if not rows:
        raise invalid([FieldError("#", "", "the array holds no object")])
    objects = [validated(TypeAdapter(schemas.ObjectIn), data)] if single else validated(OBJECTS, rows)
    given = [o.model_dump(exclude_none=True) for o in objects]
    prepared = await asyncio.to_thread(prepare_rows, given, (), t=None, source=f"api:{who.name}",
                                       bounds=service.config.bounds)
    outcome = await service.publisher.publish(prepared, len(given), ticket)
    refused = [schemas.RefusedRow(index=r.line - 1, field=field_of(r.reason), reason=r.reason)
               for r in outcome.refused]
    accepted = len(given) - len(refused)
    service.metrics.rows.labels("accepted").inc(accepted)
    service.metrics.rows.labels("refused").inc(len(refused))
    service.metrics.publish_seconds.observe(time.perf_counter() - started)
    if accepted == 0:
        errors = [FieldError(pointer(*(() if single else (r.index,)), r.field) if r.field else
                             pointer(*(() if single else (r.index,))), r.field, r.reason) for r in refused]
        raise invalid(errors, f"no object was published: {refused[0].reason}"
                      + (f" (and {len(refused) - 1} more; refused rows are quarantined)" if len(refused) > 1 else ""))
    body = schemas.PublishAccepted(t=outcome.t, accepted=accepted, refused=refused)
    return 202, body.model_dump()


def _publish_response(status: int, body: dict[str, Any], *, replayed: bool = False) -> Response:
    headers = {"Idempotent-Replayed": "true"} if replayed else {}
    if status >= 400:
        return Response(json.dumps(body).encode(), status_code=status, media_type=PROBLEM_JSON, headers=headers)
    return JSONResponse(body, status_code=status, headers=headers)


def _status(service: Service) -> dict[str, Any]:
    """The status document's pipeline half (blocking: in a thread)."""
    from dkmsks.storage import tables
    from dkmsks.storage.landing import sealed_through
    from dkmsks.storage.progress import summary

    s = summary(service.lake)
    sealed = sealed_through(service.config.warehouse, service.lake)
    lag = 0.0
    if s.pending:
        history = service.lake.table(tables.JOURNAL).history(1)
        committed = history[0].get("timestamp") if history else None
        lag = max(0.0, time.time() - committed / 1000) if committed else 0.0
    plan = s.plan
    m = service.metrics
    if s.last_processed is not None:
        m.last_processed.set(s.last_processed)
    m.pending.set(len(s.pending))
    m.lag.set(lag)
    return {
        "warehouse": str(service.config.warehouse),
        "plan_version": None if plan is None else plan.plan_version,
        "method": None if plan is None else plan.method,
        "workers": None if plan is None else plan.config.workers,
        "last_processed": s.last_processed,
        "next_open": None if sealed is None else sealed + 1,
        "pending_timestamps": len(s.pending),
        "lag_seconds": lag,
        "live_subscriptions": s.live,
        "worker_loads": [{"worker": w, "subscriptions": c, "load": load}
                         for w, (c, load) in enumerate(zip(s.worker_subscriptions, s.worker_loads, strict=True))],
    }


# --------------------------------------------------------------------------- the event stream response


class EventStream(Response):
    """One ``/v1/events`` stream as an ASGI response (module doc of events.py): its past (a
    replay or a reset), then live frames as the hub hands them over, with heartbeats; it ends
    when the client goes, when the client reads too slowly (the hub cancels it, or a write waits
    longer than ``send_timeout``), or when the service stops."""

    media_type = "text/event-stream"

    def __init__(self, service: Service, stream: Stream, mode: str, start: Position | None, at: int,
                 reason: str | None) -> None:
        super().__init__(status_code=200, media_type=self.media_type,
                         headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})
        self.service, self.stream, self.mode = service, stream, mode
        self.start, self.at, self.reason = start, at, reason

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Write the stream until it ends (class doc)."""
        service, stream, hub = self.service, self.stream, self.service.hub
        config = service.config
        task = asyncio.current_task()
        stream.task = task
        watcher = asyncio.get_running_loop().create_task(self._watch(receive))
        service.metrics.streams.inc()
        try:
            headers = [(k, v) for k, v in self.raw_headers if k != b"content-length"]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            first = [b"retry: 3000\n\n"]
            if self.mode == "reset":
                first.append(await hub.reset(stream, self.at, self.reason or "reset"))
            elif self.mode == "replay" and self.start is not None:
                first.extend(await hub.past(stream, self.start, self.at))
            else:
                first.append(f": live from {format_id((self.at, 3, 0))}\n\n".encode())
            for i in range(0, len(first), 256):
                await self._write(send, b"".join(first[i:i + 256]), config.send_timeout)
            while stream.closed is None:
                if stream.frames:
                    await self._write(send, stream.take(), config.send_timeout)
                    continue
                stream.wake.clear()
                try:
                    async with asyncio.timeout(config.heartbeat):
                        await stream.wake.wait()
                except TimeoutError:
                    await self._write(send, HEARTBEAT, config.send_timeout)
            if stream.closed == "stopping":
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if stream.closed != "overflow" or task is None:
                raise
            task.uncancel()  # the hub cut a stream that fell behind: end this call, not the server
            log.info("event stream of %s dropped: it fell %d bytes behind", stream.principal, config.stream_buffer)
        except _SlowClient:
            service.metrics.stream_dropped("slow")
            log.info("event stream of %s dropped: a write waited %g s", stream.principal, config.send_timeout)
        finally:
            hub.detach(stream)
            stream.close("ended")
            watcher.cancel()
            service.metrics.streams.dec()

    async def _write(self, send: Send, data: bytes, timeout: float) -> None:
        try:
            async with asyncio.timeout(timeout):
                await send({"type": "http.response.body", "body": data, "more_body": True})
        except TimeoutError:
            raise _SlowClient() from None

    async def _watch(self, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.stream.close("client")
                return


class _SlowClient(Exception):
    pass


# --------------------------------------------------------------------------- the application


def create_app(config: ServiceConfig) -> FastAPI:
    """The service's ASGI application over ``config.warehouse`` (its parts start with the app's
    lifespan: the publisher task and the journal tailer)."""
    warehouse = config.warehouse
    metrics = Metrics()
    registry = Registry(config.registry)
    lake = Lake.of(warehouse)
    hub = Hub(lake, registry, poll=config.poll, ring=config.ring, max_buffer=config.stream_buffer, metrics=metrics)
    publisher = Publisher(warehouse, linger=config.linger, observe=metrics.publish_append(), registry=registry)
    service = Service(config, lake, Client(warehouse, bounds=config.bounds), TokenStore(config.tokens),
                      RateLimiter(config.rate, config.burst), registry, metrics, hub, publisher)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        publisher.start()
        hub.start()
        try:
            yield
        finally:
            await hub.stop()
            await publisher.stop()
            registry.close()

    app = FastAPI(title="dkmsks", version=API_VERSION, lifespan=lifespan, docs_url=None, redoc_url=None,
                  description=("Exact location-aware publish/subscribe (DkM-SKS): publish geo-tagged objects, "
                               "register spatial-keyword kNN subscriptions and receive every change of their "
                               "exact results. Tokens: dkm token create."))
    app.state.service = service
    _routes(app)
    from dkmsks.service import livemap  # it imports this module's route helpers

    livemap.routes(app)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="/openapi.json", title="dkmsks API",
                                   swagger_js_url="/static/swagger-ui/swagger-ui-bundle.js",
                                   swagger_css_url="/static/swagger-ui/swagger-ui.css",
                                   swagger_favicon_url="/static/swagger-ui/favicon-32x32.png",
                                   swagger_ui_parameters={"validatorUrl": None})

    @app.exception_handler(Problem)
    async def on_problem(request: Request, problem: Exception) -> Response:
        assert isinstance(problem, Problem)
        return problem_response(problem, request.url.path)

    @app.exception_handler(RequestValidationError)
    async def on_invalid(request: Request, err: Exception) -> Response:
        assert isinstance(err, RequestValidationError)
        errors = []
        for e in err.errors():
            loc = tuple(p for p in e["loc"] if p not in ("body",))
            where = loc[1:] if loc and loc[0] in ("query", "path", "header") else loc
            names = [p for p in where if isinstance(p, str)]
            errors.append(FieldError(pointer(*where), names[-1] if names else "", str(e["msg"])))
        return problem_response(invalid(errors or [FieldError("#", "", "invalid request")]), request.url.path)

    @app.exception_handler(StarletteHTTPException)
    async def on_http(request: Request, err: Exception) -> Response:
        assert isinstance(err, StarletteHTTPException)
        titles = {404: ("not-found", "Not found"), 405: ("method-not-allowed", "Method not allowed")}
        kind, title = titles.get(err.status_code, ("http-error", "HTTP error"))
        return problem_response(Problem(err.status_code, kind, title, str(err.detail),
                                        headers=dict(err.headers or {})), request.url.path)

    @app.exception_handler(Exception)
    async def on_error(request: Request, err: Exception) -> Response:
        log.error("%s %s failed: %s: %s", request.method, request.url.path, type(err).__name__, err)
        return problem_response(Problem(500, "internal", "Internal error",
                                        "the service failed; the log names the cause"), request.url.path)

    app.add_middleware(BodyLimit, limit=config.max_body)
    app.add_middleware(RequestMetrics, metrics=metrics)
    return app
