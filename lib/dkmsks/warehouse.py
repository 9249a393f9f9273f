"""Where one pipeline's files live: the :class:`Warehouse` value, built once and passed in.

A warehouse is either a folder on a filesystem that the driver, the executors and every other
process of the pipeline share (local mode), or a place on S3-compatible object storage
(``s3://bucket/prefix``) that every host reaches. One warehouse can hold several independent
pipelines, one per *database* (tests and benchmarks use this). Everything a job, a command or
a reader touches is derived here::

    <root>/tables/<table>                    Delta tables of the default database
    <root>/tables/<database>.db/<table>      ... of any other database
    <root>/locks/<database>.lock             the writer lock (dkmsks.storage.writer_lock)
    <root>/locks/<database>.landing.lock     the landing lock, and .sealed (dkmsks.storage.landing)

and, on this host only (:attr:`Warehouse.local_root`: the folder itself for a local warehouse;
``$DKMSKS_LOCAL_DIR`` or ``.cache/local/<bucket>/<prefix>`` for one on object storage)::

    <local>/cache/<database>/                O_init statistics kept for later jobs (safe to delete)
    <local>/_staging/                        files staged for a Spark read, removed after use
    <local>/_spool/                          follow mode's hand-over folder (payloads, records)
    <local>/run/                             PID, log and status files of the services the scripts start

On object storage the tables are ``s3://`` URIs (Spark reads them through S3A, delta-rs
directly) and the two locks are leases on objects (:mod:`dkmsks.storage.leases`); endpoint and
credentials come from the usual AWS variables (:mod:`dkmsks.storage.objectstore`), never from
here. Tables are addressed by location, not through a shared metastore: each Spark session
registers them by location in its own catalog (:mod:`dkmsks.spark.catalog`), and the
Spark-free readers and publishers (delta-rs) open the same locations. So any number of
processes work on one warehouse at the same time (docs/design.md §4 "Live operation").
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

#: The project folder (``lib/dkmsks/warehouse.py`` -> repository root).
PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATABASE = "default"
_DATABASE = re.compile(r"^[a-z_][a-z0-9_]{0,127}$")
#: Object stores a warehouse can live on, by URI scheme (``s3a`` is Hadoop's name for ``s3``).
OBJECT_STORE_SCHEMES = ("s3", "s3a")
# S3's rules for bucket names (3-63 characters, lower case, digits, dots and hyphens).
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_PREFIX_PART = re.compile(r"^[A-Za-z0-9._-]+$")


def default_root() -> str:
    """``$DKMSKS_WAREHOUSE``, else ``.cache/warehouse`` in the project folder."""
    return os.environ.get("DKMSKS_WAREHOUSE") or str(PROJECT_ROOT / ".cache" / "warehouse")


def default_database() -> str:
    """The database of ``$DKMSKS_DATABASE``, or the default one."""
    return os.environ.get("DKMSKS_DATABASE") or DEFAULT_DATABASE


@dataclass(frozen=True)
class ObjectLocation:
    """A place on S3-compatible object storage: a bucket and a key prefix (no slashes at
    either end; may be empty)."""

    bucket: str
    prefix: str = ""

    @classmethod
    def parse(cls, uri: str) -> ObjectLocation:
        """``s3://bucket/prefix`` (or ``s3a://``) as a location; a ValueError names what is wrong."""
        scheme, sep, rest = uri.partition("://")
        if not sep or scheme.lower() not in OBJECT_STORE_SCHEMES:
            raise ValueError(f"warehouse {uri}: give a local folder or s3://bucket/prefix "
                             f"(schemes: {', '.join(OBJECT_STORE_SCHEMES)})")
        bucket, _, prefix = rest.partition("/")
        if not _BUCKET.match(bucket):
            raise ValueError(f"warehouse {uri}: {bucket!r} is not a valid bucket name "
                             "(3-63 lower-case letters, digits, '.' and '-')")
        parts = [part for part in prefix.split("/") if part]
        bad = [part for part in parts if not _PREFIX_PART.match(part) or part in (".", "..")]
        if bad:
            raise ValueError(f"warehouse {uri}: prefix part {bad[0]!r} must be letters, digits, '.', '_' or '-'")
        return cls(bucket, "/".join(parts))

    def key(self, *parts: str) -> str:
        """The object key of ``parts`` below the prefix."""
        return "/".join(p for p in (self.prefix, *parts) if p)

    def uri(self, *parts: str, scheme: str = "s3") -> str:
        """``s3://bucket/prefix/parts`` (``scheme`` ``s3a`` for Hadoop's S3A)."""
        key = self.key(*parts)
        return f"{scheme}://{self.bucket}/{key}" if key else f"{scheme}://{self.bucket}"


def local_home(location: ObjectLocation) -> Path:
    """This host's folder for an object-store warehouse's process files: ``$DKMSKS_LOCAL_DIR``,
    else ``.cache/local/<bucket>/<prefix>`` in the project folder."""
    base = os.environ.get("DKMSKS_LOCAL_DIR")
    if base:
        return Path(base).expanduser().resolve()
    return PROJECT_ROOT / ".cache" / "local" / location.bucket / location.prefix


@dataclass(frozen=True, init=False)
class Warehouse:
    """A pipeline's tables, locks, caches and spools (module doc): a local folder, or a place
    on object storage (:attr:`location`) with this host's process files in :attr:`root`."""

    #: A local warehouse's folder; for one on object storage, this host's folder of process
    #: files (:func:`local_home`).
    root: Path
    database: str
    #: Where the tables and locks of a warehouse on object storage are; None for a local one.
    location: ObjectLocation | None

    def __init__(self, root: str | Path, database: str = DEFAULT_DATABASE) -> None:
        text = str(root)
        if "://" in text:
            location: ObjectLocation | None = ObjectLocation.parse(text)
            assert location is not None
            folder = local_home(location)
        else:
            location, folder = None, Path(root).expanduser().resolve()
        name = (database or DEFAULT_DATABASE).lower()
        if not _DATABASE.match(name):
            raise ValueError(f"database name {database!r}: use lower-case letters, digits and '_', "
                             "starting with a letter or '_'")
        object.__setattr__(self, "root", folder)
        object.__setattr__(self, "database", name)
        object.__setattr__(self, "location", location)

    @classmethod
    def at(cls, root: str | Path | None = None, database: str | None = None) -> Warehouse:
        """The warehouse at ``root`` (a folder or ``s3://bucket/prefix``; default
        :func:`default_root`) for ``database`` (default ``$DKMSKS_DATABASE`` or ``default``)."""
        return cls(root if root is not None else default_root(), database or default_database())

    def with_database(self, database: str) -> Warehouse:
        """The same warehouse with another database."""
        return Warehouse(self.uri, database)

    @property
    def is_local(self) -> bool:
        """Whether the tables are in a folder of this host (else on object storage)."""
        return self.location is None

    @property
    def uri(self) -> str:
        """Where the warehouse is: its folder, or ``s3://bucket/prefix``."""
        return str(self.root) if self.location is None else self.location.uri()

    # ------------------------------------------------------------------ tables
    def _tables_parts(self) -> tuple[str, ...]:
        return ("tables",) if self.database == DEFAULT_DATABASE else ("tables", f"{self.database}.db")

    @property
    def tables_root(self) -> str:
        """Spark's ``spark.sql.warehouse.dir``: managed tables of every database live below."""
        if self.location is None:
            return str(self.root / "tables")
        return self.location.uri("tables", scheme="s3a")

    @property
    def tables_dir(self) -> Path:
        """The folder of this database's tables (Spark's layout for managed tables); local only."""
        return self.root.joinpath(*self._tables_parts()) if self.location is None else self._local_only("tables")

    @property
    def tables_location(self) -> str:
        """Where this database's tables are, as Spark names it (a folder, or an ``s3a://`` URI)."""
        if self.location is None:
            return str(self.tables_dir)
        return self.location.uri(*self._tables_parts(), scheme="s3a")

    def table_uri(self, name: str, *, scheme: str = "s3") -> str:
        """Where table ``name`` is: a folder path, or a URI on object storage (``scheme``
        ``s3a`` for Spark, whose S3A filesystem reads both)."""
        if self.location is None:
            return str(self.root.joinpath(*self._tables_parts(), name))
        return self.location.uri(*self._tables_parts(), name, scheme=scheme)

    def table_key(self, name: str) -> str:
        """The key prefix of table ``name`` on object storage."""
        if self.location is None:
            raise ValueError(f"{self} is a local warehouse: its tables have no object key")
        return self.location.key(*self._tables_parts(), name)

    def table_path(self, name: str) -> Path:
        """The folder of table ``name`` (a local warehouse only: see :meth:`table_uri`)."""
        return self.tables_dir / name

    def _local_only(self, what: str) -> Path:
        raise ValueError(f"{self} is on object storage: its {what} are not a local folder (use table_uri)")

    # ------------------------------------------------------------------ locks (local warehouse)
    @property
    def writer_lock_path(self) -> Path:
        """The writer lock file of this database (a local warehouse; see :attr:`lock_key`)."""
        return self.root / "locks" / f"{self.database}.lock"

    @property
    def landing_lock_path(self) -> Path:
        """Publishers and the pipeline's reads of pending rows (dkmsks.storage.landing)."""
        return self.root / "locks" / f"{self.database}.landing.lock"

    @property
    def seal_path(self) -> Path:
        """The newest timestamp a run has taken (dkmsks.storage.landing)."""
        return self.root / "locks" / f"{self.database}.sealed"

    def lock_key(self, kind: str) -> str:
        """The object key of lock ``kind`` (``lock``, ``landing.lock``, ``sealed``) of a
        warehouse on object storage."""
        if self.location is None:
            raise ValueError(f"{self} is a local warehouse: its locks are files")
        return self.location.key("locks", f"{self.database}.{kind}")

    # ------------------------------------------------------------------ this host's files
    @property
    def cache_dir(self) -> Path:
        """This database's cache folder."""
        return self.root / "cache" / self.database

    @property
    def staging_dir(self) -> Path:
        """The folder where publishers stage files before they land."""
        return self.root / "_staging"

    @property
    def spool_dir(self) -> Path:
        """The folder of follow sessions' spool files."""
        return self.root / "_spool"

    @property
    def run_dir(self) -> Path:
        """The folder of process status and PID files."""
        return self.root / "run"

    def __str__(self) -> str:
        return self.uri if self.database == DEFAULT_DATABASE else f"{self.uri} (database {self.database})"
