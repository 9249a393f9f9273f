"""Where one pipeline's files live: the :class:`Warehouse` value, built once and passed in.

A warehouse is a folder on a filesystem that the driver, the executors and every other
process of the pipeline share (local mode, or docker compose's shared volume). One warehouse
can hold several independent pipelines, one per *database* (tests and benchmarks use this).
Everything a job, a command or a reader touches is a path derived here::

    <root>/tables/<table>                    Delta tables of the default database
    <root>/tables/<database>.db/<table>      ... of any other database
    <root>/locks/<database>.lock             the writer lock (dkmsks.storage.writer_lock)
    <root>/locks/<database>.landing.lock     the landing lock, and .sealed (dkmsks.storage.landing)
    <root>/cache/<database>/                 O_init statistics kept for later jobs (safe to delete)
    <root>/_staging/                         files staged for a Spark read, removed after use
    <root>/_spool/                           follow mode's hand-over folder (payloads, records)
    <root>/run/                              PID and log files of the services the scripts start

Tables are addressed by path, not through a shared metastore: each Spark session registers
them by path in its own catalog (:mod:`dkmsks.spark.catalog`), and the Spark-free readers and
publishers (delta-rs) open the same paths. So any number of processes work on one warehouse
at the same time (docs/design.md §4 "Live operation").
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


def default_root() -> Path:
    """``$DKMSKS_WAREHOUSE``, else ``.cache/warehouse`` in the project folder."""
    return Path(os.environ.get("DKMSKS_WAREHOUSE") or PROJECT_ROOT / ".cache" / "warehouse")


def default_database() -> str:
    """The database of ``$DKMSKS_DATABASE``, or the default one."""
    return os.environ.get("DKMSKS_DATABASE") or DEFAULT_DATABASE


@dataclass(frozen=True)
class Warehouse:
    """The folder of a pipeline's tables, locks, caches and spools (module doc)."""

    root: Path
    database: str = DEFAULT_DATABASE

    def __post_init__(self) -> None:
        root = Path(self.root).expanduser()
        if "://" in str(self.root):
            raise ValueError(f"warehouse {self.root}: give a local folder (a mounted volume); "
                             "URLs are not supported")
        object.__setattr__(self, "root", root.resolve())
        database = (self.database or DEFAULT_DATABASE).lower()
        if not _DATABASE.match(database):
            raise ValueError(f"database name {self.database!r}: use lower-case letters, digits and '_', "
                             "starting with a letter or '_'")
        object.__setattr__(self, "database", database)

    @classmethod
    def at(cls, root: str | Path | None = None, database: str | None = None) -> Warehouse:
        """The warehouse at ``root`` (default :func:`default_root`) for ``database``
        (default ``$DKMSKS_DATABASE`` or ``default``)."""
        return cls(Path(root) if root is not None else default_root(), database or default_database())

    def with_database(self, database: str) -> Warehouse:
        """The same warehouse with another database."""
        return Warehouse(self.root, database)

    # ------------------------------------------------------------------ tables
    @property
    def tables_root(self) -> Path:
        """Spark's ``spark.sql.warehouse.dir``: managed tables of every database live below."""
        return self.root / "tables"

    @property
    def tables_dir(self) -> Path:
        """The folder of this database's tables (Spark's layout for managed tables)."""
        if self.database == DEFAULT_DATABASE:
            return self.tables_root
        return self.tables_root / f"{self.database}.db"

    def table_path(self, name: str) -> Path:
        """The folder of table ``name``."""
        return self.tables_dir / name

    def has_table(self, name: str) -> bool:
        """Whether table ``name`` exists (has a Delta log)."""
        return (self.table_path(name) / "_delta_log").is_dir()

    # ------------------------------------------------------------------ process files
    @property
    def writer_lock_path(self) -> Path:
        """The writer lock file of this database."""
        return self.root / "locks" / f"{self.database}.lock"

    @property
    def landing_lock_path(self) -> Path:
        """Publishers and the pipeline's reads of pending rows (dkmsks.storage.landing)."""
        return self.root / "locks" / f"{self.database}.landing.lock"

    @property
    def seal_path(self) -> Path:
        """The newest timestamp a run has taken (dkmsks.storage.landing)."""
        return self.root / "locks" / f"{self.database}.sealed"

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
        return str(self.root) if self.database == DEFAULT_DATABASE else f"{self.root} (database {self.database})"
