"""``dkm spark-sql``: Spark's SQL shell on a warehouse, with its tables and views by name.

Runs the ``spark-sql`` of this environment's pyspark with the project's settings
(:func:`dkmsks.spark.session.spark_submit_conf_args`: Delta, loopback, the in-memory catalog)
and an init file that registers the warehouse's tables by path and creates the views
(:func:`dkmsks.spark.catalog.spark_sql_init`). Works without an activated venv: it sets
``SPARK_HOME`` and ``PATH`` itself. ``-e SQL`` and ``-f FILE`` run statements and exit; without them
the interactive shell starts; anything after ``--`` goes to ``spark-sql`` as it is.
"""

from __future__ import annotations

import argparse

from dkmsks.commands.spark_common import add_warehouse, warehouse_of


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``dkm spark-sql`` and its flags to the ``dkm`` parser."""
    p = subparsers.add_parser(
        "spark-sql",
        help="Spark's SQL shell with the warehouse's tables and views registered",
        description=("Starts spark-sql (from this environment's pyspark) with the project's Spark settings "
                     "and the warehouse's tables and views, e.g. dkm spark-sql -e \"SELECT * FROM "
                     "worker_loads\". Other arguments go to spark-sql."),
    )
    add_warehouse(p)
    p.add_argument("-e", dest="execute", default=None, metavar="SQL", help="run these statements and exit")
    p.add_argument("-f", dest="file", default=None, metavar="FILE", help="run the statements of FILE and exit")
    p.add_argument("spark_sql_args", nargs=argparse.REMAINDER,
                   help="more arguments for spark-sql, after --")
    p.set_defaults(func=run)


def command(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """The ``spark-sql`` command line and environment (separate for tests)."""
    import os
    import sys
    from pathlib import Path

    import pyspark

    from dkmsks.spark.catalog import spark_sql_vars, write_spark_sql_init
    from dkmsks.spark.session import spark_submit_conf_args

    warehouse = warehouse_of(args)
    init = write_spark_sql_init(warehouse, warehouse.run_dir / f"spark-sql-init-{warehouse.database}.sql")
    spark_home = Path(pyspark.__file__).resolve().parent
    bin_dir = str(Path(sys.executable).parent)
    env = dict(os.environ, SPARK_HOME=str(spark_home), PYSPARK_PYTHON=sys.executable,
               SPARK_LOCAL_IP="127.0.0.1", PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))
    extra = list(args.spark_sql_args)
    if extra[:1] == ["--"]:
        extra = extra[1:]
    if args.execute is not None:
        extra += ["-e", args.execute]
    if args.file is not None:
        extra += ["-f", args.file]
    cmd = [str(spark_home / "bin" / "spark-sql"), *spark_submit_conf_args(warehouse, master=args.master),
           *(arg for key, value in spark_sql_vars(warehouse).items() for arg in ("--hivevar", f"{key}={value}")),
           "-i", str(init), *extra]
    return cmd, env


def run(args: argparse.Namespace) -> int:
    """Run ``dkm spark-sql``: replace this process with spark-sql."""
    import os

    cmd, env = command(args)
    os.execve(cmd[0], cmd, env)
    return 0  # not reached
