"""Delta writes with idempotency and commit metadata, through session confs.

Delta skips a write whose ``(txnAppId, txnVersion)`` it has already committed for a table,
which makes every write of a run safe to replay. The session confs cover MERGE as well as
appends and overwrites; they are set around one statement and always unset.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pyspark.sql import DataFrame, SparkSession

_APP = "spark.databricks.delta.write.txnAppId"
_VERSION = "spark.databricks.delta.write.txnVersion"
_META = "spark.databricks.delta.commitInfo.userMetadata"


@contextmanager
def delta_txn(
    spark: SparkSession, app_id: str | None = None, version: int | None = None,
    metadata: dict[str, Any] | None = None,
) -> Iterator[None]:
    """Tag the writes inside the block with a Delta transaction id and/or commit metadata."""
    conf = spark.conf
    if app_id is not None and version is not None:
        conf.set(_APP, app_id)
        conf.set(_VERSION, str(int(version)))
    if metadata is not None:
        conf.set(_META, json.dumps(metadata, sort_keys=True))
    try:
        yield
    finally:
        for key in (_APP, _VERSION, _META):
            conf.unset(key)


def insert(
    spark: SparkSession, df: DataFrame, table: str, *, overwrite: bool = False,
    app_id: str | None = None, version: int | None = None, metadata: dict[str, Any] | None = None,
) -> None:
    """Append (or overwrite) ``df`` into ``table`` by column name, idempotently when tagged."""
    columns = spark.table(table).columns
    with delta_txn(spark, app_id, version, metadata):
        df.select(*columns).write.insertInto(table, overwrite=overwrite)


def latest_version(spark: SparkSession, table: str) -> int:
    """The latest version of the Delta table ``table``."""
    from delta.tables import DeltaTable

    return int(DeltaTable.forName(spark, table).history(1).collect()[0].version)
