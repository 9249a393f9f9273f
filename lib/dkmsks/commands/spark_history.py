"""``dkm spark-history``: Spark's history server over a warehouse's event logs, on 127.0.0.1.

Jobs started with ``--spark-ui`` write event logs to ``<warehouse>/run/spark-events``; this
serves them (every finished job's stages, tasks and SQL plans) at http://127.0.0.1:PORT until
interrupted.
"""

from __future__ import annotations

import argparse

from dkmsks.commands.spark_common import add_warehouse, warehouse_of


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``dkm spark-history`` and its flags to the ``dkm`` parser."""
    p = subparsers.add_parser(
        "spark-history",
        help="Spark's history server for jobs run with --spark-ui (127.0.0.1)",
        description="Serves the event logs of jobs started with --spark-ui on http://127.0.0.1:PORT.",
    )
    add_warehouse(p, spark=False)
    p.add_argument("--port", type=int, default=18080, help="(%(default)s)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``dkm spark-history`` with the parsed ``args``; the exit status."""
    import os
    import sys
    from pathlib import Path

    import pyspark

    from dkmsks.spark.session import event_log_dir

    folder = event_log_dir(warehouse_of(args))
    spark_home = Path(pyspark.__file__).resolve().parent
    env = dict(os.environ, SPARK_HOME=str(spark_home), SPARK_LOCAL_IP="127.0.0.1",
               SPARK_HISTORY_OPTS=f"-Dspark.history.fs.logDirectory={folder.as_uri()} "
                                  f"-Dspark.history.ui.port={args.port}")
    print(f"serving {folder} at http://127.0.0.1:{args.port} (Ctrl-C stops it)", file=sys.stderr, flush=True)
    cmd = [str(spark_home / "bin" / "spark-class"), "org.apache.spark.deploy.history.HistoryServer"]
    os.execve(cmd[0], cmd, env)
    return 0  # not reached
