"""The landing protocol without Spark: publish_rows' rules (replays, sealed timestamps, landed
object ids, liveness, quarantine), the landing lock against take_pending, and publish_files'
windows over workload files. Tables are made by delta-rs from sql/ddl (tests/lake_tables.py).
"""

from __future__ import annotations

import subprocess
import sys
import time

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from dkmsks.core.model import Vocabulary
from dkmsks.storage import tables
from dkmsks.storage.journal import commit, last_processed
from dkmsks.storage.lake import Lake
from dkmsks.storage.landing import (
    RefusedRows,
    landing_lock,
    next_open_timestamp,
    publish_rows,
    sealed_through,
    take_pending,
)
from lake_tables import partitioned_warehouse

O_INIT = [(1, 0.1, 0.1, ["cafe"], 0), (2, 0.2, 0.2, ["bar"], 0), (3, 0.3, 0.3, ["cafe", "bar"], 0)]
LIVE = [(100, 0.1, 0.1, ["cafe"], 2), (101, 0.2, 0.2, ["bar"], 1)]  # registered at T0 = 0


@pytest.fixture
def warehouse(tmp_path):
    return partitioned_warehouse(tmp_path / "wh", objects=O_INIT, subscriptions=LIVE)


def objects(*rows, source="batch.tsv"):
    """Landing rows of objects ``(id, x, y, keywords, t)``; lines count from 2 like a file's."""
    return pa.table({"id": [r[0] for r in rows], "x": [float(r[1]) for r in rows], "y": [float(r[2]) for r in rows],
                     "keywords": [r[3] for r in rows], "t": [r[4] for r in rows],
                     "source": [source] * len(rows), "line": list(range(2, len(rows) + 2))})


def events(*rows, source="batch-events.tsv"):
    """Landing rows of events ``("insert", id, x, y, keywords, k, t)`` or ``("delete", id, t)``."""
    full = [r if r[0] == "insert" else (r[0], r[1], None, None, None, None, r[2]) for r in rows]
    return pa.table({"op": [r[0] for r in full], "id": [r[1] for r in full],
                     "x": pa.array([r[2] for r in full], pa.float64()),
                     "y": pa.array([r[3] for r in full], pa.float64()),
                     "keywords": pa.array([r[4] for r in full], pa.list_(pa.string())),
                     "k": pa.array([r[5] for r in full], pa.int32()), "t": [r[6] for r in full],
                     "source": [source] * len(full), "line": list(range(2, len(full) + 2))})


def versions(warehouse):
    lake = Lake.of(warehouse)
    return {name: lake.version(name) for name in (tables.OBJECTS, tables.EVENTS, tables.QUARANTINE)}


def quarantined(warehouse):
    rows = Lake.of(warehouse).read(tables.QUARANTINE).to_pylist()
    return {(r["target"], r["source"], r["line"]): r["reason"] for r in rows}


def landed_ids(warehouse, name):
    return sorted(Lake.of(warehouse).read(name, columns=["id"]).column("id").to_pylist())


@pytest.mark.unit
def test_a_batch_lands_once_and_its_replay_adds_no_row_and_no_table_version(warehouse):
    batch = {"objects": objects((10, 0.5, 0.5, ["cafe"], 1), (11, 0.6, 0.6, ["bar", "cafe", "bar"], 2)),
             "events": events(("insert", 102, 0.5, 0.5, ["cafe"], 3, 1), ("delete", 100, 2))}
    first = publish_rows(warehouse, **batch)
    assert (first.objects, first.events, first.replayed, first.quarantined) == (2, 2, 0, 0)
    assert (first.first_t, first.last_t) == (1, 2)
    before, counts = versions(warehouse), {n: landed_ids(warehouse, n) for n in (tables.OBJECTS, tables.EVENTS)}

    again = publish_rows(warehouse, **batch)
    assert (again.objects, again.events, again.replayed, again.refused) == (0, 0, 4, [])
    assert versions(warehouse) == before
    assert {n: landed_ids(warehouse, n) for n in (tables.OBJECTS, tables.EVENTS)} == counts
    # Keywords are stored distinct and sorted, as the Spark ingestion stores them.
    row = Lake.of(warehouse).read(tables.OBJECTS).filter(pc.field("id") == 11).to_pylist()[0]
    assert row["keywords"] == ["bar", "cafe"]


@pytest.mark.unit
def test_rows_for_taken_timestamps_are_quarantined_as_closed_and_replays_of_them_are_not(warehouse):
    landed = objects((10, 0.5, 0.5, ["cafe"], 1))
    publish_rows(warehouse, objects=landed)
    lake = Lake.of(warehouse)
    taken = take_pending(warehouse, lake, Vocabulary(), after=0)
    assert taken.timestamps == [1] and sealed_through(warehouse) == 1 and next_open_timestamp(warehouse) == 2

    late = publish_rows(warehouse, objects=objects((12, 0.5, 0.5, ["cafe"], 1), (13, 0.5, 0.5, ["bar"], 2),
                                                     source="late.tsv"),
                        events=events(("insert", 103, 0.1, 0.2, ["bar"], 1, 1), source="late-events.tsv"))
    closed = "timestamp 1 is closed: the pipeline has taken every timestamp up to 1; publish at t > 1"
    assert quarantined(warehouse) == {("objects", "late.tsv", 2): closed,
                                      ("subscription_events", "late-events.tsv", 2): closed}
    assert (late.objects, late.events, late.quarantined) == (1, 0, 2)
    assert landed_ids(warehouse, tables.OBJECTS) == [1, 2, 3, 10, 13]
    assert [r.text for _, r in late.refused] == ["12\t0.5\t0.5\tcafe\t1", "insert\t103\t0.1\t0.2\tbar\t1\t1"]

    # A publisher retrying its batch after the pipeline took it is a replay, not a late row.
    before = versions(warehouse)
    retry = publish_rows(warehouse, objects=landed)
    assert (retry.replayed, retry.refused) == (1, []) and versions(warehouse) == before


@pytest.mark.unit
def test_an_object_id_landed_with_other_values_is_quarantined_naming_where_it_landed(warehouse):
    report = publish_rows(warehouse, objects=objects(
        (1, 0.1, 0.1, ["cafe"], 0),  # an exact replay of an O_init row
        (2, 0.9, 0.2, ["bar"], 1),  # moved
        (3, 0.3, 0.3, ["cafe"], 0),  # other keywords
        (20, 0.4, 0.4, ["cafe"], 1), (20, 0.4, 0.4, ["cafe"], 1)))  # new, then repeated in the batch
    assert report.replayed == 1 and report.objects == 1
    assert quarantined(warehouse) == {
        ("objects", "batch.tsv", 3): "duplicate object id 2 (already ingested from o_init.tsv line 3)",
        ("objects", "batch.tsv", 4): "duplicate object id 3 (already ingested from o_init.tsv line 4)",
        ("objects", "batch.tsv", 6): "duplicate object id 20 (first seen on line 5)",
    }
    assert landed_ids(warehouse, tables.OBJECTS) == [1, 2, 3, 20]


@pytest.mark.unit
def test_liveness_follows_the_state_then_the_pending_events_then_the_batch(warehouse):
    first = publish_rows(warehouse, events=events(
        ("delete", 999, 1),  # never registered
        ("insert", 100, 0.1, 0.1, ["cafe"], 2, 1),  # live in the state
        ("insert", 103, 0.3, 0.3, ["bar"], 2, 1),
        ("delete", 101, 1)))
    assert {r.line: r.reason for _, r in first.refused} == {
        2: "delete of subscription 999, which is not live at t=1",
        3: "insert of subscription 100, which is already live"}
    # A later batch sees the pending events: 103 is live, 101 deleted and may come back.
    second = publish_rows(warehouse, events=events(
        ("delete", 103, 2), ("insert", 101, 0.2, 0.2, ["cafe"], 4, 2), ("delete", 101, 1), ("delete", 101, 3),
        ("insert", 103, 0.3, 0.3, ["bar"], 2, 1), source="second.tsv"))
    assert {r.line: r.reason for _, r in second.refused} == {}, second.refused
    assert (second.events, second.replayed) == (3, 2)
    # An event with the key of a landed one but other values is no replay.
    third = publish_rows(warehouse, events=events(("insert", 101, 0.2, 0.2, ["cafe"], 5, 2), source="third.tsv"))
    assert [r.reason for _, r in third.refused] == ["insert of subscription 101, which is already live"]


@pytest.mark.unit
def test_a_strict_publish_refuses_the_whole_batch_and_writes_nothing(warehouse):
    before = versions(warehouse)
    with pytest.raises(RefusedRows, match="insert of subscription 100, which is already live") as err:
        publish_rows(warehouse, objects=objects((30, 0.1, 0.1, ["cafe"], 1)),
                     events=events(("insert", 100, 0.1, 0.1, ["cafe"], 2, 1)), strict=True)
    assert not err.value.closed_only
    assert versions(warehouse) == before


@pytest.mark.unit
def test_a_refused_line_is_recorded_once_whatever_its_later_verdict(warehouse):
    bad = objects((2, 0.9, 0.2, ["bar"], 1))
    publish_rows(warehouse, objects=bad)
    before = versions(warehouse)
    again = publish_rows(warehouse, objects=bad)
    assert again.quarantined == 0 and len(again.refused) == 1 and versions(warehouse) == before
    assert len(quarantined(warehouse)) == 1


HOLD_AND_PUBLISH = """
import sys, time
import pyarrow as pa
from dkmsks.storage import tables
from dkmsks.storage.lake import Lake
from dkmsks.storage.landing import landing_lock
from dkmsks.warehouse import Warehouse
warehouse = Warehouse(sys.argv[1])
lake = Lake.of(warehouse)
with landing_lock(warehouse, "a slow publisher"):
    lake.append(tables.OBJECTS, pa.table({"id": [40], "x": [0.5], "y": [0.5], "keywords": [["cafe"]], "t": [1]}))
    print("objects landed", flush=True)
    time.sleep(1.5)
    lake.append(tables.EVENTS, pa.table({"op": ["insert"], "id": [140], "x": [0.5], "y": [0.5],
                                         "keywords": [["cafe"]], "k": pa.array([1], pa.int32()), "t": [1]}))
"""


@pytest.mark.slow  # a publisher process holds the lock for 1.5 s
def test_the_landing_lock_keeps_a_half_published_timestamp_from_a_run(warehouse):
    proc = subprocess.Popen([sys.executable, "-c", HOLD_AND_PUBLISH, str(warehouse.root)], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "objects landed"
        started = time.monotonic()
        taken = take_pending(warehouse, Lake.of(warehouse), Vocabulary(), after=0, who="a test run")
        assert time.monotonic() - started > 0.5  # it waited for the publisher
        assert taken.timestamps == [1]
        assert taken.objects.ids.tolist() == [40] and taken.events.ids.tolist() == [140]
    finally:
        proc.wait(timeout=30)
    with landing_lock(warehouse, "a publisher", timeout=0):  # released by both
        pass


@pytest.mark.unit
def test_the_last_processed_timestamp_from_the_log_is_the_ledgers(warehouse):
    lake = Lake.of(warehouse)

    def newest_ledger_t(version=None):  # what last_processed stands for: a scan of the ledger records
        t = lake.read(tables.JOURNAL, columns=["t"], predicate="record = 'ledger'", version=version).column("t")
        return pc.max(t).as_py()

    assert last_processed(lake) == newest_ledger_t() == 0
    for to_t in (2, 3, 7):
        commit(lake, pa.table({"record": ["ledger"], "t": [to_t], "plan_version": [0], "run_id": ["r"]}), to_t)
    assert not commit(lake, pa.table({"record": ["ledger"], "t": [5], "plan_version": [0], "run_id": ["r"]}), 5)
    assert last_processed(lake) == newest_ledger_t() == 7
    before = lake.version(tables.JOURNAL) - 1
    assert last_processed(lake, version=before) == newest_ledger_t(before) == 3


@pytest.mark.unit
def test_the_export_defaults_to_the_ledgers_newest_timestamp_and_refuses_unprocessed_ones(warehouse):
    from dkmsks.storage.export import resolve_as_of

    lake = Lake.of(warehouse)
    for to_t in (2, 5):
        commit(lake, pa.table({"record": ["ledger"], "t": [to_t], "plan_version": [0], "run_id": ["r"]}), to_t)
    newest = pc.max(lake.read(tables.JOURNAL, columns=["t"], predicate="record = 'ledger'").column("t")).as_py()
    assert resolve_as_of(lake, None) == newest == 5
    assert resolve_as_of(lake, 2) == 2
    with pytest.raises(ValueError, match="timestamp 3 has not been processed; processed timestamps run from 0 to 5"):
        resolve_as_of(lake, 3)
