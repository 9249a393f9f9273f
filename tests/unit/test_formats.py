"""Reader validation and writer round trips (numpy readers of dkmsks.io.formats)."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pandas as pd
import pytest

from bad_inputs import (
    GOOD_OBJECTS,
    expected_event_outcomes,
    expected_object_rejections,
    write_events_file,
    write_objects_file,
)
from dkmsks.core.model import Objects, Op, Vocabulary
from dkmsks.io.formats import (
    InputError,
    read_events,
    read_objects,
    read_results,
    write_events,
    write_objects,
    write_results,
)
from dkmsks.core.model import KnnResult

pytestmark = pytest.mark.unit


def test_every_bad_object_row_is_rejected_with_its_reason_and_good_rows_survive(tmp_path):
    load = read_objects(write_objects_file(tmp_path), Vocabulary())
    expected = expected_object_rejections()
    got = {r.line: r.reason for r in load.rejections}
    assert sorted(got) == sorted(expected)
    for line, reason in expected.items():
        assert reason in got[line], (line, got[line])
    assert load.objects.ids.tolist() == [1, 2, 3, 4]  # the first occurrence of id 2 is kept
    assert load.objects.t.tolist() == [0, 0, 1, 2]


def test_every_bad_event_row_is_rejected_and_replay_order_is_deletions_first(tmp_path):
    load = read_events(write_events_file(tmp_path), Vocabulary())
    outcomes = expected_event_outcomes()
    got = {r.line: r.reason for r in load.rejections}
    assert sorted(got) == sorted(line for line, reason in outcomes.items() if reason)
    for line, reason in outcomes.items():
        if reason:
            assert reason in got[line], (line, got[line])
    ev = load.events
    # Accepted rows in replay order: t ascending, deletions before insertions within t.
    assert list(zip(ev.t.tolist(), [Op(o).name for o in ev.op], ev.ids.tolist(), strict=True)) == [
        (0, "INSERT", 100), (0, "INSERT", 101), (2, "DELETE", 100), (2, "INSERT", 100),
        (3, "DELETE", 100), (5, "INSERT", 110),
    ]


def test_non_utf8_line_is_rejected_not_fatal(tmp_path):
    path = tmp_path / "objects.tsv"
    path.write_bytes(
        b"id\tx\ty\tkeywords\tt\n1\t1.0\t2.0\tcafe\t0\n2\t1.0\t2.0\tcaf\xe9\t0\n3\t1.5\t2.5\tbar\t0\n"
    )
    load = read_objects(path, Vocabulary())
    assert load.objects.ids.tolist() == [1, 3]
    assert [(r.line, r.reason) for r in load.rejections] == [(3, "line is not valid UTF-8 text")]


def test_missing_columns_and_missing_file_are_input_errors(tmp_path):
    path = tmp_path / "objects.tsv"
    path.write_text("id\tx\tkeywords\tt\n1\t2\tcafe\t0\n")
    with pytest.raises(InputError, match=r"lacks column\(s\) \['y'\]"):
        read_objects(path, Vocabulary())
    with pytest.raises(InputError, match="no such file"):
        read_objects(tmp_path / "absent.tsv", Vocabulary())


def test_empty_file_with_header_gives_no_rows(tmp_path):
    path = tmp_path / "objects.tsv"
    path.write_text("id\tx\ty\tkeywords\tt\n")
    load = read_objects(path, Vocabulary())
    assert len(load.objects) == 0 and load.rejections == []


@pytest.mark.parametrize("name", ["objects.tsv.gz", "objects.csv", "objects.csv.gz", "objects.parquet"])
def test_every_format_reads_the_same_rows(tmp_path, name):
    rows = [r.split("\t") for r in GOOD_OBJECTS]
    df = pd.DataFrame(rows, columns=["id", "x", "y", "keywords", "t"])
    path = tmp_path / name
    if name.endswith(".parquet"):
        df.astype({"id": "int64", "x": "float64", "y": "float64", "t": "int64"}).to_parquet(path)
    else:
        sep = "," if ".csv" in name else "\t"
        text = df.to_csv(sep=sep, index=False)
        path.write_bytes(gzip.compress(text.encode()) if name.endswith(".gz") else text.encode())
    load = read_objects(path, Vocabulary())
    assert load.rejections == []
    assert load.objects.ids.tolist() == [1, 2, 3, 4]
    assert load.objects.x.tolist() == [-100.5, -100.0, -99.5, -98.0]


def test_out_of_order_rows_are_sorted_stably_by_t(tmp_path):
    path = tmp_path / "o.tsv"
    path.write_text("id\tx\ty\tkeywords\tt\n1\t0\t0\ta\t3\n2\t0\t0\ta\t1\n3\t0\t0\ta\t3\n4\t0\t0\ta\t1\n")
    load = read_objects(path, Vocabulary())
    assert load.objects.ids.tolist() == [2, 4, 1, 3]


def test_objects_and_events_round_trip_through_the_writers(tmp_path):
    vocab = Vocabulary()
    load = read_events(write_events_file(tmp_path), vocab)
    write_events(tmp_path / "again.tsv.gz", load.events, vocab)
    again = read_events(tmp_path / "again.tsv.gz", vocab)
    assert again.rejections == []
    for col in ("op", "ids", "k", "t"):
        assert np.array_equal(getattr(again.events, col), getattr(load.events, col))
    assert again.events.keywords.to_lists() == load.events.keywords.to_lists()

    objects = Objects.build([5, 6], [0.1, 1 / 3], [2.0, -7.25], [[vocab.id_of("cafe")], [0, 1]], [0, 4])
    write_objects(tmp_path / "o.tsv", objects, vocab)
    back = read_objects(tmp_path / "o.tsv", vocab).objects
    assert back.x.tolist() == [0.1, 1 / 3]  # repr() round-trips float64 exactly


def test_results_export_is_ordered_json_lines(tmp_path):
    results = {
        7: KnnResult(np.array([3, 1], dtype=np.int64), np.array([1.0, 4.0])),
        2: KnnResult(np.zeros(0, dtype=np.int64), np.zeros(0)),
    }
    assert write_results(tmp_path / "r.jsonl", results, 42) == 2
    lines = (tmp_path / "r.jsonl").read_text().splitlines()
    assert [json.loads(x)["sub_id"] for x in lines] == [2, 7]
    assert read_results(tmp_path / "r.jsonl")[7] == {
        "sub_id": 7, "t": 42, "object_ids": [3, 1], "distances": [1.0, 2.0]
    }
