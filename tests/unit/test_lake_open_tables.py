"""The lake's open tables (dkmsks.storage.lake._OpenTables): a reader that keeps its delta-rs
tables open and updates them must see exactly what a fresh open sees — every commit of another
process, a table made again at the same place, its own thread's copy only."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from dkmsks.storage.lake import Lake, MissingTable

pytestmark = pytest.mark.unit


def ids(lake: Lake) -> list[int]:
    return sorted(lake.read("objects", columns=["id"]).column("id").to_pylist())


@pytest.fixture
def lake(tmp_path: Path) -> Lake:
    return Lake({"objects": str(tmp_path / "objects")})


def test_commits_of_another_process_are_seen_by_the_open_table(lake: Lake) -> None:
    uri = lake.uris["objects"]
    write_deltalake(uri, pa.table({"id": [1, 2]}), mode="append")
    first = lake.table("objects")
    assert ids(lake) == [1, 2] and lake.version("objects") == 0
    # Another process appends (its own delta-rs, its own log reads).
    subprocess.run([sys.executable, "-c", "import pyarrow as pa, sys; from deltalake import write_deltalake; "
                    "write_deltalake(sys.argv[1], pa.table({'id': [3]}), mode='append')", uri], check=True)
    assert ids(lake) == [1, 2, 3] and lake.version("objects") == 1
    assert lake.table("objects") is first, "the open table is updated, not opened again"
    # An append through the lake, then an older version on request: a separate table object.
    lake.append("objects", pa.table({"id": [4]}))
    assert ids(lake) == [1, 2, 3, 4]
    assert sorted(lake.read("objects", columns=["id"], version=0).column("id").to_pylist()) == [1, 2]
    assert lake.version("objects") == 2
    # The latest version asked for by number is the open table (no second read of the log).
    assert lake.table("objects", version=2) is lake.table("objects")
    assert lake.table("objects", version=1) is not lake.table("objects")


def test_a_table_made_again_at_the_same_place_is_opened_afresh(lake: Lake) -> None:
    uri = lake.uris["objects"]
    for t in range(3):  # the old table reaches version 2
        write_deltalake(uri, pa.table({"id": [10 + t]}), mode="append")
    assert ids(lake) == [10, 11, 12]
    shutil.rmtree(uri)
    with pytest.raises(MissingTable, match="table objects does not exist yet"):
        lake.read("objects")
    # Made again with more commits than the old one had: updating the old copy from its
    # version 2 would read the new table's commit 3 on top of the old table's rows.
    for t in range(4):
        write_deltalake(uri, pa.table({"id": [20 + t]}), mode="append")
    assert ids(lake) == [20, 21, 22, 23]
    shutil.rmtree(uri)
    for t in range(5):
        write_deltalake(uri, pa.table({"id": [30 + t]}), mode="append")
    assert ids(lake) == [30, 31, 32, 33, 34]


def test_each_thread_has_its_own_open_table(lake: Lake) -> None:
    write_deltalake(lake.uris["objects"], pa.table({"id": [1]}), mode="append")
    mine = lake.table("objects")
    seen: list[object] = []
    worker = threading.Thread(target=lambda: seen.extend([lake.table("objects"), lake.table("objects")]))
    worker.start()
    worker.join()
    assert seen[0] is seen[1] and seen[0] is not mine
    assert lake.table("objects") is mine


def test_committed_after_sees_each_new_commit_and_agrees_with_the_version(lake: Lake) -> None:
    # Follow mode's idle look: one file look per table instead of listing its log.
    uri = lake.uris["objects"]
    write_deltalake(uri, pa.table({"id": [1]}), mode="append")
    assert not lake.committed_after("objects", lake.version("objects"))
    subprocess.run([sys.executable, "-c", "import pyarrow as pa, sys; from deltalake import write_deltalake; "
                    "write_deltalake(sys.argv[1], pa.table({'id': [2]}), mode='append')", uri], check=True)
    assert lake.committed_after("objects", 0)
    assert lake.version("objects") == 1 and not lake.committed_after("objects", 1)
    lake.append("objects", pa.table({"id": [3]}))
    assert lake.committed_after("objects", 1) and not lake.committed_after("objects", 2)


def test_version_from_a_known_version_finds_the_latest(lake: Lake) -> None:
    uri = lake.uris["objects"]
    for i in range(3):
        write_deltalake(uri, pa.table({"id": [i]}), mode="append")
    assert lake.version_from("objects", 0) == lake.version("objects") == 2
    assert lake.version_from("objects", 2) == 2
