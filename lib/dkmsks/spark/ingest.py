"""Files -> Delta landing tables, idempotently, with rejected rows quarantined.

Ingesting the same file twice leaves every table unchanged: objects merge insert-only on
their id, events on ``(id, t, op)`` and quarantine rows on ``(target, source, line, reason)``.

Rows are checked against what is already landed and processed, not only within their file:
an object id landed earlier with other values, a row for a timestamp the micro-batches have
already processed (it would never be applied), an insert of a subscription live from an
earlier batch or a delete of one that is not live are quarantined with their reason; a row
equal to a landed one is a replay and changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from dkmsks.core.model import Rect
from dkmsks.io.formats import WGS84
from dkmsks.spark.readers import read_events_df, read_objects_df
from dkmsks.spark.sql_files import run_sql

OBJECTS_TABLE = "objects"
EVENTS_TABLE = "subscription_events"
QUARANTINE_TABLE = "quarantine"

_DDL = {
    OBJECTS_TABLE: "ddl/objects.sql",
    EVENTS_TABLE: "ddl/subscription_events.sql",
    QUARANTINE_TABLE: "ddl/quarantine.sql",
}


def ensure_landing_tables(spark: SparkSession) -> None:
    """Create the landing tables if they do not exist (idempotent)."""
    for table, ddl in _DDL.items():
        run_sql(spark, ddl, table=table)


@dataclass(frozen=True)
class IngestReport:
    table: str
    accepted: int
    rejected: int


def _merge(spark: SparkSession, df: DataFrame, target: str, merge_sql: str) -> None:
    view = f"_dkmsks_src_{target}"
    df.createOrReplaceTempView(view)
    try:
        run_sql(spark, merge_sql, target=target, source=view)
    finally:
        spark.catalog.dropTempView(view)


def _processed_through(spark: SparkSession) -> int | None:
    """The last timestamp the micro-batches processed (``ledger``), None before partitioning."""
    from dkmsks.spark import tables

    if not spark.catalog.tableExists(tables.LEDGER):
        return None
    value = spark.table(tables.LEDGER).agg(F.max("t").alias("t")).collect()[0].t
    return None if value is None else int(value)


def _landed(spark: SparkSession, table: str) -> DataFrame | None:
    return spark.table(table) if spark.catalog.tableExists(table) else None


def _write(spark: SparkSession, rows: DataFrame, rejected: DataFrame, table: str, merge_sql: str,
           run_id: str) -> tuple[int, int]:
    """Materialise the accepted and the rejected rows, then merge both (in that order).

    Both are computed before either write: the checks read the landed table, which the merge
    changes. Returns the numbers of accepted rows and of newly quarantined rows.
    """
    rows = rows.localCheckpoint(eager=True)
    quarantined = rejected.select(
        F.lit(table).alias("target"), "source", "line", "reason", "text", F.lit(run_id).alias("run_id")
    )
    if spark.catalog.tableExists(QUARANTINE_TABLE):
        # A line keeps its first verdict: re-reading a file (a retry, a later publish window)
        # must not quarantine a line again because it now also reads as late.
        judged = spark.table(QUARANTINE_TABLE).select("target", "source", "line")
        quarantined = quarantined.join(judged, ["target", "source", "line"], "left_anti")
    quarantined = quarantined.localCheckpoint(eager=True)
    n, n_rejected = rows.count(), quarantined.count()
    _merge(spark, rows, table, merge_sql)
    if n_rejected:
        _merge(spark, quarantined, QUARANTINE_TABLE, "dml/merge_quarantine.sql")
    return n, n_rejected


def _window(df: DataFrame, after: int | None, upto: int | None) -> DataFrame:
    if after is not None:
        df = df.where(F.col("t") > after)
    if upto is not None:
        df = df.where(F.col("t") <= upto)
    return df


def ingest_objects(
    spark: SparkSession, path: str | Path, *, run_id: str, bounds: Rect | None = WGS84,
    after: int | None = None, upto: int | None = None,
) -> IngestReport:
    """Validate an objects file and merge its good rows (``after < t <= upto``) into ``objects``."""
    accepted, rejected = read_objects_df(spark, path, bounds=bounds, landed=_landed(spark, OBJECTS_TABLE),
                                         processed_through=_processed_through(spark))
    accepted = _window(accepted, after, upto)
    rows = accepted.withColumn("source", F.lit(Path(path).name)).select(
        "id", "x", "y", "keywords", "t", "source", "line"
    )
    n, n_rejected = _write(spark, rows, rejected, OBJECTS_TABLE, "dml/merge_objects.sql", run_id)
    return IngestReport(OBJECTS_TABLE, n, n_rejected)


def ingest_events(
    spark: SparkSession, path: str | Path, *, run_id: str, bounds: Rect | None = WGS84,
    after: int | None = None, upto: int | None = None,
) -> IngestReport:
    """Validate a subscription events file and merge its good rows (``after < t <= upto``) into
    ``subscription_events``."""
    accepted, rejected = read_events_df(spark, path, bounds=bounds, landed=_landed(spark, EVENTS_TABLE),
                                        processed_through=_processed_through(spark))
    accepted = _window(accepted, after, upto)
    rows = accepted.withColumn("source", F.lit(Path(path).name)).select(
        "op", "id", "x", "y", "keywords", "k", "t", "source", "line"
    )
    n, n_rejected = _write(spark, rows, rejected, EVENTS_TABLE, "dml/merge_subscription_events.sql", run_id)
    return IngestReport(EVENTS_TABLE, n, n_rejected)
