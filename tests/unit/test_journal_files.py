"""A round's journal commit as files written where the records are (dkmsks.storage.journal_files):
worker tasks write their changes, the driver the rest, and one Delta commit adds them all.

The files must read back as the records written, carry the statistics delta-rs would have
given them (a reader's data skipping trusts them: a bound too tight hides rows), commit once
under the journal's application transaction, and leave nothing behind on a replay.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from tests.lake_tables import create_tables

from dkmsks.jobs.follow import CHANGE_FILE_OBJECTS, ChangeFiles, write_changes
from dkmsks.spark.main_server import RoutedBatch
from dkmsks.storage import tables
from dkmsks.storage.journal import (
    JOURNAL_APP,
    commit,
    commit_with_files,
    journal_file_schema,
    journal_records,
    last_processed,
    with_run,
)
from dkmsks.storage.journal_files import JournalFile, file_stats, write_file
from dkmsks.warehouse import Warehouse

pytestmark = pytest.mark.unit


def _worker_records(rng: np.random.Generator, n: int) -> pa.Table:
    """``n`` worker records of the three kinds interleaved, each numbered by ``pairs_tested``;
    finals carry coordinates, keywords, k and weights, metrics their times."""
    kinds = np.asarray(rng.choice(["change", "final", "metric"], size=n))
    final, metric = kinds == "final", kinds == "metric"
    lengths = rng.integers(0, 4, size=n)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    words = np.asarray(["cafe", "bar", "museum", "park", "zoo"])
    kw_lengths = np.where(final, rng.integers(1, 3, size=n), 0)
    kw_offsets = np.concatenate([[0], np.cumsum(kw_lengths)]).astype(np.int32)

    def where(mask: np.ndarray, values: np.ndarray, kind: pa.DataType) -> pa.Array:
        return pa.array(values, type=kind, mask=~mask)

    return pa.table({
        "record": pa.array(kinds.tolist()),
        "t": pa.array(rng.integers(1, 4, size=n), type=pa.int64()),
        "seq": pa.array(np.arange(n), type=pa.int64()),
        "worker": pa.array(rng.integers(0, 4, size=n).astype(np.int32)),
        "sub_id": where(~metric, rng.integers(0, 1_000_000, size=n), pa.int64()),
        "change": pa.array([{"change": "update", "final": "upsert"}.get(k) for k in kinds.tolist()], type=pa.string()),
        "object_ids": pa.ListArray.from_arrays(pa.array(offsets),
                                               pa.array(rng.integers(0, 10**9, size=int(offsets[-1])))),
        "d2": pa.ListArray.from_arrays(pa.array(offsets), pa.array(rng.random(int(offsets[-1])))),
        "x": where(final, rng.uniform(-125, -66, size=n), pa.float64()),
        "y": where(final, rng.uniform(24, 50, size=n), pa.float64()),
        "keywords": pa.ListArray.from_arrays(pa.array(kw_offsets),
                                             pa.array(words[rng.integers(0, 5, size=int(kw_offsets[-1]))].tolist())),
        "k": where(final, rng.integers(1, 11, size=n).astype(np.int32), pa.int32()),
        "weight": where(final, rng.integers(0, 10**6, size=n), pa.int64()),
        "knn_ms": where(metric, rng.random(n) * 5, pa.float64()),
        # the row's number, to find it again (never read by the code under test)
        "pairs_tested": pa.array(np.arange(n), type=pa.int64()),
    })


def _routed(timestamps: list[int]) -> RoutedBatch:
    return RoutedBatch(payload=None, counts={t: (10 * t, t, 0) for t in timestamps})  # type: ignore[arg-type]


def _records(seed: int, n: int = 2_000) -> pa.Table:
    out = _worker_records(np.random.default_rng(seed), n)
    return journal_records(out, plan_version=2, routed=_routed([1, 2, 3]), timestamps=[1, 2, 3], from_t=0,
                           run_id="run-x")


def _adds(lake_root: str, version: int) -> list[dict]:
    log = Path(lake_root) / "_delta_log" / f"{version:020d}.json"
    return [json.loads(line)["add"] for line in log.read_text().splitlines() if '"add"' in line]


@pytest.mark.parametrize("seed", [1, 2])
def test_file_statistics_are_those_delta_rs_writes_for_the_same_file(tmp_path: Path, seed: int) -> None:
    lake = create_tables(Warehouse(tmp_path / "wh"))
    assert commit(lake, _records(seed), 3)  # delta-rs writes the files and their statistics
    root = lake.local_root(tables.JOURNAL)
    adds = _adds(root, lake.version(tables.JOURNAL))
    assert sorted(a["partitionValues"]["record"] for a in adds) == ["change", "final", "ledger", "metric"]
    for add in adds:
        rows = pq.read_table(os.path.join(root, add["path"]))
        assert json.loads(file_stats(rows)) == json.loads(add["stats"]), add["partitionValues"]


def test_bounds_of_a_column_with_nan_or_an_infinity_are_left_out() -> None:
    rows = pa.table({"t": pa.array([3, 1, 2], type=pa.int64()), "a": [0.5, float("inf"), None],
                     "b": [0.5, float("nan"), 1.5], "c": [None, 2.5, 1.5], "ids": [[1], [], None]})
    stats = json.loads(file_stats(rows))
    assert stats == {"numRecords": 3, "minValues": {"t": 1, "c": 1.5}, "maxValues": {"t": 3, "c": 2.5},
                     "nullCount": {"t": 0, "a": 1, "b": 0, "c": 1}}


def test_files_of_tasks_and_driver_commit_once_read_back_as_written_and_a_replay_adds_nothing(tmp_path: Path) -> None:
    lake = create_tables(Warehouse(tmp_path / "wh"))
    root = lake.local_root(tables.JOURNAL)
    schema = journal_file_schema(lake)
    out = _worker_records(np.random.default_rng(7), 3_000)
    is_change = pc.equal(out.column("record"), "change")
    changes, rest = out.filter(is_change), out.filter(pc.invert(is_change))
    # Two worker tasks write their halves of the changes, the driver the rest with its ledger.
    half = changes.num_rows // 2
    written = [write_file(root, "change", with_run(part.drop_columns(["record", "seq"]), plan_version=2,
                                                   run_id="run-x"), schema)
               for part in (changes.slice(0, half), changes.slice(half))]
    records = journal_records(rest, plan_version=2, routed=_routed([1, 2, 3]), timestamps=[1, 2, 3], from_t=0,
                              run_id="run-x")
    before = lake.version(tables.JOURNAL)
    assert commit_with_files(lake, records, written, 3, schema=schema)
    assert lake.version(tables.JOURNAL) == before + 1
    assert last_processed(lake) == 3
    assert lake.table(tables.JOURNAL).transaction_version(JOURNAL_APP) == 3

    back = lake.read(tables.JOURNAL)
    kinds = back.column("record")
    for kind in ("change", "final", "metric"):
        got = back.filter(pc.equal(kinds, kind)).sort_by("pairs_tested")
        want = out.filter(pc.equal(out.column("record"), kind)).sort_by("pairs_tested")
        assert got.num_rows == want.num_rows > 0
        for column in ("pairs_tested", "t", "worker", "sub_id", "change", "object_ids", "d2", "x", "y", "keywords",
                       "k", "weight", "knn_ms"):
            assert got.column(column).to_pylist() == want.column(column).to_pylist(), (kind, column)
        assert set(got.column("plan_version").to_pylist()) == {2}
        assert set(got.column("run_id").to_pylist()) == {"run-x"}
    ledger = back.filter(pc.equal(kinds, "ledger")).sort_by("t")
    assert ledger.column("t").to_pylist() == [1, 2, 3]
    assert ledger.column("objects").to_pylist() == [10, 20, 30]
    adds = _adds(root, lake.version(tables.JOURNAL))
    assert sorted(a["path"] for a in adds if a["partitionValues"]["record"] == "change") == \
        sorted(f.path for f in written)
    for add in adds:  # each file's statistics are its rows' (checked against delta-rs's above)
        assert json.loads(add["stats"]) == json.loads(file_stats(pq.read_table(os.path.join(root, add["path"]))))

    # The same timestamps again (a round replayed after a crash): nothing committed, its files gone.
    again = [write_file(root, "change", with_run(changes.drop_columns(["record", "seq"]), plan_version=2,
                                                 run_id="run-y"), schema)]
    assert not commit_with_files(lake, records, again, 3, schema=schema)
    assert lake.version(tables.JOURNAL) == before + 1
    assert not os.path.exists(os.path.join(root, again[0].path))
    assert all(os.path.exists(os.path.join(root, f.path)) for f in written)
    assert lake.read(tables.JOURNAL).num_rows == back.num_rows


def test_a_task_writes_its_changes_as_a_file_of_the_run_or_writes_nothing(tmp_path: Path) -> None:
    lake = create_tables(Warehouse(tmp_path / "wh"))
    root = lake.local_root(tables.JOURNAL)
    files = ChangeFiles(root, journal_file_schema(lake), plan_version=5, run_id="follow-a")
    out = _worker_records(np.random.default_rng(3), 400)
    changes = out.filter(pc.equal(out.column("record"), "change"))
    described = write_changes([changes.slice(0, 10), changes.slice(10)], files)
    assert described is not None
    described = JournalFile.from_json(described.to_json())  # as the driver reads it
    assert described.kind == "change" and described.rows == changes.num_rows
    assert described.path.startswith("record=change/")
    rows = pq.read_table(os.path.join(root, described.path))
    assert rows.schema.names == files.schema.names
    assert rows.column("pairs_tested").to_pylist() == changes.column("pairs_tested").to_pylist()
    assert set(rows.column("plan_version").to_pylist()) == {5}
    assert set(rows.column("run_id").to_pylist()) == {"follow-a"}
    assert described.size == os.path.getsize(os.path.join(root, described.path))
    # A task whose workers changed nothing writes no file.
    assert write_changes([changes.slice(0, 0)], files) is None
    assert write_changes([], files) is None
    assert len(list(Path(root, "record=change").iterdir())) == 1


def test_follow_names_the_default_from_which_tasks_write_changes(capsys: pytest.CaptureFixture[str]) -> None:
    from dkmsks.cli import build_parser

    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["follow", "--help"])
    assert f"(default {CHANGE_FILE_OBJECTS}:" in " ".join(capsys.readouterr().out.split())
    assert parser.parse_args(["follow"]).task_changes_from is None  # FollowSession's default
    assert parser.parse_args(["follow", "--task-changes-from", "0"]).task_changes_from == 0
    with pytest.raises(SystemExit):
        parser.parse_args(["follow", "--task-changes-from", "-5"])
    assert "must be at least 0, got -5" in capsys.readouterr().err
