"""Lake.sorted_values: a column's values kept per process and read file by file. Each call
must equal a fresh scan of the table at that version — after appends by another writer, after
a rewrite that removes files, at a pinned older version, and for a table whose protocol allows
deletion vectors — while reading only the files added since the last call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from dkmsks.core.sets import in_any_sorted
from dkmsks.storage import lake as lake_module
from dkmsks.storage.lake import Lake

pytestmark = pytest.mark.unit


def scanned(uri: str, version: int | None = None) -> list[int]:
    """The column as a fresh delta-rs table reads it: the expectation of every call."""
    table = DeltaTable(uri, version=version)
    return sorted(pa.RecordBatchReader.from_stream(table.scan(columns=["id"])).read_all().column("id").to_pylist())


def values(lake: Lake, version: int | None = None) -> list[int]:
    chunks = lake.sorted_values("objects", "id", version)
    for chunk in chunks:
        assert chunk.dtype == np.int64 and np.all(chunk[1:] >= chunk[:-1]), "every chunk is sorted"
    return sorted(np.concatenate(chunks).tolist()) if chunks else []


@pytest.fixture
def reads(monkeypatch) -> list[list[str]]:
    """The data files read, one list per scan (every file goes through ``_read_column``)."""
    opened: list[list[str]] = []
    real = lake_module._read_column

    def counting(paths, column):
        opened.append([str(path) for path in paths])
        return real(paths, column)

    monkeypatch.setattr(lake_module, "_read_column", counting)
    return opened


def test_only_new_files_are_read_and_every_call_equals_a_scan(
        tmp_path: Path, reads: list[list[str]], monkeypatch) -> None:
    monkeypatch.setattr(lake_module, "_MERGE_AFTER", 3)  # merges happen within the test
    uri = str(tmp_path / "objects")
    lake = Lake({"objects": uri})
    rng = np.random.default_rng(3)
    write_deltalake(uri, pa.table({"id": rng.permutation(10_000).astype(np.int64)}), mode="append")
    assert values(lake) == scanned(uri) and [len(scan) for scan in reads] == [1]
    for round_ in range(8):  # another writer appends, the lake appends, a call in between each
        write_deltalake(uri, pa.table({"id": rng.integers(0, 50_000, 300)}), mode="append")
        lake.append("objects", pa.table({"id": pa.array(rng.integers(0, 50_000, 200), pa.int64())}))
        before = len(reads)
        assert values(lake) == scanned(uri), round_
        assert [len(scan) for scan in reads[before:]] == [2], "the two files added since, in one scan"
    # Look-ups against the chunks find exactly the landed ids.
    probe = rng.integers(0, 60_000, 2_000)
    found = in_any_sorted(probe, lake.sorted_values("objects", "id"))
    assert found.tolist() == np.isin(probe, scanned(uri)).tolist()
    # A pinned older version reads what that version holds (and the latest again after it).
    assert values(lake, version=3) == scanned(uri, version=3)
    assert values(lake) == scanned(uri)


def test_a_rewrite_that_removes_files_is_read_again(tmp_path: Path, reads: list[list[str]]) -> None:
    uri = str(tmp_path / "objects")
    lake = Lake({"objects": uri})
    for part in range(4):
        write_deltalake(uri, pa.table({"id": pa.array(np.arange(part * 100, part * 100 + 100), pa.int64())}),
                        mode="append")
    assert values(lake) == list(range(400))
    assert [len(scan) for scan in reads] == [4], "a cold call reads every file in one scan"
    DeltaTable(uri).delete("id >= 150 AND id < 250")  # rewrites the files holding those rows
    assert values(lake) == scanned(uri) == [*range(150), *range(250, 400)]
    DeltaTable(uri).optimize.compact()  # packs the files: every file read before is gone
    assert values(lake) == scanned(uri)
    write_deltalake(uri, pa.table({"id": pa.array([7, 7_000], pa.int64())}), mode="overwrite")
    assert values(lake) == [7, 7_000]


def test_a_table_that_may_hold_deletion_vectors_is_read_through_its_scan_per_version(
        tmp_path: Path, reads: list[list[str]], monkeypatch) -> None:
    uri = str(tmp_path / "objects")
    lake = Lake({"objects": uri})
    scans: list[int | None] = []
    real = Lake.read

    def counted_read(self: Lake, name: str, **kw: Any) -> Any:
        scans.append(kw.get("version"))
        return real(self, name, **kw)

    monkeypatch.setattr(Lake, "read", counted_read)
    write_deltalake(uri, pa.table({"id": pa.array(np.arange(50), pa.int64())}), mode="append",
                    configuration={"delta.enableDeletionVectors": "true"})
    assert DeltaTable(uri).protocol().min_reader_version > 1
    assert values(lake) == list(range(50))
    assert values(lake) == list(range(50)) and scans == [0], "one scan per table version"
    DeltaTable(uri).delete("id < 10")
    assert values(lake) == scanned(uri) == list(range(10, 50))
    assert scans == [0, 1]
    assert values(lake, version=0) == list(range(50))
    assert reads == [], "no data file is read past the table's own scan"


def test_on_reuse_the_first_ask_reads_nothing_and_later_ones_equal_a_scan(
        tmp_path: Path, reads: list[list[str]]) -> None:
    uri = str(tmp_path / "objects")
    lake = Lake({"objects": uri})
    write_deltalake(uri, pa.table({"id": pa.array([5, 3, 9], pa.int64())}), mode="append")
    assert lake.sorted_values_on_reuse("objects", "id") is None and reads == []
    for ids in ([4, 1], [8]):
        chunks = lake.sorted_values_on_reuse("objects", "id")
        assert chunks is not None and sorted(np.concatenate(chunks).tolist()) == scanned(uri)
        write_deltalake(uri, pa.table({"id": pa.array(ids, pa.int64())}), mode="append")
    assert lake.sorted_values_on_reuse("objects", "id", version=0) is not None
    assert sorted(np.concatenate(lake.sorted_values_on_reuse("objects", "id")).tolist()) == scanned(uri)
