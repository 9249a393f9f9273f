"""``dkm serve``: the HTTP service over a warehouse (publish, subscribe, results, events; no Spark).

An ASGI application (:mod:`dkmsks.service`) run by uvicorn on a socket this command opens:
loopback by default, ``TCP_USER_TIMEOUT`` set so that the kernel ends a connection whose peer
stopped reading (an event stream's slow client, docs/design.md §10), TLS when given a
certificate. ``scripts/serve.sh start|status|stop`` runs it in the background.
"""

from __future__ import annotations

import argparse
import socket
from typing import TYPE_CHECKING, Any

from dkmsks.commands.spark_common import add_warehouse, warehouse_of
from dkmsks.commands.token import add_tokens
from dkmsks.io.formats import BOUNDS_HELP, bounds_option

if TYPE_CHECKING:
    import uvicorn
    from fastapi import FastAPI

DEFAULT_PORT = 8750
#: How long written data may stay unacknowledged before the kernel drops the connection (ms).
USER_TIMEOUT_MS = 30_000


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``dkm serve`` and its flags to the ``dkm`` parser."""
    p = subparsers.add_parser(
        "serve",
        help="serve the pipeline over HTTP: publish, subscribe, results, Server-Sent Events (no Spark)",
        description=("An HTTP service over a warehouse for apps on other machines: POST /v1/objects, "
                     "/v1/subscriptions, their results and /v1/events (Server-Sent Events of every result "
                     "change, resumable with Last-Event-ID), /v1/status, /metrics; OpenAPI at /docs. Bearer "
                     "tokens with scopes from dkm token create. Binds to 127.0.0.1 unless --host says otherwise."),
    )
    add_warehouse(p, spark=False)
    add_tokens(p)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s: this machine only)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="port (default %(default)s; 0: any free one)")
    p.add_argument("--ssl-certfile", default=None, metavar="PEM", help="serve HTTPS with this certificate")
    p.add_argument("--ssl-keyfile", default=None, metavar="PEM", help="the certificate's private key")
    p.add_argument("--bounds", type=bounds_option, default=None, metavar="BOUNDS", help=BOUNDS_HELP)
    p.add_argument("--rate", type=float, default=50.0, help="requests a second per token (default %(default)s)")
    p.add_argument("--burst", type=int, default=100, help="requests a token may make at once (default %(default)s)")
    p.add_argument("--max-body", type=int, default=2 << 20, metavar="BYTES",
                   help="largest request body (default %(default)s; a larger one is refused with 413)")
    p.add_argument("--poll", type=float, default=0.25, help="seconds between looks at the journal (%(default)s)")
    p.add_argument("--heartbeat", type=float, default=15.0, help="seconds between keep-alive comments on a quiet "
                                                                 "event stream (%(default)s)")
    p.add_argument("--stream-buffer", type=int, default=1 << 20, metavar="BYTES",
                   help="unsent bytes a stream may hold before its client is cut off as too slow (%(default)s)")
    p.add_argument("--ring", type=int, default=100_000,
                   help="recent result changes kept in memory for resuming streams (%(default)s)")
    p.add_argument("--registry", default=None, metavar="FILE",
                   help="subscription owners and idempotency keys (default <warehouse>/run/service-<database>.sqlite3)")
    p.add_argument("--map-crs", default="auto", choices=["auto", "wgs84", "projected"],
                   help="the live map's coordinates (/map): wgs84 draws country and state outlines under "
                        "longitude/latitude, projected draws none; auto: wgs84 with --bounds wgs84 or when the plan's "
                        "space lies within longitude/latitude's range (default %(default)s)")
    p.add_argument("--frame-ancestor", action="append", default=[], metavar="ORIGIN",
                   help="an origin that may embed /map in a frame, e.g. Airflow's http://127.0.0.1:8080 (repeat)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.set_defaults(func=run)


def listening_socket(host: str, port: int) -> socket.socket:
    """A bound, listening TCP socket with ``TCP_USER_TIMEOUT`` (inherited by its connections)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if hasattr(socket, "TCP_USER_TIMEOUT"):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, USER_TIMEOUT_MS)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def server(app: FastAPI, **options: Any) -> uvicorn.Server:
    """A uvicorn server for the service's ``app`` that ends the event streams first when it is
    told to stop (they never end on their own, and uvicorn waits for open responses)."""
    import uvicorn

    class Server(uvicorn.Server):
        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            app.state.service.hub.end_streams()
            await super().shutdown(sockets)

    options.setdefault("timeout_graceful_shutdown", 3)
    return Server(uvicorn.Config(app, server_header=False, proxy_headers=False, lifespan="on", **options))


def check_origin(text: str) -> str:
    """An origin for ``--frame-ancestor``: ``scheme://host[:port]``, nothing else (it goes into a
    Content-Security-Policy header)."""
    import re

    if not re.fullmatch(r"https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?|https?://\[[0-9A-Fa-f:]+\](:[0-9]{1,5})?", text):
        raise ValueError(f"--frame-ancestor {text!r}: give an origin, scheme://host[:port] "
                         "(e.g. http://127.0.0.1:8080), without a path")
    return text


def run(args: argparse.Namespace) -> int:
    """Run ``dkm serve`` with the parsed ``args``; the exit status."""
    from pathlib import Path

    from dkmsks.service.app import ServiceConfig, create_app
    from dkmsks.service.auth import mode_of, tokens_path
    from dkmsks.service.registry import registry_path

    if (args.ssl_certfile is None) != (args.ssl_keyfile is None):
        raise ValueError("give both --ssl-certfile and --ssl-keyfile, or neither")
    warehouse = warehouse_of(args)
    tokens = tokens_path(warehouse.run_dir, args.tokens)
    if not tokens.exists():
        raise ValueError(f"no tokens file at {tokens}: create a token first (dkm token create --name NAME "
                         "--scope admin), or name the file with --tokens")
    mode = mode_of(tokens)
    if mode is not None and mode & 0o077:
        raise ValueError(f"{tokens} is readable by others (mode {mode:o}): chmod 600 it")
    config = ServiceConfig(
        warehouse=warehouse, tokens=tokens,
        registry=Path(args.registry).resolve() if args.registry else registry_path(warehouse.run_dir,
                                                                                   warehouse.database),
        bounds=args.bounds, rate=args.rate, burst=args.burst, max_body=args.max_body, poll=args.poll,
        heartbeat=args.heartbeat, stream_buffer=args.stream_buffer, ring=args.ring, map_crs=args.map_crs,
        frame_ancestors=tuple(check_origin(o) for o in args.frame_ancestor))
    sock = listening_socket(args.host, args.port)
    host, port = sock.getsockname()[:2]
    scheme = "https" if args.ssl_certfile else "http"
    print(f"dkm serve: {warehouse} on {scheme}://{host}:{port} (docs at /docs)", flush=True)
    served = server(create_app(config), log_level=args.log_level, ssl_certfile=args.ssl_certfile,
                    ssl_keyfile=args.ssl_keyfile)
    served.run(sockets=[sock])
    return 0
