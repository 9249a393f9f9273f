"""The Warehouse value: every path a job or reader uses, derived in one place."""

from __future__ import annotations

from pathlib import Path

import pytest

from dkmsks.storage.lake import has_table
from dkmsks.warehouse import Warehouse

pytestmark = pytest.mark.unit


def test_paths_of_the_default_and_of_another_database(tmp_path):
    default = Warehouse(tmp_path / "w")
    assert default.table_path("journal") == tmp_path / "w" / "tables" / "journal"
    assert default.writer_lock_path == tmp_path / "w" / "locks" / "default.lock"
    other = default.with_database("Bench_1")
    assert other.database == "bench_1"
    assert other.table_path("journal") == tmp_path / "w" / "tables" / "bench_1.db" / "journal"
    assert other.cache_dir == tmp_path / "w" / "cache" / "bench_1"
    assert other.writer_lock_path == tmp_path / "w" / "locks" / "bench_1.lock"
    assert not has_table(other, "journal")


def test_relative_roots_resolve_and_bad_names_are_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert Warehouse(Path("w")).root == tmp_path / "w"
    with pytest.raises(ValueError, match="database name 'x-y'"):
        Warehouse(tmp_path, "x-y")
    with pytest.raises(ValueError, match="give a local folder or s3://bucket/prefix"):
        Warehouse("gs://bucket/w")
    with pytest.raises(ValueError, match="'Bad_Bucket' is not a valid bucket name"):
        Warehouse("s3://Bad_Bucket/w")
    with pytest.raises(ValueError, match="prefix part '..'"):
        Warehouse("s3://bucket/a/../b")


def test_a_warehouse_on_object_storage_keeps_tables_and_locks_there_and_process_files_here(tmp_path, monkeypatch):
    monkeypatch.setenv("DKMSKS_LOCAL_DIR", str(tmp_path / "local"))
    w = Warehouse("s3a://bucket/some/prefix/", "Pipe")
    assert not w.is_local and w.uri == "s3://bucket/some/prefix" and str(w) == "s3://bucket/some/prefix (database pipe)"
    assert w.table_uri("journal") == "s3://bucket/some/prefix/tables/pipe.db/journal"
    assert w.table_uri("journal", scheme="s3a") == "s3a://bucket/some/prefix/tables/pipe.db/journal"
    assert w.table_key("journal") == "some/prefix/tables/pipe.db/journal"
    assert w.lock_key("lock") == "some/prefix/locks/pipe.lock"
    assert w.tables_root == "s3a://bucket/some/prefix/tables"
    assert w.with_database("default").table_uri("objects") == "s3://bucket/some/prefix/tables/objects"
    # Run files, spools and caches stay on this host.
    assert w.run_dir == tmp_path / "local" / "run" and w.cache_dir == tmp_path / "local" / "cache" / "pipe"
    with pytest.raises(ValueError, match="on object storage"):
        w.table_path("journal")
    with pytest.raises(ValueError, match="local warehouse"):
        Warehouse(tmp_path).lock_key("lock")
    assert w == Warehouse("s3://bucket/some/prefix", "pipe") and w != Warehouse("s3://bucket/other", "pipe")


def test_the_environment_gives_the_default_root(tmp_path, monkeypatch):
    monkeypatch.setenv("DKMSKS_WAREHOUSE", str(tmp_path / "env"))
    monkeypatch.setenv("DKMSKS_DATABASE", "pipe")
    w = Warehouse.at()
    assert (w.root, w.database) == (tmp_path / "env", "pipe")
    assert Warehouse.at(tmp_path / "x", "db2").database == "db2"
