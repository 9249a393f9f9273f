"""The Warehouse value: every path a job or reader uses, derived in one place."""

from __future__ import annotations

from pathlib import Path

import pytest

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
    assert not other.has_table("journal")


def test_relative_roots_resolve_and_bad_names_are_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert Warehouse(Path("w")).root == tmp_path / "w"
    with pytest.raises(ValueError, match="database name 'x-y'"):
        Warehouse(tmp_path, "x-y")
    with pytest.raises(ValueError, match="URLs are not supported"):
        Warehouse("s3a://bucket/w")


def test_the_environment_gives_the_default_root(tmp_path, monkeypatch):
    monkeypatch.setenv("DKMSKS_WAREHOUSE", str(tmp_path / "env"))
    monkeypatch.setenv("DKMSKS_DATABASE", "pipe")
    w = Warehouse.at()
    assert (w.root, w.database) == (tmp_path / "env", "pipe")
    assert Warehouse.at(tmp_path / "x", "db2").database == "db2"
