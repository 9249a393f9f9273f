"""Delta tables read and appended without a Spark job: delta-rs (the ``deltalake`` package).

Why: the per-timestamp work is tiny (docs/design.md §3 fact 6), and a Spark job costs ~0.5–2 s of
scheduling per query or commit on two cores. The main server's reads of pending objects and
events, a worker task's read of its own ``knn_state`` partition and the journal append that
commits a run are each a few milliseconds through delta-rs, which reads the same Delta log
(deletion vectors and shallow clones included, through its DataFusion scan) and appends with
the same idempotent transaction ids Spark uses (``txnAppId``/``txnVersion``).

Spark keeps the heavy and the set-based work: ingestion MERGEs, the partition job, the
compaction MERGE into ``knn_state``, views and user SQL. Table locations come from the
:class:`~dkmsks.warehouse.Warehouse`; a :class:`Lake` is plain strings, so it pickles into tasks.

Predicates are built here from typed values only (:func:`where`): integers are rendered by
``int()``, strings must be one of the callers' constants; no user text reaches the engine.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from dkmsks.warehouse import Warehouse

_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")

#: Up to this many ids go into a scan's ``IN`` predicate; a longer list is read without it and
#: filtered after. delta-rs pays for an ``IN`` list by its length, ~0.2 ms per value (the 1M
#: warehouse's state by 1,000 ids: 0.2 s, by 10,000 ids: 1.9 s), while reading a column whole
#: and filtering it costs the same for any list (0.1 s at |S| = 1M) and grows with |S|.
PREDICATE_IDS = 1000


class MissingTable(FileNotFoundError):
    """A table of the project has not been created in this warehouse yet."""


def where(**conditions: Any) -> str | None:
    """A DataFusion predicate ``col op value AND ...`` from ``col__op=value`` keywords.

    Operators: ``eq``, ``gt``, ``ge``, ``le``, ``lt``, and ``in`` (a non-empty sequence of
    ints). Values must be ints (rendered with ``int()``) or identifiers-like constants
    (``[a-z_][a-z0-9_]*``, quoted).
    """
    ops = {"eq": "=", "gt": ">", "ge": ">=", "le": "<=", "lt": "<", "in": "IN"}
    parts = []
    for key, value in conditions.items():
        if value is None:
            continue
        column, _, op = key.rpartition("__")
        if not _NAME.match(column) or op not in ops:
            raise ValueError(f"bad condition {key!r}")
        if op == "in":
            values = [int(v) for v in value]
            if not values:
                raise ValueError(f"{key}: an empty list matches nothing; leave the scan out instead")
            rendered = "(" + ", ".join(str(v) for v in values) + ")"
        elif isinstance(value, str):
            if not _NAME.match(value):
                raise ValueError(f"only constant words may be compared, got {value!r}")
            rendered = f"'{value}'"
        else:
            rendered = str(int(value))
        parts.append(f"{column} {ops[op]} {rendered}")
    return " AND ".join(parts) or None


class _OpenTables(threading.local):
    """Each thread's open delta-rs tables (latest version) by location, brought up to date on
    every use.

    Opening a table reads its whole log (the last checkpoint and every commit after it): at
    |S| = 1M, 84 ms for the journal and 48 ms for objects; an incremental update only lists
    the commits since (1–3 ms). A publish opened 14 tables, a reader's poll several; each now
    pays the update. Per thread, since one delta-rs table is not meant to be shared between
    threads, and per process: a forked Spark worker must not inherit the parent's (its Rust
    runtime's threads do not survive a fork).

    A table removed and made again at the same place must not be updated from the old one's
    version (its newer commits would be applied to the old rows): the commit file of the
    version held is checked to be the same file (inode, size, modification time in ns) first;
    if it is not, or is gone (removed by log cleanup), the table is opened afresh.
    """

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.tables: dict[str, tuple[Any, tuple[Any, ...]]] = {}

    def latest(self, uri: str) -> Any:
        """The open table at ``uri`` updated to its latest version, or None (not open, or no
        longer the same table)."""
        if self.pid != os.getpid():
            self.pid, self.tables = os.getpid(), {}
        entry = self.tables.get(uri)
        if entry is None:
            return None
        from deltalake.exceptions import DeltaError

        table, commit_file = entry
        try:
            if _commit_file(uri, table.version()) != commit_file:
                raise FileNotFoundError(uri)
            table.update_incremental()
            self.tables[uri] = (table, _commit_file(uri, table.version()))
        except (OSError, DeltaError):
            del self.tables[uri]
            return None
        return table

    def keep(self, uri: str, table: Any) -> None:
        """Remember ``table`` (just opened at its latest version) for the next use at ``uri``."""
        with contextlib.suppress(OSError):  # no commit file to check: not kept
            self.tables[uri] = (table, _commit_file(uri, table.version()))


def is_remote(uri: str) -> bool:
    """Whether a table location is on object storage (not this host's file system)."""
    return "://" in uri and not uri.startswith("file://")


def _object(uri: str) -> tuple[Any, str]:
    """The store and key of an object-store URI (``s3://bucket/key``)."""
    from dkmsks.storage.objectstore import ObjectStore
    from dkmsks.warehouse import ObjectLocation

    scheme, _, rest = uri.partition("://")
    bucket, _, key = rest.partition("/")
    return ObjectStore.of(ObjectLocation(bucket)), key


def _commit_file(uri: str, version: int) -> tuple[Any, ...]:
    """What identifies the table's commit file of ``version``: inode, size and modification
    time (ns) on a file system, ETag and size on object storage. OSError when it is gone."""
    name = f"{version:020d}.json"
    if is_remote(uri):
        store, key = _object(uri)
        meta = store.head(f"{key}/_delta_log/{name}")
        if meta is None:
            raise FileNotFoundError(f"{uri}/_delta_log/{name}")
        return meta["e_tag"], meta["size"]
    info = os.stat(os.path.join(uri.removeprefix("file://"), "_delta_log", name))
    return info.st_ino, info.st_size, info.st_mtime_ns


def file_exists(uri: str) -> bool:
    """Whether a data file (a URI the Delta log names) is still there, on a file system or on
    object storage."""
    if not is_remote(uri):
        return os.path.exists(uri.removeprefix("file://"))
    store, key = _object(uri)
    return store.head(key) is not None


def has_table(warehouse: Warehouse, name: str) -> bool:
    """Whether table ``name`` of ``warehouse`` exists (has a Delta log), in a folder or on
    object storage."""
    if warehouse.location is None:
        return (warehouse.table_path(name) / "_delta_log").is_dir()
    store, key = _object(warehouse.table_uri(name))
    return bool(store.has_prefix(f"{key}/_delta_log/"))


def storage_options(uri: str) -> dict[str, str] | None:
    """delta-rs' options for a table at ``uri``: the store's settings on object storage
    (:func:`dkmsks.storage.objectstore.delta_options`), none on a file system."""
    if not is_remote(uri):
        return None
    from dkmsks.storage.objectstore import delta_options

    return delta_options()


_open = _OpenTables()


#: Up to this many files' values are kept as sorted arrays of their own; then they are merged
#: into one (a look-up searches each array, so their number is what a look-up costs).
_MERGE_AFTER = 16


@dataclass
class _ColumnValues:
    """One column's values of a table's data files: the files read, and their values sorted."""

    paths: set[str] = field(default_factory=set)
    version: int | None = None  # the table version last read
    merged: Any = None  # np.ndarray, sorted: the values of the files read before the last merge
    recent: list[Any] = field(default_factory=list)  # sorted arrays, one per file read since
    asked: bool = False  # whether this thread asked for them before (Lake.sorted_values_on_reuse)


class _FileValues(threading.local):
    """Each thread's values of an integer column, read once per data file.

    A Delta data file never changes once written (a rewrite adds a new file and removes the
    old one), so a long-running publisher reads only the files landed since its last call: at
    |O| = 1M with random object ids, every publish read all 1M ids again to check its 1,000
    (their id range spans every file's, so the files' statistics skip none). Per process, as
    :class:`_OpenTables`; per thread so no lock is held while a file is read.
    """

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.columns: dict[tuple[str, str], _ColumnValues] = {}

    def of(self, key: tuple[str, str]) -> _ColumnValues:
        if self.pid != os.getpid():
            self.pid, self.columns = os.getpid(), {}
        return self.columns.setdefault(key, _ColumnValues())


_values = _FileValues()


def _read_column(paths: Sequence[str], column: str) -> Any:
    """Integer ``column`` of the Parquet files ``paths``, as one int64 array.

    One threaded scan of all of them: the 69 files of the 1M freshness warehouse (1.16M ids)
    in 0.035–0.045 s, against 0.07–0.10 s file by file (``pq.read_table``), in a warm process.
    A process's first read costs ~0.25 s whichever way (pyarrow.dataset's import alone is
    0.23 s; file by file, the first reads of each file), once per process."""
    import numpy as np
    import pyarrow.dataset as ds

    if paths and is_remote(paths[0]):
        from dkmsks.storage.objectstore import arrow_filesystem

        files, filesystem = [path.partition("://")[2] for path in paths], arrow_filesystem()
    else:
        files, filesystem = [path.removeprefix("file://") for path in paths], None
    values = ds.dataset(files, format="parquet", filesystem=filesystem).to_table(columns=[column]).column(column)
    return np.asarray(values.to_numpy(), dtype=np.int64)


@dataclass(frozen=True)
class Lake:
    """Locations of the project's tables (one warehouse database), as plain strings."""

    uris: dict[str, str] = field(default_factory=dict)

    @staticmethod
    def of(warehouse: Warehouse) -> Lake:
        """Every table of ``warehouse`` (:data:`dkmsks.storage.tables.ALL_TABLES`) by its path."""
        from dkmsks.storage.tables import ALL_TABLES

        return Lake({name: warehouse.table_uri(name) for name in ALL_TABLES})

    def table(self, name: str, version: int | None = None) -> Any:
        """The delta-rs table ``name`` (at ``version``); :class:`MissingTable` when it does not exist yet.

        The latest version comes from the calling thread's open copy brought up to date
        (:class:`_OpenTables`); callers must not move it to another version (``load_as_version``)."""
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        if name not in self.uris:
            raise KeyError(f"table {name} is not one of the project's tables")
        uri = self.uris[name]
        # A pinned version that is still the latest (a job's reads right after its look at
        # the versions) is the open table too: opening it again re-reads the whole log.
        if (table := _open.latest(uri)) is not None and version in (None, table.version()):
            return table
        try:
            table = DeltaTable(uri, version=version, storage_options=storage_options(uri))
        except TableNotFoundError:
            raise MissingTable(f"table {name} does not exist yet at {uri}: ingest data first "
                               "(dkm run, or the dkmsks_ingest DAG)") from None
        if version is None:
            _open.keep(uri, table)
        return table

    def read(self, name: str, *, columns: list[str] | None = None, predicate: str | None = None,
             version: int | None = None, sub_ids: Sequence[int] | None = None) -> pa.Table:
        """Matching rows of ``name`` (at ``version``) as one Arrow table, unordered; with
        ``sub_ids``, only rows whose ``sub_id`` is one of them (through the scan's predicate up
        to :data:`PREDICATE_IDS` ids, else filtered after the read)."""
        listed = sub_ids is not None and 0 < len(sub_ids) <= PREDICATE_IDS
        if listed:
            predicate = " AND ".join(p for p in (predicate, where(sub_id__in=sub_ids)) if p)
        elif sub_ids is not None and columns is not None and "sub_id" not in columns:
            raise ValueError(f"reading {name} for some sub_ids needs the sub_id column among {columns}")
        table = self.table(name, version)
        # Through the Arrow stream interface: pa.table() on a foreign table imports pandas
        # first, which a reader (dkm status, watch, the client) otherwise never loads.
        data = pa.RecordBatchReader.from_stream(table.scan(columns=columns, predicate=predicate)).read_all()
        data = data.cast(plain_schema(data.schema))
        if sub_ids is not None and not listed:  # after the cast: Arrow's filter takes no string views
            wanted = pa.array([int(s) for s in sub_ids], type=pa.int64())
            data = data.filter(pc.is_in(data.column("sub_id"), value_set=wanted))
        return data

    def column_bound(self, name: str, column: str, version: int | None = None) -> int | None:
        """An upper bound of integer ``column`` over the rows of ``name`` (at ``version``), None
        when the table holds no data file.

        From the data files' statistics in the Delta log (no data file is opened) when every
        file has them, else by a scan. It is the largest value of any row in the table's
        files, including rows a deletion vector has since removed: the exact maximum of the
        live rows, or above it. ``knn_state``'s ``plan_version`` and ``updated_t`` marks are
        read this way (a scan of 1M rows took ~35 ms per column, and a publish asks for both).
        """
        table = self.table(name, version)
        actions = pa.RecordBatchReader.from_stream(table.get_add_actions(flatten=True)).read_all()
        if actions.num_rows == 0:
            return None
        key = f"max.{column}"
        if key in actions.column_names and actions.column(key).null_count == 0:
            return int(pc.max(actions.column(key)).as_py())
        values = self.read(name, columns=[column], version=version).column(column)
        return int(pc.max(values).as_py()) if len(values) and values.null_count < len(values) else None

    def sorted_values(self, name: str, column: str, version: int | None = None) -> list[Any]:
        """The values of integer ``column`` over the live rows of ``name`` (at ``version``,
        default the latest), as a few sorted int64 arrays whose union they are
        (:func:`dkmsks.core.sets.in_any_sorted` looks values up in them). Kept per process
        (:class:`_FileValues`), so a long-running caller pays for what changed only:

        - While every row of a listed file is live and stored under its column's name (reader
          protocol 1: no deletion vectors, no column mapping; no partition column), each data
          file is read once, and a call opens only the files added since the last one. When a
          file read before is gone (OPTIMIZE, VACUUM), every file is read again.
        - Otherwise (``knn_state``: compactions leave deletion vectors) the column is read
          through the table's scan once per table version.
        """
        import numpy as np

        table = self.table(name, version)
        at = int(table.version())
        cached = _values.of((self.uris[name], column))
        if table.protocol().min_reader_version > 1 or column in table.metadata().partition_columns:
            if cached.version != at:
                values = self.read(name, columns=[column], version=at).column(column).to_numpy()
                cached.paths, cached.recent = set(), []
                cached.merged, cached.version = np.sort(np.asarray(values, dtype=np.int64)), at
            return [cached.merged]
        files = table.file_uris()
        if cached.version is not None and at < cached.version or not cached.paths.issubset(set(files)):
            cached.paths, cached.merged, cached.recent = set(), None, []
        new = [path for path in files if path not in cached.paths]
        if new:
            cached.recent.append(np.sort(_read_column(new, column)))
            cached.paths.update(new)
        if len(cached.recent) > _MERGE_AFTER or cached.merged is None:
            parts = [a for a in (cached.merged, *cached.recent) if a is not None]
            cached.merged = np.sort(np.concatenate(parts)) if parts else np.empty(0, dtype=np.int64)
            cached.recent = []
        cached.version = at
        return [cached.merged, *cached.recent]

    def sorted_values_on_reuse(self, name: str, column: str, version: int | None = None) -> list[Any] | None:
        """:meth:`sorted_values`, from this process's second ask for them on; ``None`` at the
        first, for the caller to read just the rows it needs instead.

        For a one-shot process (``dkm publish``, an Airflow task) keeping a whole column costs
        more than it saves: at |S| = 1M a publisher's first liveness check that read all the
        snapshot's ids took 0.14 s, against 0.10 s with the batch's ids in the scans' predicate,
        and |S| = 10M is ten times the ids to read and sort. A process that asks again is
        long-running (the client, follow's landing), and pays for them once per table version."""
        cached = _values.of((self.uris[name], column))
        if not cached.asked:
            cached.asked = True
            return None
        return self.sorted_values(name, column, version)

    def version(self, name: str) -> int:
        """The latest version of table ``name``."""
        return int(self.table(name).version())

    def committed_after(self, name: str, version: int) -> bool:
        """Whether table ``name`` has a commit after ``version``.

        One look for the next commit file (Delta writes version ``v + 1`` as
        ``_delta_log/<v + 1>.json`` and never skips one) instead of :meth:`version`'s listing of
        the log (1–3 ms): follow mode asks four tables at every poll while idle. On an object
        store the look is one HEAD request."""
        uri = self.uris[name]
        try:
            _commit_file(uri, version + 1)
        except OSError:
            return False
        return True

    def only_fences_since(self, name: str, version: int) -> bool:
        """Whether every commit to table ``name`` after ``version`` is a writer lease's fence
        (:data:`dkmsks.storage.leases.FENCE_MARK` in its commit info: no rows, no files)."""
        from dkmsks.storage.leases import FENCE_MARK

        latest = self.version(name)
        if latest <= version:
            return True
        key, value = next(iter(FENCE_MARK.items()))
        entries = self.table(name).history(latest - version)
        return all(entry.get(key) == value for entry in entries if int(entry.get("version", -1)) > version)

    def version_from(self, name: str, known: int) -> int:
        """The latest version of table ``name``, found from a version ``known`` to exist by
        looking for the commit files after it (:meth:`committed_after`)."""
        while self.committed_after(name, known):
            known += 1
        return known

    def append(self, name: str, data: pa.Table, *, app_id: str | None = None, version: int | None = None,
               metadata: dict[str, Any] | None = None) -> bool:
        """Append ``data`` in one commit; with ``app_id``/``version``, skip (return False) a
        version this application has already committed (Delta's idempotent writes)."""
        from deltalake import CommitProperties, Transaction, write_deltalake

        table = self.table(name)
        txns = []
        if app_id is not None and version is not None:
            done = table.transaction_version(app_id)
            if done is not None and int(done) >= int(version):
                return False
            txns.append(Transaction(app_id, int(version)))
        fence = self._fence(name, table, app_id)
        if fence is not None:
            txns.append(fence)
        target = table.schema().to_arrow()
        data = conform(data, pa.schema(target))
        with self._fenced(name, fence):
            write_deltalake(table, data, mode="append",
                            commit_properties=CommitProperties(custom_metadata=metadata, app_transactions=txns or None))
        return True

    def _fence(self, name: str, table: Any, app_id: str | None) -> Any:
        """The writer lock's fence this commit to ``name`` must carry (a Delta application
        transaction), None when the process holds no fenced lease on it; :class:`Fenced` when
        the snapshot already has a newer holder's (:mod:`dkmsks.storage.leases`)."""
        from deltalake import Transaction

        from dkmsks.storage.leases import FENCE_APP, Fenced, fence_of

        fence = fence_of(self.uris[name])
        if fence is None or app_id == FENCE_APP:
            return None
        current = table.transaction_version(FENCE_APP)
        if current is not None and int(current) != fence.epoch:
            raise Fenced(f"{name}: the writer lock was taken over (epoch {int(current)} after ours, "
                         f"{fence.epoch}); this process's commit is refused")
        return Transaction(FENCE_APP, fence.epoch)

    @contextlib.contextmanager
    def _fenced(self, name: str, fence: Any) -> Any:
        """A fenced commit that lost its race to a newer holder's fence commit is
        :class:`Fenced` (delta-rs refuses a commit when a concurrent one carries the same
        transaction id)."""
        from deltalake.exceptions import CommitFailedError

        from dkmsks.storage.leases import Fenced

        try:
            yield
        except CommitFailedError as err:
            if fence is not None and "oncurrent transaction" in str(err):
                raise Fenced(f"{name}: a newer holder of the writer lock committed first; "
                             "this process's commit is refused") from err
            raise


    def local_root(self, name: str) -> str | None:
        """The folder of table ``name`` when it is on this machine's file system, else ``None``."""
        uri = self.uris[name]
        return None if is_remote(uri) else uri.removeprefix("file://")

    def commit_files(self, name: str, files: Sequence[Any], *, app_id: str, version: int,
                     metadata: dict[str, Any] | None = None) -> bool:
        """Add written ``files`` (:class:`~dkmsks.storage.journal_files.JournalFile`) to table
        ``name`` in one commit tagged with the application transaction ``app_id``/``version``;
        skip it (return False) when this application has committed that version already."""
        from deltalake import CommitProperties, Transaction
        from deltalake.transaction import AddAction

        table = self.table(name)
        done = table.transaction_version(app_id)
        if done is not None and int(done) >= int(version):
            return False
        partition_by = list(table.metadata().partition_columns)
        actions = [AddAction(f.path, f.size, {partition_by[0]: f.kind} if partition_by else {},
                             f.modification_time, True, f.stats) for f in files]
        txns = [Transaction(app_id, int(version))]
        fence = self._fence(name, table, app_id)
        if fence is not None:
            txns.append(fence)
        tagged = CommitProperties(custom_metadata=metadata, app_transactions=txns)
        with self._fenced(name, fence):
            table.create_write_transaction(actions, "append", table.schema(), partition_by=partition_by,
                                           commit_properties=tagged)
        return True


def plain_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every field in the plain layouts of :func:`_plain`."""
    return pa.schema([pa.field(f.name, _plain(f.type), f.nullable) for f in schema])


def _plain(kind: pa.DataType) -> pa.DataType:
    """Arrow's view and large layouts (what delta-rs' engine yields) as the plain ones that
    every pyarrow kernel (sorting, joins) supports."""
    if pa.types.is_string_view(kind) or pa.types.is_large_string(kind):
        return pa.string()
    if pa.types.is_binary_view(kind) or pa.types.is_large_binary(kind):
        return pa.binary()
    if pa.types.is_list_view(kind) or pa.types.is_large_list_view(kind) or pa.types.is_large_list(kind) \
            or pa.types.is_list(kind):
        return pa.list_(_plain(kind.value_type))
    if pa.types.is_struct(kind):
        return pa.struct([pa.field(f.name, _plain(f.type), f.nullable) for f in kind])
    return kind


def conform(data: pa.Table, schema: pa.Schema) -> pa.Table:
    """``data`` with exactly the columns of ``schema`` (missing ones null), cast to its types."""
    columns = []
    for f in schema:
        if f.name in data.column_names:
            columns.append(data.column(f.name).cast(f.type))
        else:
            columns.append(pa.nulls(data.num_rows, f.type))
    return pa.Table.from_arrays(columns, schema=pa.schema([pa.field(f.name, f.type, nullable=True) for f in schema]))
