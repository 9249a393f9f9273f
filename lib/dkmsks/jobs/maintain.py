"""Delta maintenance: small files compacted, old files vacuumed, the as-of horizon kept.

Why: every micro-batch appends a few small files to the journal and to ``run_metrics``, every
compaction rewrites ``knn_state``'s touched partitions, every publish adds files to the landing
tables, and nothing else ever removes a file. So per table of the warehouse, a maintenance run:

1. sets ``delta.logRetentionDuration`` and ``delta.deletedFileRetentionDuration`` to the as-of
   horizon (:mod:`dkmsks.storage.retention`) when they differ (one delta-rs metadata commit:
   Spark SQL takes no parameter marker for a property value);
2. runs OPTIMIZE (Delta's bin-packing of small files; rows are unchanged) when a partition holds
   more than one small file or a file carries deletion vectors — otherwise Delta would find
   nothing to do, and skipping saves a Spark job per table. ``knn_state`` is instead rewritten
   as one sorted file per worker (:data:`SORT_COLUMNS`, Delta's ``dataChange = false``
   rearrangement: rows unchanged, no change-data records), the layout its point reads need
   (docs/design.md §9; compactions add unsorted files). Delta's ``ZORDER BY (sub_id)`` was
   tried and left each worker's rows unsorted in one file (measured). The journal is packed in
   time order instead, only the rows appended since the last run (:data:`TIME_ORDERED`,
   :func:`_time_ordered_rewrite`). A table that lacks its layout property
   (:data:`LAYOUT_PROPERTIES`) gets it set, and is rewritten;
3. runs VACUUM with the table's own retention, now the horizon, when the folder holds Parquet
   files that the current version no longer references and that are older than the horizon.
   Delta's safety check compares the retention with that same property, so it holds without
   being switched off; a horizon below Delta's default week is allowed and reported.

OPTIMIZE and VACUUM go through Delta's Python API: Delta's SQL parser takes no ``IDENTIFIER``
marker in them, and statements are never built by string formatting. delta-rs is not used to
vacuum: its vacuum counts live deletion-vector files of ``knn_state`` as garbage (measured).

The whole run holds the writer lock, so it never interleaves with a micro-batch, a follow round,
a compaction or a (re)partitioning. Publishers do not take that lock: OPTIMIZE never conflicts
with their blind appends (delta-rs), but a publisher's insert-only MERGE (the Spark ingestion)
whose read overlaps an OPTIMIZE commit fails with Delta's ``ConcurrentAppendException`` and is
safe to retry (the ingest DAG retries; ``dkm publish`` can be run again). An OPTIMIZE that
itself loses a conflict (another OPTIMIZE, a DELETE) is retried, then skipped with a note.

``knn_state``'s maintenance commits carry the ``through_t`` of the content they hold, so the
versions ``dkm export --as-of`` reads keep naming their timestamp after older log entries expire
(:func:`dkmsks.storage.export.checkpoints_of`).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from dkmsks.storage import tables
from dkmsks.storage.export import state_checkpoints
from dkmsks.storage.journal import last_processed, record_run_metrics
from dkmsks.storage.lake import Lake, MissingTable, has_table
from dkmsks.storage.retention import DELTA_SAFETY_HOURS, horizon_hours, retention_properties
from dkmsks.storage.writer_lock import writer_lock
from dkmsks.warehouse import Warehouse

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

T = TypeVar("T")

#: Files below this size are "small" (Delta's default OPTIMIZE target, ``optimize.maxFileSize``).
SMALL_FILE_BYTES = 1 << 30
#: An OPTIMIZE that loses a commit conflict is tried this many times in all, then skipped.
CONFLICT_ATTEMPTS = 3
#: Table properties that shape a table's files (as in its DDL, for tables created before them).
#: Parquet pages of at most 1000 rows let a point query on a few ``sub_id``s skip the rest of
#: each sorted file through the page index (``sql/ddl/knn_state.sql``).
LAYOUT_PROPERTIES: dict[str, dict[str, str]] = {tables.STATE: {"parquet.page.row.count.limit": "1000"}}
#: Properties a table's DDL sets that maintenance restores should a run have stopped while
#: they were off (the journal's, during its time-ordered rewrite).
APPEND_ONLY = "delta.appendOnly"
DDL_PROPERTIES: dict[str, dict[str, str]] = {tables.JOURNAL: {APPEND_ONLY: "true"}}
#: Tables whose compaction is a sorted rewrite (partition column first, as the write needs).
SORT_COLUMNS: dict[str, tuple[str, str]] = {tables.STATE: ("worker", "sub_id")}
#: Tables kept in time order: only the rows after the table's mark (:data:`TIME_MARK_PROPERTY`)
#: are packed, sorted by the column into files of about :data:`TIME_ORDERED_FILE_ROWS` rows that
#: each span a range of it. The readers of the journal ask for recent timestamps (``knn_current``
#: its records after the snapshot's horizon, ``dkm watch`` and the result stream from a
#: timestamp on); Delta's OPTIMIZE would pack every timestamp into one file per record kind and
#: make each such read scan the journal's whole history (measured: docs/design.md §9).
TIME_ORDERED: dict[str, str] = {tables.JOURNAL: "t"}
#: Rows per time range of a time-ordered rewrite (each range becomes one file per partition).
TIME_ORDERED_FILE_ROWS = 200_000
#: The property recording through which value of its time column a time-ordered table is packed.
TIME_MARK_PROPERTY = "dkmsks.timeOrderedThrough"


@dataclass(frozen=True)
class TableFiles:
    """One table's files, measured from its current version and its folder."""

    live: int  # Parquet files of the current version
    compactable: int  # small live files in partitions holding more than one (what OPTIMIZE packs)
    with_deletions: int  # live files carrying deletion vectors (OPTIMIZE may rewrite them without the rows)
    on_disk: int  # Parquet files in the folder: live, and kept for older versions
    bytes_on_disk: int  # bytes of every data file in the folder (Parquet, deletion vectors, change data)
    expired: int  # unreferenced Parquet files older than the horizon: at most what VACUUM deletes
    properties: dict[str, str]  # retention and layout properties that differ from the wanted ones (to set)


@dataclass(frozen=True)
class TableReport:
    """One table's maintenance: its files before and after, and the files vacuumed."""

    table: str
    before: TableFiles
    after: TableFiles
    vacuumed_files: int = 0
    vacuumed_bytes: int = 0
    vacuumed: bool = False  # whether VACUUM ran (it runs only when expired files wait)
    note: str = ""
    exists: bool = True


@dataclass
class MaintenanceReport:
    """What ``dkm maintain`` did: the horizon, each table, warnings and phase times."""

    retention_hours: int
    tables: list[TableReport] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    phases_ms: dict[str, float] = field(default_factory=dict)
    dry_run: bool = False

    def lines(self) -> list[str]:
        """The report as text, one line per table (what the CLI and the Spark app print)."""
        head = (f"{'dry run: ' if self.dry_run else ''}as-of horizon {self.retention_hours} h "
                f"({', '.join(f'{k} = {v!r}' for k, v in retention_properties(self.retention_hours).items())})")
        out = [head, *(f"warning: {w}" for w in self.warnings)]
        for r in self.tables:
            b, a = r.before, r.after
            if not r.exists:
                out.append(f"  {r.table:<20} not created yet")
            elif self.dry_run:
                out.append(f"  {r.table:<20} live files {b.live:>5}, {b.compactable} to compact, {b.with_deletions} "
                           f"with deletion vectors; on disk {b.on_disk} "
                           f"({_size(b.bytes_on_disk)}), up to {b.expired} older than the horizon to vacuum"
                           + (f"; would set {', '.join(b.properties)}" if b.properties else ""))
            else:
                out.append(f"  {r.table:<20} live files {b.live:>5} -> {a.live:<5} on disk {b.on_disk:>5} -> "
                           f"{a.on_disk:<5} ({_size(b.bytes_on_disk)} -> {_size(a.bytes_on_disk)}); vacuumed "
                           f"{r.vacuumed_files} files, {_size(r.vacuumed_bytes)}" + (f" ({r.note})" if r.note else ""))
        if not self.dry_run:
            out.append(f"removed {sum(r.vacuumed_files for r in self.tables)} files, "
                       f"{_size(sum(r.vacuumed_bytes for r in self.tables))}")
        return out

    def as_json(self) -> str:
        """The report as sorted JSON (without the phase times)."""
        return json.dumps({"retention_hours": self.retention_hours, "tables": [asdict(r) for r in self.tables],
                           "warnings": self.warnings}, sort_keys=True)


def plan_maintenance(warehouse: Warehouse, *, retention_hours: int | None = None) -> MaintenanceReport:
    """What a run would do, read without Spark and without the lock (``dkm maintain --dry-run``)."""
    hours = horizon_hours(retention_hours)
    lake = Lake.of(warehouse)
    report = MaintenanceReport(hours, warnings=_warnings(hours), dry_run=True)
    for name in tables.ALL_TABLES:
        try:
            files = measure(lake, warehouse, name, hours)
        except MissingTable:
            report.tables.append(TableReport(name, _NO_FILES, _NO_FILES, exists=False))
            continue
        report.tables.append(TableReport(name, files, files))
    return report


def run_maintenance(spark: SparkSession, warehouse: Warehouse, *, run_id: str,
                    retention_hours: int | None = None) -> MaintenanceReport:
    """Properties, OPTIMIZE and VACUUM on every table of ``warehouse`` (module doc), under the
    writer lock; phase times go to ``run_metrics``, with the whole report as that commit's
    metadata (``DESCRIBE HISTORY run_metrics``)."""
    hours = horizon_hours(retention_hours)
    lake = Lake.of(warehouse)
    report = MaintenanceReport(hours, warnings=_warnings(hours))
    if not any(has_table(warehouse, name) for name in tables.ALL_TABLES):
        # A scheduled run on a warehouse nothing was published to yet (the DAG's default one):
        # creating run_metrics there would make an empty warehouse look used.
        report.warnings.append(f"{warehouse.tables_location} holds no table yet: nothing to maintain")
        return report
    with writer_lock(warehouse, f"maintenance {run_id}"):
        started = time.perf_counter()
        for name in tables.ALL_TABLES:
            report.tables.append(_maintain(spark, lake, warehouse, name, hours, run_id, report.phases_ms))
        report.phases_ms["total"] = (time.perf_counter() - started) * 1e3
        t = last_processed(lake)
        mark = -1 if t is None else t  # -1: before the first partitioning
        record_run_metrics(lake, run_id, "maintain", mark, mark, report.phases_ms,
                           metadata={"userMetadata": report.as_json()})
    return report


def measure(lake: Lake, warehouse: Warehouse, name: str, hours: int) -> TableFiles:
    """:class:`TableFiles` of table ``name`` now."""
    table = lake.table(name)
    adds = pa.table(table.get_add_actions(flatten=True))
    live = {_file_key(uri) for uri in table.file_uris()}
    cutoff = time.time() - hours * 3600
    on_disk = expired = size = 0
    for path, file_size, mtime in _data_files(warehouse, name):
        size += file_size
        if path.endswith(".parquet"):
            on_disk += 1
            if _file_key(path) not in live and mtime < cutoff:
                expired += 1
    config = table.metadata().configuration
    differ = {k: v for k, v in wanted_properties(name, hours).items() if config.get(k) != v}
    if name in TIME_ORDERED:
        adds = _after_mark(adds, TIME_ORDERED[name], time_mark(config))
    return TableFiles(live=len(live), compactable=_compactable(adds),
                      with_deletions=table.deletion_vectors().read_all().num_rows, on_disk=on_disk,
                      bytes_on_disk=size, expired=expired, properties=differ)


def time_mark(config: dict[str, str]) -> int | None:
    """Through which time a time-ordered table is packed (None: never packed yet)."""
    text = config.get(TIME_MARK_PROPERTY)
    return None if text is None else int(text)


def _after_mark(adds: pa.Table, column: str, mark: int | None) -> pa.Table:
    """The live files holding rows after ``mark`` (all of them when there is no mark)."""
    if mark is None or adds.num_rows == 0:
        return adds
    return adds.filter(pc.greater(adds.column(f"max.{column}"), mark))


def with_conflict_retries(action: Callable[[], T], conflicts: tuple[type[BaseException], ...], *,
                          attempts: int = CONFLICT_ATTEMPTS, pause: float = 1.0) -> tuple[T | None, str]:
    """``(action(), "")``, running it again after a commit conflict; ``(None, why)`` once
    ``attempts`` tries have all conflicted. Other errors propagate."""
    why = ""
    for attempt in range(attempts):
        try:
            return action(), ""
        except conflicts as err:
            why = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            if attempt + 1 < attempts:
                time.sleep(pause * (attempt + 1))
    return None, f"skipped after {attempts} commit conflicts with concurrent writers ({why})"


# --------------------------------------------------------------------------- one table


_NO_FILES = TableFiles(0, 0, 0, 0, 0, 0, {})


def _maintain(spark: SparkSession, lake: Lake, warehouse: Warehouse, name: str, hours: int, run_id: str,
              phases: dict[str, float]) -> TableReport:
    from delta.tables import DeltaTable

    from dkmsks.spark.delta_io import delta_txn

    path = warehouse.table_uri(name, scheme="s3a")
    before = measure(lake, warehouse, name, hours)
    meta = _commit_metadata(lake, name, run_id)
    if before.properties:
        _set_properties(lake, name, wanted_properties(name, hours), meta)
    relayout = any(key in before.properties for key in LAYOUT_PROPERTIES.get(name, {}))
    note = ""
    with delta_txn(spark, metadata=meta):  # tags the OPTIMIZE and VACUUM commits
        if before.compactable or before.with_deletions or relayout:
            started = time.perf_counter()
            order = SORT_COLUMNS.get(name)

            def optimize() -> object:
                if name in TIME_ORDERED:
                    _time_ordered_rewrite(spark, lake, name, path, meta)
                    return None
                if order is None:
                    return DeltaTable.forPath(spark, path).optimize().executeCompaction().collect()
                rows = spark.read.format("delta").load(path).repartition(order[0]).sortWithinPartitions(*order)
                rows.write.format("delta").mode("overwrite").option("dataChange", "false").save(path)
                return None

            _, note = with_conflict_retries(optimize, _delta_conflicts())
            phases[f"{name}: optimize"] = (time.perf_counter() - started) * 1e3
        middle = measure(lake, warehouse, name, hours)
        vacuumed = middle.expired > 0
        if vacuumed:
            started = time.perf_counter()
            DeltaTable.forPath(spark, path).vacuum()  # the table's own retention: the horizon
            phases[f"{name}: vacuum"] = (time.perf_counter() - started) * 1e3
    after = measure(lake, warehouse, name, hours)
    return TableReport(name, before, after, vacuumed_files=middle.on_disk - after.on_disk,
                       vacuumed_bytes=middle.bytes_on_disk - after.bytes_on_disk, vacuumed=vacuumed, note=note)


def _time_ordered_rewrite(spark: SparkSession, lake: Lake, name: str, path: str, meta: dict[str, Any]) -> None:
    """Pack the rows of a :data:`TIME_ORDERED` table after its mark, sorted by time into files that
    each span one range of it (rows unchanged), then move the mark to the newest time packed
    (docs/design.md §9, "The journal in time order").

    The rows at or before the mark are in files packed before and are not read again, so a run
    costs what was appended since the last one, not the table's history. The writer lock keeps
    the journal's writers out meanwhile; every run appends rows after the last processed
    timestamp, so no file holds rows on both sides of the mark (and if one did, Delta's
    ``replaceWhere`` would keep its rows at or before it). A crash between the rewrite and the
    mark only makes the next run pack those rows again.
    """
    from pyspark.sql import functions as F

    column = TIME_ORDERED[name]
    table = lake.table(name)
    metadata = table.metadata()
    mark = time_mark(metadata.configuration)
    tail = _after_mark(pa.table(table.get_add_actions(flatten=True)), column, mark)
    if tail.num_rows == 0:
        return
    newest = int(pc.max(tail.column(f"max.{column}")).as_py())
    rows = spark.read.format("delta").load(path)
    writer = rows.where(F.col(column) > mark) if mark is not None else rows
    ranges = max(1, -(-int(pc.sum(tail.column("num_records")).as_py()) // TIME_ORDERED_FILE_ROWS))
    partitions = metadata.partition_columns
    out = writer.repartitionByRange(ranges, column).sortWithinPartitions(*partitions, column) \
        .write.format("delta").mode("overwrite")
    # Delta takes no replaceWhere on a data column in a commit marked as a rearrangement, so the
    # rewrite after a mark says the rows changed although they are the same ones. The journal has
    # no change data feed; its readers go by version and timestamp, and a streaming reader skips
    # the commit with Delta's skipChangeCommits (docs/design.md §9). The mark is an int read from
    # the table's properties.
    out = out.option("dataChange", "false") if mark is None else out.option("replaceWhere", f"{column} > {int(mark)}")
    # Delta refuses any file removal on an append-only table, a rearrangement's too (OPTIMIZE
    # excepted): the property is off for the rewrite only, while the writer lock keeps every
    # writer of the table out. A crash in between leaves it off until the next maintenance run,
    # which sets it first (it is one of the table's wanted properties).
    append_only = metadata.configuration.get(APPEND_ONLY) == "true"
    if append_only:
        _set_properties(lake, name, {APPEND_ONLY: "false"}, meta)
    out.save(path)
    _set_properties(lake, name, {TIME_MARK_PROPERTY: str(newest), **({APPEND_ONLY: "true"} if append_only else {})},
                    meta)


def wanted_properties(name: str, hours: int) -> dict[str, str]:
    """The properties table ``name`` should carry: the retention ones, its layout ones and the
    ones of its DDL that a rewrite turns off for a while (:data:`DDL_PROPERTIES`)."""
    return {**retention_properties(hours), **LAYOUT_PROPERTIES.get(name, {}), **DDL_PROPERTIES.get(name, {})}


def _commit_metadata(lake: Lake, name: str, run_id: str) -> dict[str, Any]:
    """What maintenance commits say: the job, and on ``knn_state`` the timestamp its current
    content is exact at (when known), so ``--as-of`` keeps finding it (module doc)."""
    meta: dict[str, Any] = {"job": "maintain", "run_id": run_id}
    if name == tables.STATE:
        current = lake.version(tables.STATE)
        marks = [through for through, version in state_checkpoints(lake) if version == current]
        if marks:
            meta["through_t"] = marks[0]
    return meta


def _set_properties(lake: Lake, name: str, properties: dict[str, str], meta: dict[str, Any]) -> None:
    from deltalake import CommitProperties

    tagged = CommitProperties(custom_metadata={"userMetadata": json.dumps(meta, sort_keys=True)})
    # Not strict: delta-rs refuses keys outside Delta's own (the Parquet writer's layout property)
    # when asked to check them.
    lake.table(name).alter.set_table_properties(properties, raise_if_not_exists=False, commit_properties=tagged)


def _delta_conflicts() -> tuple[type[BaseException], ...]:
    """Delta's commit-conflict exceptions as PySpark raises them (siblings, not one hierarchy)."""
    from delta import exceptions as e

    return (e.DeltaConcurrentModificationException, e.ConcurrentWriteException, e.MetadataChangedException,
            e.ProtocolChangedException, e.ConcurrentAppendException, e.ConcurrentDeleteReadException,
            e.ConcurrentDeleteDeleteException, e.ConcurrentTransactionException)


def _file_key(uri: str) -> str:
    """A data file's location without its scheme, so that a folder walk's paths and an
    object listing's keys compare with the log's file URIs."""
    return str(Path(uri.partition("://")[2] if "://" in uri else uri))


def _data_files(warehouse: Warehouse, name: str) -> list[tuple[str, int, float]]:
    """Every data file of table ``name`` with its size and modification time (epoch seconds):
    not the log, not the local filesystem's hidden ``.crc`` checksums. On object storage, by
    listing its keys."""
    if warehouse.location is not None:
        from pyarrow import fs

        from dkmsks.storage.objectstore import arrow_filesystem

        base = f"{warehouse.location.bucket}/{warehouse.table_key(name)}"
        infos = arrow_filesystem().get_file_info(fs.FileSelector(base, recursive=True, allow_not_found=True))
        return [(info.path, int(info.size or 0), info.mtime.timestamp() if info.mtime else 0.0) for info in infos
                if info.type == fs.FileType.File and "/_delta_log/" not in info.path
                and not info.base_name.startswith(".")]
    found = []
    for root, dirs, files in os.walk(warehouse.table_path(name)):
        dirs[:] = [d for d in dirs if d != "_delta_log"]
        for f in files:
            if not f.startswith("."):
                stat = (Path(root) / f).stat()
                found.append((str(Path(root) / f), stat.st_size, stat.st_mtime))
    return found


def _compactable(adds: pa.Table) -> int:
    """Small live files in partitions that hold more than one of them."""
    small = adds.filter(pc.less(adds.column("size_bytes"), SMALL_FILE_BYTES))
    keys = [c for c in small.column_names if c.startswith("partition.")]
    if not keys:
        return small.num_rows if small.num_rows > 1 else 0
    counts = small.group_by(keys).aggregate([("path", "count")]).column("path_count").to_pylist()
    return sum(n for n in counts if n > 1)


def _warnings(hours: int) -> list[str]:
    if hours >= DELTA_SAFETY_HOURS:
        return []
    return [(f"a horizon of {hours} h is below Delta's default safety of {DELTA_SAFETY_HOURS} h: a write or a "
             "read that takes longer than the horizon can lose files it needs to a VACUUM running meanwhile")]


def _size(n: float) -> str:
    for unit in ("B", "kB", "MB"):
        if abs(n) < 1000:
            return f"{n:.0f} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"
