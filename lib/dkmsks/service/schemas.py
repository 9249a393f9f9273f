"""The request and response bodies of the service (JSON; the OpenAPI document is made from these).

Requests are read strictly: an unknown field, a value of the wrong JSON type (``"1.5"`` for a
number, ``5.0`` for an id, ``true`` for ``k``) or a number that is not finite is refused before
any rule runs. The values' rules are the readers' (:mod:`dkmsks.io.formats`: keyword form and
length, ``k`` in ``[1, 1000]``, int64 ids, ``--bounds``), applied after, so the service accepts
exactly what a file may hold. The limits here are the request's, not the data's: at most
:data:`MAX_KEYWORDS` keywords a row and :data:`MAX_BATCH` objects a request, besides the body
size (``--max-body``).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

#: Keywords a row may carry in a request (real data has at most 22; the rules have no count limit).
MAX_KEYWORDS = 256
#: Objects one publish request may carry.
MAX_BATCH = 10_000
#: Subscriptions one event stream may name.
MAX_STREAM_SUBS = 1_000

_STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
Keywords = Annotated[list[str], Field(max_length=MAX_KEYWORDS,
                                      description="OR keywords: lower-case [a-z0-9] words joined by '_', each at "
                                                  "most 256 characters")]


class SubscriptionIn(BaseModel):
    """A subscription to register: where, which keywords (OR), how many nearest objects."""

    model_config = _STRICT

    id: int | None = Field(None, description="an int64; default: the service picks an unused one")
    x: float = Field(description="x coordinate (any finite number unless the service runs with --bounds)")
    y: float = Field(description="y coordinate, in the units of x")
    keywords: Keywords
    k: int = Field(description="how many nearest objects to keep (1..1000)")


class ObjectIn(BaseModel):
    """A geo-tagged object to publish."""

    model_config = _STRICT

    id: int = Field(description="an int64, unique over the whole stream")
    x: float
    y: float
    keywords: Keywords
    t: int | None = Field(None, description="timestamp; default: the next open one (the response says which)")


class SubscriptionCreated(BaseModel):
    """A registered subscription: its id and the timestamp it registers at (its result is exact
    from then on)."""

    id: int
    t: int


class SubscriptionDeleted(BaseModel):
    """A deletion landed: the subscription ends at timestamp ``t``."""

    id: int
    t: int


class Subscription(BaseModel):
    """A subscription as the warehouse holds it: ``live`` once its registration is processed,
    ``pending`` before."""

    id: int
    x: float
    y: float
    keywords: list[str]
    k: int
    t: int = Field(description="the timestamp it registered at")
    status: Literal["live", "pending"]
    owner: str | None = Field(None, description="the principal it belongs to (shown to admin only)")


class SubscriptionList(BaseModel):
    """The caller's subscriptions (admin: the ones made through the service)."""

    subscriptions: list[Subscription]


class Result(BaseModel):
    """The exact kNN of a subscription at processed timestamp ``t``, ordered by ``(distance,
    object id)``."""

    sub_id: int
    t: int
    object_ids: list[int]
    distances: list[float]


class RefusedRow(BaseModel):
    """A published row that was refused (and quarantined) with the readers' reason."""

    index: int = Field(description="0-based position in the request")
    field: str = Field(description="the field the reason is about ('' for the whole row)")
    reason: str


class PublishAccepted(BaseModel):
    """What a publish did: the timestamp the rows without one landed at, how many rows are
    landed (a replay of identical rows counts), and the refused ones."""

    t: int | None = Field(description="the timestamp rows without one landed at (None: every row named its own)")
    accepted: int
    refused: list[RefusedRow]


class WorkerLoad(BaseModel):
    """One worker's share of the current plan."""

    worker: int
    subscriptions: int
    load: float = Field(description="C(w), the estimated cost of its subscriptions")


class Status(BaseModel):
    """Where the pipeline is (``dkm status``) and what the service does."""

    warehouse: str
    plan_version: int | None
    method: str | None
    workers: int | None
    last_processed: int | None
    next_open: int | None
    pending_timestamps: int
    lag_seconds: float | None = Field(description="seconds since the journal's last commit while timestamps are "
                                                  "pending (0 when none is)")
    live_subscriptions: int | None
    worker_loads: list[WorkerLoad]
    streams: int
    events_through: int | None = Field(description="the last timestamp the event streams have delivered")


class FieldErrorDoc(BaseModel):
    """One wrong field."""

    pointer: str = Field(description="JSON pointer into the request body, e.g. #/2/x")
    field: str
    detail: str


class ProblemDoc(BaseModel):
    """RFC 9457 problem details."""

    type: str
    title: str
    status: int
    detail: str
    instance: str | None = None
    errors: list[FieldErrorDoc] | None = None


# --------------------------------------------------------------------------- the map's reads


class ObjectOut(BaseModel):
    """A landed object."""

    id: int
    x: float
    y: float
    keywords: list[str]
    t: int


class ObjectList(BaseModel):
    """Objects of the timestamps ``(since, until]``, or those asked for by id."""

    objects: list[ObjectOut]
    since: int | None = Field(description="exclusive start of the timestamps read (None: read by id)")
    until: int = Field(description="the last timestamp read (default: the last processed one)")
    total: int = Field(description="objects that matched, before the limit")
    truncated: bool = Field(description="whether the limit left some out (the newest timestamps are kept)")


class SnapshotSubscription(BaseModel):
    """A live subscription at the snapshot's timestamp: its place, ``k``, keywords, the worker
    that held it and its exact kNN, ordered by ``(distance, object id)``; the kNN ball's radius
    is the k-th distance when the result holds ``k`` objects."""

    id: int
    x: float
    y: float
    k: int
    keywords: list[str]
    worker: int
    registered_t: int
    object_ids: list[int]
    distances: list[float]
    owner: str | None = Field(None, description="the principal it belongs to (shown to admin only)")


class Snapshot(BaseModel):
    """The subscriptions a map shows at processed timestamp ``t`` and where their result
    objects are; at most ``limit`` of ``total``, in a fixed pseudo-random order of their ids."""

    t: int
    last_processed: int
    horizon: int | None = Field(description="the oldest timestamp whose results can still be read (as_of)")
    crs: Literal["wgs84", "projected"] = Field(description="wgs84: x is longitude and y latitude in degrees "
                                                           "(the map draws country and state outlines); projected: "
                                                           "plane coordinates, no basemap")
    space: list[float] | None = Field(description="the current plan's space, [xmin, ymin, xmax, ymax]")
    total: int
    truncated: bool
    subscriptions: list[SnapshotSubscription]
    objects: list[ObjectOut] = Field(description="every object of the subscriptions' results")
