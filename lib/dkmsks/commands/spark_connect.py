"""``dkm spark-connect``: a Spark Connect server over the warehouse's tables and views, for SQL
from clients without a JVM (``dkm sql --remote``, ``pyspark.sql.connect``); docs in
:mod:`dkmsks.spark.connect`. ``scripts/spark_connect.sh start|status|stop`` runs it in the
background with a PID file, a log and the token file."""

from __future__ import annotations

import argparse
from pathlib import Path

from dkmsks.commands.spark_common import add_warehouse, warehouse_of


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``dkm spark-connect`` and its flags to the ``dkm`` parser."""
    from dkmsks.spark.connect import DEFAULT_PORT, REFRESH_SECONDS

    p = subparsers.add_parser(
        "spark-connect",
        help="serve Spark SQL over the warehouse to remote clients (Spark Connect, token required)",
        description=("Starts a Spark driver whose catalog holds the warehouse's tables and views, then Spark "
                     "Connect in it (gRPC), bound to 127.0.0.1 unless --host says otherwise. Clients must send "
                     "the token of --token-file (default <warehouse>/run/spark-connect-<database>.token, mode 600; "
                     "scripts/spark_connect.sh start makes it): dkm sql --remote sc://localhost:PORT \"SELECT ...\"."),
    )
    add_warehouse(p)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s: this machine only)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="port (default %(default)s)")
    p.add_argument("--token-file", type=Path, default=None,
                   help="the token clients must send (default <warehouse>/run/spark-connect-<database>.token)")
    p.add_argument("--refresh", type=float, default=REFRESH_SECONDS,
                   help="seconds between re-creations of knn_current with the snapshot's mark (%(default)s)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``dkm spark-connect`` until SIGTERM; the exit status."""
    from dkmsks.spark.connect import read_token, serve, token_path

    warehouse = warehouse_of(args)
    token = read_token(args.token_file or token_path(warehouse))
    return serve(warehouse, host=args.host, port=args.port, token=token, master=args.master,
                 refresh=args.refresh)
