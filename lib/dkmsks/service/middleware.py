"""The service's pure-ASGI middleware: a request body's size limit (413 before a route reads
it) and the requests' counts and times for ``/metrics``."""

from __future__ import annotations

import time

from fastapi.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dkmsks.service.metrics import Metrics
from dkmsks.service.problems import PROBLEM_JSON, Problem


class BodyLimit:
    """Refuse a request body over ``limit`` bytes with 413, before the route reads any of it:
    by its ``Content-Length``, or, for a chunked body, as soon as what arrived passes it. The
    body read is handed on to the route as it came."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI call."""
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length")
        too_large = Problem(413, "body-too-large", "Content too large",
                            f"the request body is larger than {self.limit:,} bytes (--max-body)")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await send_problem(send, too_large if declared.isdigit() else
                                Problem(400, "bad-request", "Bad request", "Content-Length is not a number"),
                                scope.get("path"))
            return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await send_problem(send, too_large, scope.get("path"))
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


class RequestMetrics:
    """Count requests by route template and status, and time them to their first byte."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI call."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                route = getattr(scope.get("route"), "path", None) or "unmatched"
                self.metrics.request_seconds.labels(route).observe(time.perf_counter() - started)
            await send(message)

        try:
            await self.app(scope, receive, counted)
        finally:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            self.metrics.requests.labels(route, str(status)).inc()


async def send_problem(send: Send, problem: Problem, instance: str | None) -> None:
    """Answer with ``problem`` from middleware (no route ran) and close the connection."""
    body = problem.encode(instance)
    headers = [(b"content-type", PROBLEM_JSON.encode()), (b"content-length", str(len(body)).encode()),
               (b"connection", b"close")]
    headers += [(k.lower().encode(), v.encode()) for k, v in problem.headers.items()]
    await send({"type": "http.response.start", "status": problem.status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def problem_response(problem: Problem, instance: str | None = None) -> Response:
    """A problem as a response."""
    return Response(problem.encode(instance), status_code=problem.status, media_type=PROBLEM_JSON,
                    headers=problem.headers)
