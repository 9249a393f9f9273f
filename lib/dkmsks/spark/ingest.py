"""Files -> Delta landing tables, idempotently, with rejected rows quarantined.

Ingesting the same file twice leaves every table unchanged: objects merge insert-only on
their id, events on ``(id, t, op)`` and quarantine rows on ``(target, source, line, reason)``.
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


def _quarantine(spark: SparkSession, rejected: DataFrame, target: str, run_id: str) -> int:
    rows = rejected.select(
        F.lit(target).alias("target"), "source", "line", "reason", "text", F.lit(run_id).alias("run_id")
    ).cache()
    count = rows.count()
    if count:
        _merge(spark, rows, QUARANTINE_TABLE, "dml/merge_quarantine.sql")
    rows.unpersist()
    return count


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
    accepted, rejected = read_objects_df(spark, path, bounds=bounds)
    accepted = _window(accepted, after, upto)
    rows = accepted.withColumn("source", F.lit(Path(path).name)).select(
        "id", "x", "y", "keywords", "t", "source", "line"
    ).cache()
    n = rows.count()
    _merge(spark, rows, OBJECTS_TABLE, "dml/merge_objects.sql")
    rows.unpersist()
    return IngestReport(OBJECTS_TABLE, n, _quarantine(spark, rejected, OBJECTS_TABLE, run_id))


def ingest_events(
    spark: SparkSession, path: str | Path, *, run_id: str, bounds: Rect | None = WGS84,
    after: int | None = None, upto: int | None = None,
) -> IngestReport:
    """Validate a subscription events file and merge its good rows (``after < t <= upto``) into
    ``subscription_events``."""
    accepted, rejected = read_events_df(spark, path, bounds=bounds)
    accepted = _window(accepted, after, upto)
    rows = accepted.withColumn("source", F.lit(Path(path).name)).select(
        "op", "id", "x", "y", "keywords", "k", "t", "source", "line"
    ).cache()
    n = rows.count()
    _merge(spark, rows, EVENTS_TABLE, "dml/merge_subscription_events.sql")
    rows.unpersist()
    return IngestReport(EVENTS_TABLE, n, _quarantine(spark, rejected, EVENTS_TABLE, run_id))
