"""The one SparkSession factory: Delta Lake, loopback binding, the warehouse's catalog.

Tests, Spark apps and the CLI all build their session here so that every path runs with the
same configuration. Tables live under ``<warehouse>/tables``; the session's catalog is Spark's
in-memory one, filled at start with the warehouse's tables (by path) and views
(:mod:`dkmsks.spark.catalog`), so any number of sessions — follow mode, publishers, ``dkm sql``,
DAG jobs — work on one warehouse at the same time, and ``spark-sql`` sees the same names
through :func:`dkmsks.spark.catalog.spark_sql_init`.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from dkmsks.warehouse import Warehouse

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Delta's Maven coordinate for pyspark 4.2 (Scala 2.13); used when no local jars are found.
DELTA_PACKAGE = "io.delta:delta-spark_4.2_2.13:4.4.0"
DEFAULT_MASTER = "local[2]"
_REPO = Path(__file__).resolve().parents[3]
#: The drivers' log settings (``$DKMSKS_LOG4J`` overrides, e.g. on a cluster image).
LOG_CONFIG = Path(os.environ.get("DKMSKS_LOG4J", _REPO / "conf" / "log4j2.properties"))


def event_log_dir(warehouse: Warehouse) -> Path:
    """Where sessions started with the UI keep their event logs (created on demand)."""
    folder = warehouse.run_dir / "spark-events"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def delta_jars(jars_dir: str | Path | None = None) -> list[Path]:
    """Delta jars fetched by ``scripts/bootstrap.sh`` (``$DKMSKS_JARS_DIR`` or ``.cache/jars``)."""
    env = os.environ.get("DKMSKS_JARS_DIR")
    folder = Path(jars_dir or (env if env is not None else _REPO / ".cache" / "jars"))
    return sorted(folder.glob("*.jar")) if folder.is_dir() else []


#: Bind addresses meaning "every interface" (a container's driver whose executors run elsewhere).
WILDCARDS = ("0.0.0.0", "::")


def driver_addresses() -> dict[str, str]:
    """Where the driver listens and what it tells executors to call it:
    ``$DKMSKS_DRIVER_BIND_ADDRESS`` (default 127.0.0.1; ``0.0.0.0`` in a container whose
    executors run elsewhere) and ``$DKMSKS_DRIVER_HOST`` (default: the bind address, or the
    container's host name when that is a wildcard)."""
    bind = os.environ.get("DKMSKS_DRIVER_BIND_ADDRESS") or "127.0.0.1"
    host = os.environ.get("DKMSKS_DRIVER_HOST") or (socket.gethostname() if bind in WILDCARDS else bind)
    return {"spark.driver.bindAddress": bind, "spark.driver.host": host}


def session_conf(
    warehouse: Warehouse,
    *,
    master: str | None = None,
    jars_dir: str | Path | None = None,
    shuffle_partitions: int = 8,
    ui: bool = False,
) -> dict[str, str]:
    """Every Spark setting of the project, as a plain dict (also used for spark-submit)."""
    jars = delta_jars(jars_dir)
    conf = {
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        # Tables are registered by path in each session (dkmsks.spark.catalog): no metastore
        # to share, so no limit on how many processes use one warehouse.
        "spark.sql.catalogImplementation": "in-memory",
        "spark.sql.warehouse.dir": str(warehouse.tables_root),
        # Loopback unless a deployment says otherwise (driver_addresses): executors on other
        # hosts or containers must reach the driver at an address they can route to.
        **driver_addresses(),
        "spark.ui.enabled": "true" if ui else "false",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.ui.showConsoleProgress": "false",
        # Delta's SQL parser does not implement Spark 4.1's parsePlanWithParameters, so the
        # new parse-time binding drops every :param (delta-io/delta#7640): even
        # "SELECT :v" fails as unbound. The analysis-time binding still works, for
        # IDENTIFIER(:name) in DDL/DML and for values alike. Measured with Spark 4.2/Delta 4.4.
        "spark.sql.legacy.parameterSubstitution.constantsOnly": "true",
        # Delta reconstructs table state with 50 partitions by default: pure overhead for
        # tables of a few files on a few cores. One at the default 8 shuffle partitions: a SQL
        # reader's two queries under follow mode's commits took 1.65 s p50 against 1.88 s with
        # four (1M warehouse, 48 queries each, interleaved; docs/benchmarks.md).
        "spark.databricks.delta.snapshotPartitions": str(max(1, shuffle_partitions // 8)),
        # Delta's VACUUM lists a table's folder in this many Spark tasks whatever the folder
        # holds (Spark's default is 10,000, meant for tables of thousands of partition folders;
        # ours have none): a VACUUM of a three-file table took 56 s on two cores, 6.9 s with 8.
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": str(shuffle_partitions),
    }
    # Under spark-submit (PYSPARK_GATEWAY_PORT is set by its launcher) the master comes from
    # the command line; setting it here would silently override --master.
    if master or "PYSPARK_GATEWAY_PORT" not in os.environ:
        conf["spark.master"] = master or os.environ.get("DKMSKS_SPARK_MASTER", DEFAULT_MASTER)
        # The driver is the main server and holds O_init's structures: Spark's 1 GiB default
        # is too small at paper scale (1M objects). Only settable before the JVM starts.
        conf["spark.driver.memory"] = os.environ.get("DKMSKS_DRIVER_MEMORY", "4g")
        conf["spark.driver.maxResultSize"] = os.environ.get("DKMSKS_DRIVER_MAX_RESULT", "2g")
    if ui:
        # The UI on loopback, and event logs so a finished job can still be inspected with
        # `dkm spark-history` (Spark's history server over <warehouse>/run/spark-events).
        conf["spark.ui.host"] = "127.0.0.1"
        conf["spark.eventLog.enabled"] = "true"
        conf["spark.eventLog.dir"] = event_log_dir(warehouse).as_uri()
    # The project's log settings (conf/log4j2.properties: expected warnings quieted by name).
    # DKMSKS_DRIVER_JAVA_OPTS adds JVM flags (the test suite's short-lived drivers start faster
    # with -XX:TieredStopAtLevel=1; that flag alone cuts the code cache to 48 MB, so
    # scripts/test.sh sets it back).
    java_opts = [f"-Dlog4j2.configurationFile={LOG_CONFIG.as_uri()}"] if LOG_CONFIG.is_file() else []
    java_opts += os.environ.get("DKMSKS_DRIVER_JAVA_OPTS", "").split()
    if java_opts:
        conf["spark.driver.extraJavaOptions"] = " ".join(java_opts)
    if warehouse.location is not None:
        # Tables on object storage: S3A, credentials from the environment (never a setting), and
        # Delta's commits by create-if-absent (dkmsks.spark.s3).
        from dkmsks.spark.s3 import s3_jars, s3a_conf

        conf.update(s3a_conf())
        found = s3_jars()
        if not found:
            raise FileNotFoundError("the S3 connector's jars are missing (.cache/jars-s3): run scripts/bootstrap.sh")
        extra = found
    else:
        extra = []
    if jars or extra:
        conf["spark.jars"] = ",".join(str(j) for j in [*jars, *extra])
    if not jars:
        conf["spark.jars.packages"] = DELTA_PACKAGE
    return conf


def build_session(
    warehouse: Warehouse,
    *,
    app_name: str = "dkmsks",
    master: str | None = None,
    jars_dir: str | Path | None = None,
    shuffle_partitions: int = 8,
    ui: bool = False,
    extra_conf: dict[str, str] | None = None,
) -> SparkSession:
    """A SparkSession with Delta whose catalog holds ``warehouse``'s tables and views.

    ``master`` defaults to ``$DKMSKS_SPARK_MASTER`` or ``local[2]``; a ``spark://host:port``
    master works the same. Python workers use this interpreter (``PYSPARK_PYTHON``), so the
    venv's numpy/pyarrow are found, and the driver binds to 127.0.0.1 only.
    """
    from pyspark.sql import SparkSession

    from dkmsks.spark.catalog import register

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    bind = driver_addresses()["spark.driver.bindAddress"]
    if bind not in WILDCARDS:  # a wildcard is no address to call this host by: Spark then uses its name
        os.environ.setdefault("SPARK_LOCAL_IP", bind)
    warehouse.root.mkdir(parents=True, exist_ok=True)
    builder = SparkSession.builder.appName(app_name)
    conf = session_conf(
        warehouse, master=master, jars_dir=jars_dir, shuffle_partitions=shuffle_partitions, ui=ui
    )
    conf.update(extra_conf or {})
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    if warehouse.location is not None:
        require_s3a(spark)
    register(spark, warehouse)
    return spark


def require_s3a(spark: SparkSession) -> None:
    """Raise FileNotFoundError, one line naming the fix, unless the driver can load S3A: under
    spark-submit the driver's class path is the command line's (``--jars``), and jars in the
    session's settings (:func:`session_conf`) come too late for it. Without this check the job
    failed at its first table with a Py4J stack trace ending in ``ClassNotFoundException: Class
    org.apache.hadoop.fs.s3a.S3AFileSystem not found``."""
    from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]

    from dkmsks.spark.s3 import S3A_FILESYSTEM

    try:
        spark.sparkContext._jsc.hadoopConfiguration().getClassByName(S3A_FILESYSTEM)
    except Py4JJavaError:
        raise FileNotFoundError(
            f"the warehouse is on object storage, but this Spark driver cannot load {S3A_FILESYSTEM}: give "
            "spark-submit the S3 jars (--jars with .cache/jars-s3/*.jar beside Delta's; "
            "dkmsks.spark.session.spark_submit_conf_args lists them)") from None


def stop_session_and_jvm(spark: SparkSession) -> None:
    """Stop the session AND this process's JVM (e.g. so a class-data archive is written).

    ``spark.stop()`` alone leaves PySpark's JVM running; it exits when its stdin closes, and
    the next :func:`build_session` starts a fresh one.
    """
    from pyspark import SparkContext

    spark.stop()
    gateway = SparkContext._gateway
    if gateway is not None:
        proc = getattr(gateway, "proc", None)
        gateway.shutdown()
        if proc is not None:
            if proc.stdin is not None:
                proc.stdin.close()
            try:
                proc.wait(timeout=60)
            except Exception:  # noqa: BLE001 - a JVM that ignores its closed stdin is killed
                proc.kill()
                proc.wait(timeout=60)
    SparkContext._gateway = None
    SparkContext._jvm = None


def spark_submit_conf_args(warehouse: Warehouse, **kwargs: object) -> list[str]:
    """``--conf k=v`` arguments reproducing :func:`session_conf` for spark-submit/spark-sql."""
    conf = session_conf(warehouse, **kwargs)  # type: ignore[arg-type]
    args: list[str] = []
    for key, value in conf.items():
        if key == "spark.master":
            args += ["--master", value]
        elif key == "spark.jars":
            args += ["--jars", value]
        else:
            args += ["--conf", f"{key}={value}"]
    return args
