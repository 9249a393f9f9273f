"""dkm publish without Spark: the next timestamps of workload files, validated with the
readers' rules, bad rows quarantined with file, line and reason, windows that advance."""

from __future__ import annotations

import pytest

from dkmsks.cli import main
from dkmsks.io.rejections import AllRowsRejected
from dkmsks.storage import tables
from dkmsks.storage.lake import Lake
from dkmsks.storage.publish import publish_files
from lake_tables import partitioned_warehouse

pytestmark = pytest.mark.unit

O_INIT = [(1, 0.1, 0.1, ["cafe"], 0), (2, 0.2, 0.2, ["bar"], 0)]
LIVE = [(100, 0.1, 0.1, ["cafe"], 2)]
OBJECTS = [
    "id\tx\ty\tkeywords\tt",
    "10\t0.5\t0.5\tcafe\t1",
    "20\t0.5\t0.5\tbar\t2",  # out of order: nothing relies on the file being sorted
    "11\t0.6\t0.6\tcafe bar\t1",
    "21\tabc\t0.5\tbar\t2",  # line 5
    "12\t0.7\t0.7\tcafe",  # line 6: a short line has no t to window by
    "30\t0.1\t0.9\tcafe\t3",
    "2\t0.9\t0.9\tbar\t3",  # line 8: an O_init id with other values
]
EVENTS = [
    "op\tid\tx\ty\tkeywords\tk\tt",
    "insert\t200\t0.5\t0.5\tcafe\t2\t1",
    "delete\t200\t\t\t\t\t2",  # registered by the previous window, not processed yet
    "insert\t201\t0.5\t0.5\tcafe\t0\t1",  # line 4: k is 0
    "delete\t100\t\t\t\t\t3",  # live in the state since T0
    "delete\t999\t\t\t\t\t3",  # line 6: never registered
]


@pytest.fixture
def workload(tmp_path):
    warehouse = partitioned_warehouse(tmp_path / "wh", objects=O_INIT, subscriptions=LIVE)
    (tmp_path / "objects.tsv").write_text("\n".join(OBJECTS) + "\n")
    (tmp_path / "events.tsv").write_text("\n".join(EVENTS) + "\n")
    return warehouse, tmp_path / "objects.tsv", tmp_path / "events.tsv"


def quarantine(warehouse):
    rows = Lake.of(warehouse).read(tables.QUARANTINE).to_pylist()
    return {(r["target"], r["source"], r["line"]): r["reason"] for r in rows}


def landed(warehouse, name):
    rows = Lake.of(warehouse).read(name, columns=["id", "t", "source", "line"]).to_pylist()
    return sorted((r["t"], r["id"], r["source"], r["line"]) for r in rows if r["t"] > 0)


def test_each_call_lands_the_next_timestamps_and_quarantines_their_bad_rows(workload):
    warehouse, objects, events = workload
    first = publish_files(warehouse, objects=objects, events=events)
    assert (first.after, first.upto) == (0, 1)
    assert landed(warehouse, tables.OBJECTS) == [(1, 10, "objects.tsv", 2), (1, 11, "objects.tsv", 4)]
    assert landed(warehouse, tables.EVENTS) == [(1, 200, "events.tsv", 2)]
    assert quarantine(warehouse) == {
        ("objects", "objects.tsv", 6): "wrong column count: expected 5, got 4",
        ("subscription_events", "events.tsv", 4): "k is 0, it must be at least 1",
    }

    second = publish_files(warehouse, objects=objects, events=events)
    assert (second.after, second.upto) == (1, 2) and second.report.quarantined == 1  # line 6 is recorded once
    assert landed(warehouse, tables.EVENTS)[-1] == (2, 200, "events.tsv", 3)
    assert quarantine(warehouse)[("objects", "objects.tsv", 5)] == "x 'abc' is not a number"

    third = publish_files(warehouse, objects=objects, events=events, timestamps=5)
    assert (third.after, third.upto, third.report.first_t, third.report.last_t) == (2, 7, 3, 3)
    assert landed(warehouse, tables.EVENTS)[-1] == (3, 100, "events.tsv", 5)
    assert quarantine(warehouse)[("objects", "objects.tsv", 8)] == \
        "duplicate object id 2 (already ingested from o_init.tsv line 3)"
    assert quarantine(warehouse)[("subscription_events", "events.tsv", 6)] == \
        "delete of subscription 999, which is not live at t=3"

    # Nothing after t=3: the same files again land and record nothing.
    before = {n: Lake.of(warehouse).version(n) for n in (tables.OBJECTS, tables.EVENTS, tables.QUARANTINE)}
    last = publish_files(warehouse, objects=objects, events=events)
    assert (last.report.objects, last.report.events, last.report.quarantined) == (0, 0, 0)
    assert {n: Lake.of(warehouse).version(n) for n in before} == before


def test_a_file_with_no_usable_row_fails_after_quarantining_its_rows(workload, tmp_path):
    warehouse = workload[0]
    broken = tmp_path / "broken.tsv"
    broken.write_text("id\tx\ty\tkeywords\tt\n1\tabc\t0\tcafe\t1\n2\t0\t0\t\t1\n")
    with pytest.raises(AllRowsRejected, match="all 2 row"):
        publish_files(warehouse, objects=broken)
    assert quarantine(warehouse) == {("objects", "broken.tsv", 2): "x 'abc' is not a number",
                                     ("objects", "broken.tsv", 3): "keywords are empty"}


def test_dkm_publish_needs_no_spark_and_says_what_it_landed(workload, capsys):
    warehouse, objects, events = workload
    args = ["--objects", str(objects), "--events", str(events), "--warehouse", str(warehouse.root)]
    assert main(["publish", *args, "--timestamps", "2"]) == 0
    assert capsys.readouterr().out == ("published t=1..2: 3 objects, 2 subscription events (3 newly quarantined)\n")
    assert main(["publish", *args, "--bounds", "0,0,0.5,0.5"]) == 0  # t=3: (0.1, 0.9) is outside
    assert capsys.readouterr().out == "published t=3..3: 0 objects, 1 subscription events (3 newly quarantined)\n"
    assert main(["publish", *args, "--timestamps", "0"]) == 2
    assert capsys.readouterr().err == "dkm publish: error: --timestamps is 0: publish at least one timestamp\n"


def test_other_publishers_rows_do_not_move_the_window_and_after_overrides_it(workload, capsys):
    from dkmsks.client import Client

    warehouse, objects, events = workload
    client = Client(warehouse)
    client.subscribe(300, 0.5, 0.5, "cafe", 1)  # the next open timestamp, t=1
    client.subscribe(301, 0.5, 0.5, "cafe", 1, t=3)
    first = publish_files(warehouse, objects=objects, events=events)
    assert (first.after, first.upto, first.report.objects) == (0, 1, 2)  # t=1 of the files is not skipped

    # The files' t=2 rows landed by another publisher: replays, and --after moves on.
    client.publish([(20, 0.5, 0.5, "bar", 2)], [("delete", 200, None, None, None, None, 2)])
    args = ["--objects", str(objects), "--events", str(events), "--warehouse", str(warehouse.root)]
    assert main(["publish", *args]) == 0
    assert capsys.readouterr().out == ("nothing new at t=2..2: 2 rows were landed before by another publisher; "
                                       "give --after 2 to go on\n")
    assert main(["publish", *args, "--after", "2"]) == 0
    assert capsys.readouterr().out.startswith("published t=3..3: 1 objects, 1 subscription events")
