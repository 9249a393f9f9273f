"""Files -> Delta landing tables, idempotently, with rejected rows quarantined.

Ingesting the same file twice leaves every table unchanged: objects merge insert-only on
their id, events on ``(id, t, op)`` and quarantine rows on ``(target, source, line, reason)``.

Rows are checked against what is already landed and processed, not only within their file:
an object id landed earlier with other values, a row for a timestamp the micro-batches have
already processed (it would never be applied), an insert of a subscription live from an
earlier batch or a delete of one that is not live are quarantined with their reason; a row
equal to a landed one is a replay and changes nothing.

Nothing is written before every file of a call (:func:`ingest_files`) has been read to its end
and validated. So a file that is unusable as a whole — truncated or corrupt gzip data, missing
columns — raises :class:`~dkmsks.io.rejections.InputError` and loads nothing, from any of the
files. A file that has rows and rejects every one raises
:class:`~dkmsks.io.rejections.AllRowsRejected` naming the commonest reasons: the quarantine rows
of every file of the call are written first, so they can be inspected (``dkm status``, the
``quarantine`` table), but no accepted row of any file is merged. A file with a header and
no row is an empty batch: nothing to load, and no error.

Next to a running pipeline the writes follow the landing protocol (:mod:`dkmsks.storage.landing`):
the merges of all files of a call happen under the landing lock, so a run never takes half of
them, and rows for a timestamp the pipeline has taken meanwhile (sealed) are quarantined as
closed instead of being merged where no run would ever apply them. The heavy validation runs
before the lock is taken.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from dkmsks.io.formats import Bounds
from dkmsks.io.rejections import NUMBER_PATTERN, QUOTED_VALUE_PATTERN, AllRowsRejected
from dkmsks.spark.readers import file_read_errors, read_events_df, read_objects_df
from dkmsks.spark.sql_files import run_sql
from dkmsks.storage.landing import landing_lock, sealed_through
from dkmsks.warehouse import Warehouse

OBJECTS_TABLE = "objects"
EVENTS_TABLE = "subscription_events"
QUARANTINE_TABLE = "quarantine"

@dataclass(frozen=True)
class IngestReport:
    """What ingesting one file did: its table, rows accepted and rejected."""

    table: str
    accepted: int
    rejected: int


@dataclass(frozen=True)
class _Checked:
    """One file read to its end and validated, its rows materialised; nothing written yet."""

    path: Path
    table: str
    merge_sql: str
    rows: DataFrame  # accepted rows of the window, in the table's columns
    quarantined: DataFrame  # rejected rows not quarantined before, in the quarantine's columns
    refused: AllRowsRejected | None  # set when the file has rows and rejected every one


def _merge(spark: SparkSession, df: DataFrame, target: str, merge_sql: str) -> None:
    view = f"_dkmsks_src_{target}"
    df.createOrReplaceTempView(view)
    try:
        run_sql(spark, merge_sql, target=target, source=view)
    finally:
        spark.catalog.dropTempView(view)


def _landed(spark: SparkSession, table: str) -> DataFrame | None:
    return spark.table(table) if spark.catalog.tableExists(table) else None


def _window(df: DataFrame, after: int | None, upto: int | None) -> DataFrame:
    if after is not None:
        df = df.where(F.col("t") > after)
    if upto is not None:
        df = df.where(F.col("t") <= upto)
    return df


def _commonest_reasons(rejected: DataFrame, top: int = 3) -> list[tuple[int, int, str]]:
    """:func:`dkmsks.io.rejections.commonest_reasons` over a DataFrame of quarantine rows."""
    kind = F.regexp_replace(F.regexp_replace("reason", QUOTED_VALUE_PATTERN.pattern, "'...'"),
                            NUMBER_PATTERN.pattern, "N")
    ranked = (rejected.groupBy(kind.alias("kind"))
              .agg(F.count("*").alias("rows"), F.min(F.struct("line", "reason")).alias("first"))
              .orderBy(F.desc("rows"), F.col("first.line")).limit(top).collect())
    return [(int(r.rows), int(r.first.line), str(r.first.reason)) for r in ranked]


def _check(
    spark: SparkSession, path: Path, table: str, merge_sql: str, accepted: DataFrame, rejected: DataFrame,
    columns: list[str], *, run_id: str, after: int | None, upto: int | None,
) -> _Checked:
    """Read the whole file (inside :func:`file_read_errors`) and materialise its verdicts.

    Both verdicts are computed before any write: the checks read the landed tables, which the
    merges change.
    """
    with file_read_errors(path):
        accepted = accepted.localCheckpoint(eager=True)
        rejected = rejected.localCheckpoint(eager=True)
    refused = None
    if accepted.isEmpty() and not rejected.isEmpty():
        refused = AllRowsRejected(path, rejected.count(), _commonest_reasons(rejected),
                                  note=f"the rejected rows are in the {QUARANTINE_TABLE} table")
    rows = _window(accepted, after, upto).withColumn("source", F.lit(path.name)).select(*columns)
    quarantined = rejected.select(
        F.lit(table).alias("target"), "source", "line", "reason", "text", F.lit(run_id).alias("run_id")
    )
    if spark.catalog.tableExists(QUARANTINE_TABLE):
        # A line keeps its first verdict: re-reading a file (a retry, a later publish window)
        # must not quarantine a line again because it now also reads as late.
        judged = spark.table(QUARANTINE_TABLE).select("target", "source", "line")
        quarantined = quarantined.join(judged, ["target", "source", "line"], "left_anti")
    return _Checked(path, table, merge_sql, rows, quarantined.localCheckpoint(eager=True), refused)


def _check_objects(spark: SparkSession, warehouse: Warehouse, path: Path, *, run_id: str, bounds: Bounds | None,
                   after: int | None, upto: int | None) -> _Checked:
    accepted, rejected = read_objects_df(spark, path, bounds=bounds, landed=_landed(spark, OBJECTS_TABLE),
                                         processed_through=sealed_through(warehouse))
    return _check(spark, path, OBJECTS_TABLE, "dml/merge_objects.sql", accepted, rejected,
                  ["id", "x", "y", "keywords", "t", "source", "line"], run_id=run_id, after=after, upto=upto)


def _check_events(spark: SparkSession, warehouse: Warehouse, path: Path, *, run_id: str, bounds: Bounds | None,
                  after: int | None, upto: int | None) -> _Checked:
    accepted, rejected = read_events_df(spark, path, bounds=bounds, landed=_landed(spark, EVENTS_TABLE),
                                        processed_through=sealed_through(warehouse))
    return _check(spark, path, EVENTS_TABLE, "dml/merge_subscription_events.sql", accepted, rejected,
                  ["op", "id", "x", "y", "keywords", "k", "t", "source", "line"],
                  run_id=run_id, after=after, upto=upto)


def ingest_files(
    spark: SparkSession, warehouse: Warehouse, *, objects: str | Path | None = None, events: str | Path | None = None,
    run_id: str, bounds: Bounds | None = None, after: int | None = None, upto: int | None = None,
) -> list[IngestReport]:
    """Validate an objects file and/or a subscription events file, then merge their good rows
    (``after < t <= upto``) into ``objects`` / ``subscription_events`` and their bad rows
    into ``quarantine``; one report per file given, objects first.

    ``bounds=None`` accepts any finite coordinate; a :class:`~dkmsks.io.formats.Bounds`
    refuses rows outside it. Raises :class:`~dkmsks.io.rejections.InputError` when a file is
    unusable, having written nothing, and :class:`~dkmsks.io.rejections.AllRowsRejected` when a
    file rejected every row, having written only the quarantine rows (module docstring).
    """
    checked = []
    if objects is not None:
        checked.append(_check_objects(spark, warehouse, Path(objects), run_id=run_id, bounds=bounds, after=after,
                                      upto=upto))
    if events is not None:
        checked.append(_check_events(spark, warehouse, Path(events), run_id=run_id, bounds=bounds, after=after,
                                     upto=upto))
    refused = [c.refused for c in checked if c.refused is not None]
    if refused:
        for c in checked:
            if not c.quarantined.isEmpty():
                _merge(spark, c.quarantined, QUARANTINE_TABLE, "dml/merge_quarantine.sql")
        raise refused[0]
    reports = []
    with landing_lock(warehouse, f"ingestion {run_id}"):
        sealed = sealed_through(warehouse)
        for c in checked:
            rows, quarantined = c.rows, c.quarantined
            if sealed is not None:
                # Taken by a run since the checks: closed, so quarantined (never merged unseen).
                # A replay of a landed row is no late row (the MERGE skips it): a retried or
                # repeated ingestion changes nothing, whatever the pipeline took meanwhile.
                closed = rows.where(F.col("t") <= sealed)
                landed = _landed(spark, c.table)
                if landed is not None:
                    keys = ["id"] if c.table == OBJECTS_TABLE else ["id", "t", "op"]
                    known = landed.select(*keys).distinct()
                    replays = closed.join(known, keys, "left_semi")
                    closed = closed.join(known, keys, "left_anti").localCheckpoint(eager=True)
                    rows = rows.where(F.col("t") > sealed).unionByName(replays).localCheckpoint(eager=True)
                else:
                    rows = rows.where(F.col("t") > sealed)
                reason = F.format_string(f"timestamp %d is closed: the pipeline has taken every timestamp up to "
                                         f"{sealed}; publish at t > {sealed}", F.col("t"))
                quarantined = quarantined.unionByName(closed.select(
                    F.lit(c.table).alias("target"), "source", "line", reason.alias("reason"),
                    F.concat_ws(" ", F.lit("id"), F.col("id").cast("string"), F.lit("t"), F.col("t").cast("string"))
                    .alias("text"), F.lit(run_id).alias("run_id")))
            n, n_rejected = rows.count(), quarantined.count()
            _merge(spark, rows, c.table, c.merge_sql)
            if n_rejected:
                _merge(spark, quarantined, QUARANTINE_TABLE, "dml/merge_quarantine.sql")
            reports.append(IngestReport(c.table, n, n_rejected))
    return reports


def ingest_objects(
    spark: SparkSession, warehouse: Warehouse, path: str | Path, *, run_id: str, bounds: Bounds | None = None,
    after: int | None = None, upto: int | None = None,
) -> IngestReport:
    """:func:`ingest_files` with an objects file only."""
    return ingest_files(spark, warehouse, objects=path, run_id=run_id, bounds=bounds, after=after, upto=upto)[0]


def ingest_events(
    spark: SparkSession, warehouse: Warehouse, path: str | Path, *, run_id: str, bounds: Bounds | None = None,
    after: int | None = None, upto: int | None = None,
) -> IngestReport:
    """:func:`ingest_files` with a subscription events file only."""
    return ingest_files(spark, warehouse, events=path, run_id=run_id, bounds=bounds, after=after, upto=upto)[0]
