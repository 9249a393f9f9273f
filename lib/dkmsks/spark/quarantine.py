"""Refused subscription events into the ``quarantine`` table, from a run's main server."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dkmsks.spark.sql_files import run_sql
from dkmsks.storage import tables

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def quarantine_refused(spark: SparkSession, refused: list[tuple[int, int, str]], run_id: str) -> None:
    """``(t, sub id, reason)`` rows into ``quarantine`` (an idempotent MERGE; before the journal
    commit, so a crash between the two only repeats a no-op)."""
    if not refused:
        return
    rows = [("subscription_events", "microbatch", int(t), reason, str(sid), run_id) for t, sid, reason in refused]
    rej = spark.createDataFrame(
        rows, "target string, source string, line long, reason string, text string, run_id string")
    view = "_dkmsks_rejected"
    rej.createOrReplaceTempView(view)
    try:
        run_sql(spark, "dml/merge_quarantine.sql", target=tables.QUARANTINE, source=view)
    finally:
        spark.catalog.dropTempView(view)
