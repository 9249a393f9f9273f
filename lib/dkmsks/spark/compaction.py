"""Compaction: the journal's uncompacted ``final`` records merged into the ``knn_state`` snapshot.

Runs commit by appending to the journal only (:mod:`dkmsks.storage.journal`); readers overlay the
journal's tail on the snapshot (:mod:`dkmsks.storage.state_io`, the ``knn_current`` view), so
results are exact whether or not a compaction has run. Compaction is maintenance that keeps the
tail short: one Spark MERGE, tagged with Delta's idempotent transaction id so a retry is
skipped, under the writer lock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dkmsks.spark.faults import kill_at, kill_on_new_file, table_data_files
from dkmsks.spark.sql_files import run_sql
from dkmsks.storage import tables
from dkmsks.storage.journal import last_processed
from dkmsks.storage.lake import Lake, where
from dkmsks.storage.plans import current_plan
from dkmsks.storage.state_io import StateView
from dkmsks.storage.writer_lock import check_writer, writer_lock
from dkmsks.warehouse import Warehouse

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Compact when the journal holds at least this many uncompacted final records...
COMPACT_MIN_ROWS = 100_000
#: ...or more than this fraction of the state.
COMPACT_FRACTION = 0.25


def uncompacted_rows(view: StateView) -> int:
    """Final records of the snapshot's plan newer than the snapshot."""
    return view.lake.read(
        tables.JOURNAL, columns=["sub_id"], version=view.journal_version,
        predicate=where(record__eq="final", plan_version__eq=view.plan_version, t__gt=view.through_t),
    ).num_rows


def tail_is_large(tail_rows: int, state_rows: int) -> bool:
    """Whether a tail of ``tail_rows`` rows calls for compacting ``state_rows`` rows."""
    return tail_rows >= max(COMPACT_MIN_ROWS, COMPACT_FRACTION * state_rows)


def compact(spark: SparkSession, warehouse: Warehouse, *, force: bool = False) -> int | None:
    """MERGE the journal's uncompacted final records into ``knn_state`` (one commit).

    Without ``force`` only when the tail is large (:func:`tail_is_large`). Returns the new
    ``knn_state`` version, or None.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from dkmsks.spark.delta_io import delta_txn

    lake = Lake.of(warehouse)
    with writer_lock(warehouse, "compaction"):
        info = current_plan(lake)
        if info is None:
            return None
        view = StateView.open(lake, fallback_plan=info.plan_version)
        tail = uncompacted_rows(view)
        state_rows = lake.read(tables.STATE, columns=["sub_id"], version=view.state_version).num_rows
        if tail == 0 or (not force and not tail_is_large(tail, state_rows)):
            return None
        through = last_processed(lake)
        if through is None:  # final records are committed with their ledger records
            raise RuntimeError("the journal holds final records but no ledger record")
        # Equal t: the upsert wins, as in state_io.overlay and knn_current.
        newest = Window.partitionBy("sub_id").orderBy(F.col("t").desc(), F.col("change").desc())
        src = (
            spark.read.option("versionAsOf", view.journal_version).table(tables.JOURNAL)
            .where((F.col("record") == "final") & (F.col("plan_version") == view.plan_version)
                   & (F.col("t") > view.through_t))
            .withColumn("_n", F.row_number().over(newest)).where("_n = 1").drop("_n")
        )
        temp = "_dkmsks_compaction_src"
        src.createOrReplaceTempView(temp)
        try:
            with delta_txn(spark, "dkmsks-compact", through,
                           {"job": "compact", "plan_version": view.plan_version, "through_t": through}):
                # Test-only (DKMSKS_FAULT_KILL_AT, dkmsks.spark.faults): die before the MERGE, or
                # once it has written a data file and before its commit.
                kill_at("compaction")
                check_writer(warehouse)  # on object storage: still the writer (dkmsks.storage.leases)
                with kill_on_new_file("compaction-write", table_data_files(warehouse, tables.STATE)):
                    run_sql(spark, "dml/merge_state.sql", target=tables.STATE, source=temp)
        finally:
            spark.catalog.dropTempView(temp)
        return lake.version(tables.STATE)
