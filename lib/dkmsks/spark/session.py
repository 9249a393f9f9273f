"""The one SparkSession factory: Delta Lake, loopback binding, a persistent metastore.

Tests, Spark apps and the CLI all build their session here so that every path runs with the
same configuration. Tables live under ``<warehouse>/tables`` and the Hive metastore (embedded
Derby) under ``<warehouse>/metastore_db``, so Spark SQL — ``dkm sql`` or the ``spark-sql``
shell started with :func:`spark_sql_shell_args` — sees the tables and views across runs.

Embedded Derby admits one JVM per metastore: a second one fails deep inside Hive after minutes
of retries (``XSDB6``). So a session on an embedded metastore first takes the warehouse's
*metastore lock* (an ``flock`` on ``<warehouse>/locks/metastore.lock``, freed by the kernel when
the process dies) and keeps it while its JVM lives; a second job waits for it with a message
naming the holder, up to ``DKMSKS_LOCK_TIMEOUT`` seconds. Jobs that must run side by side
(follow mode next to ``dkm sql``) need an external metastore (docker-compose's PostgreSQL),
set through ``extra_conf``/``spark-defaults``, which skips the lock.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Delta's Maven coordinate for pyspark 4.2 (Scala 2.13); used when no local jars are found.
DELTA_PACKAGE = "io.delta:delta-spark_4.2_2.13:4.4.0"
DEFAULT_MASTER = "local[2]"
_REPO = Path(__file__).resolve().parents[3]


def delta_jars(jars_dir: str | Path | None = None) -> list[Path]:
    """Delta jars fetched by ``scripts/bootstrap.sh`` (``$DKMSKS_JARS_DIR`` or ``.cache/jars``)."""
    folder = Path(jars_dir or os.environ.get("DKMSKS_JARS_DIR", _REPO / ".cache" / "jars"))
    return sorted(folder.glob("*.jar")) if folder.is_dir() else []


def session_conf(
    warehouse: str | Path,
    *,
    master: str | None = None,
    jars_dir: str | Path | None = None,
    shuffle_partitions: int = 8,
    ui: bool = False,
) -> dict[str, str]:
    """Every Spark setting of the project, as a plain dict (also used for spark-submit)."""
    warehouse = Path(warehouse).resolve()
    jars = delta_jars(jars_dir)
    conf = {
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.catalogImplementation": "hive",
        "spark.sql.warehouse.dir": str(warehouse / "tables"),
        "spark.hadoop.javax.jdo.option.ConnectionURL": (
            f"jdbc:derby:;databaseName={warehouse / 'metastore_db'};create=true"
        ),
        # derby.log goes next to the metastore instead of the current directory;
        # DKMSKS_DRIVER_JAVA_OPTS adds JVM flags (the test suite's short-lived drivers start
        # 27% faster with -XX:TieredStopAtLevel=1: 11.3 -> 8.2 s for an empty micro-batch;
        # that flag alone cuts the code cache to 48 MB, so scripts/test.sh sets it back).
        "spark.driver.extraJavaOptions": " ".join(
            [f"-Dderby.system.home={warehouse}", *os.environ.get("DKMSKS_DRIVER_JAVA_OPTS", "").split()]),
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
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
        # tables of a few files on a few cores.
        "spark.databricks.delta.snapshotPartitions": str(max(1, shuffle_partitions // 2)),
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
        conf["spark.ui.host"] = "127.0.0.1"
    if jars:
        conf["spark.jars"] = ",".join(str(j) for j in jars)
    else:
        conf["spark.jars.packages"] = DELTA_PACKAGE
    return conf


def build_session(
    warehouse: str | Path,
    *,
    app_name: str = "dkmsks",
    master: str | None = None,
    jars_dir: str | Path | None = None,
    shuffle_partitions: int = 8,
    ui: bool = False,
    extra_conf: dict[str, str] | None = None,
) -> SparkSession:
    """A SparkSession with Delta and the project's metastore under ``warehouse``.

    ``master`` defaults to ``$DKMSKS_SPARK_MASTER`` or ``local[2]``; a ``spark://host:port``
    master works the same. Python workers use this interpreter (``PYSPARK_PYTHON``), so the
    venv's numpy/pyarrow are found, and the driver binds to 127.0.0.1 only.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    Path(warehouse).mkdir(parents=True, exist_ok=True)
    builder = SparkSession.builder.appName(app_name)
    conf = session_conf(
        warehouse, master=master, jars_dir=jars_dir, shuffle_partitions=shuffle_partitions, ui=ui
    )
    conf.update(extra_conf or {})
    if conf["spark.hadoop.javax.jdo.option.ConnectionURL"].startswith("jdbc:derby:"):
        hold_metastore_lock(warehouse, app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.enableHiveSupport().getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


#: Metastore locks this process holds: warehouse -> the open handle holding the flock.
_metastore_locks: dict[str, IO[str]] = {}


def metastore_lock_path(warehouse: str | Path) -> Path:
    return Path(warehouse).resolve() / "locks" / "metastore.lock"


def hold_metastore_lock(warehouse: str | Path, job: str, *, timeout: float | None = None) -> None:
    """Take the embedded metastore's lock for the rest of this process (or until
    :func:`stop_session_and_jvm`); a no-op when this process already holds it."""
    from dkmsks.spark.writer_lock import acquire

    key = str(Path(warehouse).resolve())
    if key in _metastore_locks:
        return
    _metastore_locks[key] = acquire(
        metastore_lock_path(warehouse), f"{job} (embedded metastore)", timeout=timeout,
        on_wait=lambda holder: print(
            f"{job}: waiting for the embedded metastore of {key}, held by {holder} "
            f"(one Spark application per warehouse; up to DKMSKS_LOCK_TIMEOUT s)",
            file=sys.stderr, flush=True))


def stop_session_and_jvm(spark: SparkSession) -> None:
    """Stop the session AND this process's JVM, then free the metastore lock.

    ``spark.stop()`` alone leaves PySpark's JVM running with Derby booted (and its files
    locked), which would lock out a child process using the same warehouse. PySpark's JVM
    exits when its stdin closes; the next :func:`build_session` starts a fresh one.
    """
    from pyspark import SparkContext

    warehouse = spark.conf.get("spark.sql.warehouse.dir").removeprefix("file:")
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
    handle = _metastore_locks.pop(str(Path(warehouse).parent.resolve()), None)
    if handle is not None:
        from dkmsks.spark.writer_lock import release

        release(handle)


def use_database(spark: SparkSession, name: str | None) -> None:
    """Make ``name`` (created if absent) the session's current database; None keeps ``default``.

    One warehouse can hold several independent pipelines, one per database (tests and
    benchmarks use this; every table and view name resolves in the current database).
    """
    if not name or name == "default":
        return
    spark.sql("CREATE DATABASE IF NOT EXISTS IDENTIFIER(:db)", args={"db": name})
    spark.catalog.setCurrentDatabase(name)


def spark_submit_conf_args(warehouse: str | Path, **kwargs: object) -> list[str]:
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
