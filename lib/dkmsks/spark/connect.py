"""SQL for remote clients: a Spark Connect server whose sessions see the warehouse's tables and views.

Spark Connect (shipped with pyspark 4.2: ``org.apache.spark.sql.connect.service.SparkConnectService``)
is a gRPC service inside a Spark driver; a client (``pyspark.sql.connect``, the
``pyspark-client`` package) sends it unresolved plans and gets Arrow batches back, without a JVM of
its own. Every client gets a session of its own, made from the driver's: it shares the driver's
*catalog*, not its temporary state. So the server is started here, in the driver of a session
built as every dkmsks session is (:func:`dkmsks.spark.session.build_session`: Delta, loopback,
the in-memory catalog), *after* the warehouse's tables and views are registered in that catalog
(:func:`dkmsks.spark.catalog.register` makes tables by path and persistent views, which every
session of the driver sees, ``spark.sql.catalog.spark_catalog.defaultDatabase`` naming the
warehouse's database): a client connects to a driver whose catalog is complete. (Spark's
``start-connect-server.sh``, or the plugin ``org.apache.spark.sql.connect.SparkConnectPlugin``,
would start it before any registration.) ``knn_current``'s text holds the snapshot's mark of when
it was made (:data:`~dkmsks.spark.catalog.HORIZON_VARIABLE`); the server makes it again every
``refresh`` seconds, so a server that runs for days does not read ever more of the journal.

**Who may call.** Spark Connect checks who calls only with a pre-shared token
(``spark.connect.authenticate.token``, Spark 4: a gRPC interceptor that compares the request's
``Authorization: Bearer`` with it and answers UNAUTHENTICATED otherwise); it has no TLS and no
users. So the server binds to 127.0.0.1 by default and always requires a token: 32 random
bytes in a file of mode 600 (``<warehouse>/run/spark-connect-<database>.token``), made by
``scripts/spark_connect.sh start``, read here and by ``dkm sql --remote`` on the same host (a
client on another host gets the token from the operator, and reaches the port through an SSH
tunnel or a TLS-terminating proxy: the token must never cross a network in clear). The token is
set in the driver's configuration, which Spark redacts wherever it shows configuration (its
default ``spark.redaction.regex`` matches ``token``), and never on a command line.

    dkm spark-connect [--warehouse W] [--host 127.0.0.1] [--port 15002] [--token-file F]
"""

from __future__ import annotations

import os
import secrets
import signal
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from dkmsks.warehouse import DEFAULT_DATABASE, Warehouse

if TYPE_CHECKING:
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

DEFAULT_PORT = 15002
#: Seconds between re-creations of knn_current with the snapshot's current mark.
REFRESH_SECONDS = 300.0
#: What the server prints once clients can connect (scripts/spark_connect.sh waits for it).
READY = "dkm spark-connect: serving"
_LOOPBACK = ("localhost", "127.0.0.1", "::1", "[::1]")


def token_path(warehouse: Warehouse) -> Path:
    """The server's token file on this host: ``<warehouse>/run/spark-connect-<database>.token``."""
    return warehouse.run_dir / f"spark-connect-{warehouse.database}.token"


def make_token(path: Path) -> str:
    """A new token (32 random bytes, URL-safe) written to ``path`` with mode 600; the token."""
    token = secrets.token_urlsafe(32)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, (token + "\n").encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return token


def read_token(path: Path) -> str:
    """The token of ``path``, which must be readable by its owner only."""
    try:
        mode = path.stat().st_mode & 0o777
    except FileNotFoundError:
        raise ValueError(f"no Spark Connect token at {path}: scripts/spark_connect.sh start makes one, or give "
                         "--token-file") from None
    if mode & 0o077:
        raise ValueError(f"{path} is readable by others (mode {mode:o}): chmod 600 it")
    token = path.read_text().strip()
    if len(token) < 32:
        raise ValueError(f"{path} holds no token of at least 32 characters")
    return token


def server_conf(warehouse: Warehouse, host: str, port: int, token: str) -> dict[str, str]:
    """The Spark settings of the Connect server beside the session's own."""
    conf = {"spark.connect.grpc.binding.address": host, "spark.connect.grpc.binding.port": str(port),
            "spark.connect.authenticate.token": token}
    if warehouse.database != DEFAULT_DATABASE:
        # Each client's session starts in this database (a static setting, read when one is made).
        conf["spark.sql.catalog.spark_catalog.defaultDatabase"] = warehouse.database
    return conf


def serve(warehouse: Warehouse, *, host: str = "127.0.0.1", port: int = DEFAULT_PORT, token: str,
          master: str | None = None, refresh: float = REFRESH_SECONDS, stop: threading.Event | None = None) -> int:
    """Run the Connect server until SIGTERM or SIGINT (or ``stop`` is set); the exit status."""
    from dkmsks.spark.catalog import refresh_views
    from dkmsks.spark.session import build_session

    stop = stop or threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    spark = build_session(warehouse, app_name="dkmsks-spark-connect", master=master,
                          extra_conf=server_conf(warehouse, host, port, token))
    jvm = spark._jvm
    assert jvm is not None, "a classic session has a JVM"
    service = jvm.org.apache.spark.sql.connect.service.SparkConnectService
    try:
        service.start(spark.sparkContext._jsc.sc())
        print(f"{READY} {warehouse} on sc://{'localhost' if host in _LOOPBACK else host}:{port} "
              f"(token from {token_path(warehouse)})", flush=True)
        last = time.monotonic()
        while not stop.wait(1.0):
            if time.monotonic() - last >= refresh:
                refresh_views(spark, warehouse)
                last = time.monotonic()
    finally:
        service.stop(None)
        spark.stop()
    print("dkm spark-connect: stopped", flush=True)
    return 0


def remote_session(url: str, token: str | None, *, retries: int = 4) -> RemoteSparkSession:
    """A Spark Connect client session on ``url`` (``sc://host:port``) holding ``token``.

    pyspark sends a token only over TLS, except to ``localhost``, where gRPC's local credentials
    check that the connection stays on this machine. This client treats 127.0.0.1 and ::1 the
    same, so the server's loopback address works as written; to any other host the token goes
    over TLS (``;use_ssl=true`` is implied by a token), which a TLS-terminating proxy provides.
    A request that finds no server is retried ``retries`` times within ~4 s (pyspark's default
    tries for ten minutes), so a command says at once that nothing answers.
    """
    import grpc
    from pyspark.sql.connect.client import DefaultChannelBuilder
    from pyspark.sql.connect.session import SparkSession as RemoteSession

    class Builder(DefaultChannelBuilder):
        def toChannel(self) -> grpc.Channel:  # noqa: N802 - pyspark's name
            if self.token is not None and not self.use_ssl and self.url.hostname in _LOOPBACK:
                credentials = grpc.composite_channel_credentials(
                    grpc.local_channel_credentials(grpc.LocalConnectionType.LOCAL_TCP),
                    grpc.access_token_call_credentials(self.token))
                return self._secure_channel(self.endpoint, credentials)
            return super().toChannel()

    from pyspark.sql.connect.client.retries import DefaultPolicy

    builder = Builder(url)
    if token is not None:
        builder.set("token", token)
    spark = RemoteSession.builder.channelBuilder(builder).getOrCreate()
    spark.client.set_retry_policies([DefaultPolicy(max_retries=retries, max_backoff=2000)])
    return spark


def remote_error(err: Exception, url: str) -> str:
    """One line for a failed remote call: the gRPC status and its details (pyspark's message
    quotes the whole RPC object)."""
    import re

    text = str(err)
    status = re.search(r"StatusCode\.([A-Z_]+)", text)
    details = re.search(r'details = "([^"]*)"', text)
    if status is not None:
        hint = {"UNAUTHENTICATED": " (the server's token: --token-file, or $SPARK_CONNECT_AUTHENTICATE_TOKEN)",
                "UNAVAILABLE": " (is it running? scripts/spark_connect.sh status)"}.get(status.group(1), "")
        return f"{url}: {status.group(1)}: {details.group(1) if details else ''}{hint}"
    return f"{url}: {text.strip().splitlines()[0] if text.strip() else type(err).__name__}"
