"""The live map at ``/map`` and the two reads it makes (docs/design.md §10, "The live map").

=============================  =========  ====================================================
route                          scope      what
=============================  =========  ====================================================
``GET /v1/snapshot``           subscribe  live subscriptions at ``as_of`` (default: the last processed
                                          timestamp) with place, k, keywords, worker, exact kNN, and
                                          where their result objects are (admin: every one, else the
                                          caller's); ``box``, ``limit``, ``sub``
``GET /v1/objects``            subscribe  objects of the timestamps ``(since, until]``, or by ``ids``
``GET /map``                   none       the page (no data in it: it asks for a token)
=============================  =========  ====================================================

The page (``web/map.html``, ``map.js``, ``map.css``) draws the space the engine measures
distances in — Euclidean on ``(x, y)`` — with Leaflet's ``CRS.Simple``, so a kNN ball (radius
the k-th distance) is a circle on the screen; for longitude/latitude data that is the
equirectangular projection, with the country outlines of world-atlas and the US states of
us-atlas under it, and plane coordinates get no basemap (``--map-crs``). Everything it loads is
served here (vendored by ``scripts/vendor_web.sh``): no tile server, no CDN.

**Who the page is.** The page holds no data and needs no login to load; it asks for a token
(``dkm token create``), keeps it in the tab's ``sessionStorage`` and sends it as an
``Authorization`` header with every ``fetch()``, the event stream included (a browser's
``EventSource`` cannot send headers, and a token in a URL would reach access logs and
browser history). A Content-Security-Policy admits only this origin's scripts, styles and
connections, and framing only by this origin and the ``--frame-ancestor`` origins (Airflow's,
whose plugin embeds the page).

**What objects are shown.** Objects are what every subscriber's results are made of; a token
with the ``subscribe`` scope may read the objects of any timestamp (the page shows the last
few), as it sees their ids and distances in its results.
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request
from fastapi.responses import FileResponse, HTMLResponse, Response

from dkmsks.io.formats import WGS84, Bounds
from dkmsks.service import schemas
from dkmsks.service.app import Service, Subscriber, service_of
from dkmsks.service.auth import Principal
from dkmsks.service.bodies import ERRORS
from dkmsks.service.problems import FieldError, Problem, invalid

WEB = Path(__file__).resolve().parent / "web"
#: The page's own files besides map.html.
_ASSETS = {"map.js": "text/javascript; charset=utf-8", "map.css": "text/css; charset=utf-8"}
#: Snapshot sizes: default and most subscriptions a page gets at once.
SNAPSHOT_LIMIT, SNAPSHOT_MAX = 2_000, 20_000
#: Objects a read returns by default and at most; ids one read may name.
OBJECTS_LIMIT, OBJECTS_MAX, IDS_MAX = 20_000, 100_000, 10_000
#: Choices of ``--map-crs``.
CRS_CHOICES = ("auto", "wgs84", "projected")


def map_crs(choice: str, bounds: Bounds | None, space: tuple[float, float, float, float] | None) -> str:
    """``wgs84`` or ``projected``: as chosen, else (``auto``) by the service's ``--bounds``
    (``wgs84``, or a box: projected), else by the plan's space (inside longitude/latitude's
    range: wgs84)."""
    if choice != "auto":
        return choice
    if bounds is not None:
        return "wgs84" if bounds == WGS84 else "projected"
    if space is None:
        return "projected"
    xmin, ymin, xmax, ymax = space
    return "wgs84" if WGS84.xmin <= xmin and xmax <= WGS84.xmax and WGS84.ymin <= ymin and ymax <= WGS84.ymax \
        else "projected"


def parse_box(text: str | None) -> tuple[float, float, float, float] | None:
    """``xmin,ymin,xmax,ymax`` as four finite numbers with ``xmin <= xmax`` and ``ymin <= ymax``."""
    if text is None:
        return None
    parts = text.split(",")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        values = []
    if len(values) != 4 or not all(math.isfinite(v) for v in values) or values[0] > values[2] \
            or values[1] > values[3]:
        raise invalid([FieldError("#box", "box", f"{text!r}: give xmin,ymin,xmax,ymax, four finite numbers with "
                                                 "xmin <= xmax and ymin <= ymax")])
    return values[0], values[1], values[2], values[3]


def content_security_policy(frame_ancestors: tuple[str, ...]) -> str:
    """The page's policy: this origin only, framed by it and ``frame_ancestors``."""
    ancestors = " ".join(["'self'", *frame_ancestors])
    return ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
            f"frame-ancestors {ancestors}; base-uri 'none'; form-action 'none'")


def _object_rows(table: Any) -> list[dict[str, Any]]:
    return [{"id": int(r["id"]), "x": r["x"], "y": r["y"], "keywords": sorted(r["keywords"] or []), "t": int(r["t"])}
            for r in table.to_pylist()]


def _read_problem(err: ValueError, name: str = "as_of") -> Problem:
    text = str(err)
    if "beyond the as-of horizon" in text:
        return Problem(410, "beyond-horizon", "Gone", text)
    if "nothing processed yet" in text:
        return Problem(503, "not-ready", "Not ready", text, headers={"Retry-After": "5"})
    return invalid([FieldError(f"#{name}", name, text)])


def _snapshot(service: Service, who: Principal, as_of: int | None, box: tuple[float, float, float, float] | None,
              limit: int, sub: list[int] | None) -> dict[str, Any]:
    """The snapshot document (blocking: in a thread)."""
    from dkmsks.storage.export import resolve_as_of
    from dkmsks.storage.plans import current_plan
    from dkmsks.storage.snapshot import objects_by_id, subscriptions_as_of

    lake, registry = service.lake, service.registry
    t = resolve_as_of(lake, as_of)
    allowed: list[int] | None = None
    if not who.is_admin:  # the caller's subscriptions then
        mine = {sid for sid, _ in registry.owned_by(who.name)}
        allowed = sorted(s for s in mine if registry.owner_at(s, t) == who.name)
    if sub is not None:
        allowed = sorted(set(sub) if allowed is None else set(sub) & set(allowed))
    snap = subscriptions_as_of(lake, t, sub_ids=allowed, box=box, limit=limit)
    rows = snap.subscriptions.to_pylist()
    wanted = sorted({int(o) for r in rows for o in r["object_ids"] or ()})
    objects = _object_rows(objects_by_id(lake, wanted, through=t)) if wanted else []
    info = current_plan(lake)
    space = None if info is None else tuple(float(v) for v in info.space.as_tuple())
    last = service.hub.position
    if last is None or last < t:
        last = resolve_as_of(lake, None)
    subscriptions = [schemas.SnapshotSubscription(
        id=r["sub_id"], x=r["x"], y=r["y"], k=r["k"], keywords=r["keywords"], worker=r["worker"],
        registered_t=r["registered_t"], object_ids=r["object_ids"] or [],
        distances=[math.sqrt(d) for d in r["d2"] or ()],
        owner=registry.owner_of_registration(r["sub_id"], r["registered_t"]) if who.is_admin else None).model_dump()
        for r in rows]
    return {"t": snap.t, "last_processed": last, "horizon": service.hub.horizon,
            "crs": map_crs(service.config.map_crs, service.config.bounds, space),  # type: ignore[arg-type]
            "space": None if space is None else list(space), "total": snap.total,
            "truncated": snap.total > len(rows), "subscriptions": subscriptions, "objects": objects}


def routes(app: FastAPI) -> None:
    """Add the map's page and reads to ``app``."""

    @app.get("/v1/snapshot", response_model=schemas.Snapshot,
             responses={**ERRORS, 410: {"description": "as_of is beyond the as-of horizon"}}, tags=["map"])
    async def snapshot(request: Request, who: Subscriber,
                       as_of: Annotated[int | None, Query(description="a processed timestamp (default: the "
                                                                      "last)")] = None,
                       box: Annotated[str | None, Query(description="xmin,ymin,xmax,ymax: only subscriptions "
                                                                    "inside")] = None,
                       limit: Annotated[int, Query(ge=1, le=SNAPSHOT_MAX)] = SNAPSHOT_LIMIT,
                       sub: Annotated[list[int] | None, Query(max_length=schemas.MAX_STREAM_SUBS,
                                                              description="only these ids (repeat)")] = None,
                       ) -> dict[str, Any]:
        """The live subscriptions at ``as_of`` with their place, ``k``, keywords, the worker
        that held them, their exact kNN (the ball's radius is the k-th distance) and where
        their result objects are: every subscription for admin, the caller's otherwise. At most
        ``limit`` (of ``total``), chosen in a fixed pseudo-random order of their ids."""
        service = service_of(request)
        area = parse_box(box)
        try:
            return await asyncio.to_thread(_snapshot, service, who, as_of, area, limit, sub)
        except ValueError as err:
            raise _read_problem(err) from None

    @app.get("/v1/objects", response_model=schemas.ObjectList, responses=ERRORS, tags=["map"])
    async def list_objects(request: Request, who: Subscriber,
                           since: Annotated[int | None, Query(description="objects of timestamps after this")] = None,
                           until: Annotated[int | None, Query(description="through this timestamp (default: the "
                                                                          "last processed)")] = None,
                           ids: Annotated[list[int] | None, Query(max_length=IDS_MAX,
                                                                  description="these objects (repeat)")] = None,
                           box: Annotated[str | None, Query(description="xmin,ymin,xmax,ymax")] = None,
                           limit: Annotated[int, Query(ge=1, le=OBJECTS_MAX)] = OBJECTS_LIMIT,
                           ) -> dict[str, Any]:
        """Landed objects with coordinates: those of the timestamps ``(since, until]`` (the
        newest kept when there are more than ``limit``), or those named by ``ids``."""
        from dkmsks.storage.journal import last_processed
        from dkmsks.storage.snapshot import objects_between, objects_by_id

        service = service_of(request)
        area = parse_box(box)
        if (since is None) == (ids is None):
            raise invalid([FieldError("#since", "since", "give either since (a timestamp) or ids")])
        through = until if until is not None else service.hub.position
        if through is None:
            through = await asyncio.to_thread(last_processed, service.lake)
        if through is None:
            raise Problem(503, "not-ready", "Not ready", "nothing is processed yet", headers={"Retry-After": "5"})
        if ids is not None:
            table = await asyncio.to_thread(objects_by_id, service.lake, ids[:limit], through=through)
            rows = _object_rows(table)
            return {"objects": rows, "since": None, "until": through, "total": len(rows), "truncated": False}
        assert since is not None
        table, total = await asyncio.to_thread(objects_between, service.lake, since, through, box=area, limit=limit)
        return {"objects": _object_rows(table), "since": since, "until": through, "total": total,
                "truncated": total > table.num_rows}

    @app.get("/map", include_in_schema=False)
    async def page(request: Request) -> Response:
        """The live map's page."""
        config = service_of(request).config
        return HTMLResponse((WEB / "map.html").read_bytes(), headers=_page_headers(config.frame_ancestors))

    @app.get("/map/{name}", include_in_schema=False)
    async def asset(request: Request, name: str) -> Response:
        """The page's script and style sheet."""
        if name not in _ASSETS:
            raise Problem(404, "not-found", "Not found", f"no file {name} of the map")
        return FileResponse(WEB / name, media_type=_ASSETS[name], headers={"X-Content-Type-Options": "nosniff",
                                                                           "Cache-Control": "no-cache"})


def _page_headers(frame_ancestors: tuple[str, ...]) -> dict[str, str]:
    return {"Content-Security-Policy": content_security_policy(frame_ancestors), "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer", "Cache-Control": "no-cache"}
