"""Each Spark session's catalog: the warehouse's Delta tables registered by path, and the views.

Why not a shared metastore: an embedded Derby metastore admits one JVM at a time, so follow
mode, a publisher and a ``dkm sql`` reader could not run side by side; a metastore server
(Derby's network server, PostgreSQL) would be one more service to start, secure and keep in
step with the folders. The warehouse's folders already say which tables exist
(:class:`~dkmsks.warehouse.Warehouse`), so every session uses Spark's in-memory catalog and
registers them at start: an existing table by its path, a missing one by running its DDL from
``sql/ddl`` (a managed table lands at the same conventional path). The user views of
``sql/views`` are created over them. ``spark-sql`` gets the same registrations from an init
file (:func:`spark_sql_init`). Registering costs a Delta log read per table (README, "Spark,
Delta and SQL", has the measurement behind this choice).

Two processes may create a missing table at the same moment: Delta lets one commit version 0
and the other fails; the loser then registers the winner's table by path.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from dkmsks.spark.sql_files import run_sql, statement
from dkmsks.storage import tables
from dkmsks.storage.lake import has_table
from dkmsks.warehouse import DEFAULT_DATABASE, Warehouse

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The session variable ``sql/views/knn_current.sql`` reads as ``${hivevar:...}`` (Spark's variable
#: substitution reads ``hivevar:`` names from the session's conf, spark-sql's from ``--hivevar``):
#: substituted when the view is created, so the view holds a literal Delta can skip files by.
HORIZON_VARIABLE = "knn_state_through_t"


def register(spark: SparkSession, warehouse: Warehouse) -> None:
    """Make the warehouse's database current in ``spark`` with every table and view (idempotent)."""
    if warehouse.database != DEFAULT_DATABASE:
        spark.sql("CREATE DATABASE IF NOT EXISTS IDENTIFIER(:db)", args={"db": warehouse.database})
    spark.catalog.setCurrentDatabase(warehouse.database)
    for name in tables.ALL_TABLES:
        _register_table(spark, warehouse, name)
    _set_horizon(spark, warehouse)
    for view in tables.VIEWS:
        run_sql(spark, f"views/{view}.sql")


def refresh_views(spark: SparkSession, warehouse: Warehouse) -> int:
    """Re-create ``knn_current`` with the snapshot's current horizon; returns the horizon.

    A session registers the view with the horizon of its start (:func:`state_horizon`); later
    compactions leave it correct but reading more of the journal than it needs. A session that
    lives for hours (a notebook, a dashboard) calls this now and then; ``knn_results`` reads
    ``knn_current`` by name, so it follows.
    """
    horizon = _set_horizon(spark, warehouse)
    run_sql(spark, "views/knn_current.sql")
    return horizon


def state_horizon(warehouse: Warehouse) -> int:
    """The ``knn_state`` snapshot's mark (:func:`dkmsks.storage.state_io.snapshot_mark`), what
    ``knn_current`` skips the journal's final records up to; :data:`MIN_T` for an empty snapshot."""
    from dkmsks.storage.lake import Lake
    from dkmsks.storage.state_io import MIN_T, snapshot_mark

    mark = snapshot_mark(Lake.of(warehouse))
    return MIN_T if mark is None else mark


def _set_horizon(spark: SparkSession, warehouse: Warehouse) -> int:
    """Put :func:`state_horizon` into the session's conf for the views' text; returns it."""
    horizon = state_horizon(warehouse)
    spark.conf.set(HORIZON_VARIABLE, str(horizon))
    return horizon


def _register_table(spark: SparkSession, warehouse: Warehouse, name: str, attempts: int = 5) -> None:
    from pyspark.errors import AnalysisException

    if spark.catalog.tableExists(name):
        return
    for attempt in range(attempts):
        try:
            if has_table(warehouse, name):
                spark.catalog.createTable(name, path=warehouse.table_uri(name, scheme="s3a"), source="delta")
            else:
                run_sql(spark, f"ddl/{name}.sql", table=name)
            return
        except AnalysisException:
            # Another process created the table between our look and our create: register
            # its table on the next attempt (its _delta_log appears with its first commit).
            if spark.catalog.tableExists(name) or attempt == attempts - 1:
                raise
            time.sleep(0.2 * (attempt + 1))


def spark_sql_init(warehouse: Warehouse) -> str:
    """The statements that register ``warehouse``'s tables and views in a ``spark-sql`` shell
    (``spark-sql -i FILE --hivevar tables=... --hivevar database=...``, :func:`spark_sql_vars`):
    ``sql/spark_sql/register_tables.sql`` and the views of ``sql/views``. The tables must exist
    (any ``dkm`` command that starts Spark creates them)."""
    missing = [name for name in tables.ALL_TABLES if not has_table(warehouse, name)]
    if missing:
        raise ValueError(f"{warehouse}: tables {', '.join(missing)} do not exist yet; run any dkm command "
                         "that starts Spark on this warehouse first (e.g. dkm run, or dkm sql \"SHOW TABLES\")")
    statements = [statement("spark_sql/register_tables.sql")]
    statements += [statement(f"views/{view}.sql") for view in tables.VIEWS]
    return ";\n".join(statements) + ";\n"


def spark_sql_vars(warehouse: Warehouse) -> dict[str, str]:
    """The ``--hivevar`` values :func:`spark_sql_init`'s statements refer to."""
    return {"tables": warehouse.tables_location, "database": warehouse.database,
            HORIZON_VARIABLE: str(state_horizon(warehouse))}


def write_spark_sql_init(warehouse: Warehouse, path: Path) -> Path:
    """Write :func:`spark_sql_init`'s statements to ``path``; returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(spark_sql_init(warehouse), encoding="utf-8")
    return path
