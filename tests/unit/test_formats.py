"""Reader validation and writer round trips (numpy readers of dkmsks.io.formats)."""

from __future__ import annotations

import gzip
import json
import re

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
from dkmsks.core.model import KnnResult, Objects, Op, Vocabulary
from dkmsks.io.formats import (
    DECIMAL_PATTERN,
    EVENT_COLUMNS,
    NON_FINITE_PATTERN,
    OBJECT_COLUMNS,
    WGS84,
    Bounds,
    bounds_option,
    read_events,
    read_objects,
    validate_events,
    validate_objects,
)
from dkmsks.io.raw_rows import TimeWindow, file_rows
from dkmsks.io.rejections import AllRowsRejected, InputError
from dkmsks.io.writers import read_results, write_events, write_objects, write_results

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("bounds", "ids"), [
    (None, [1, 2, 8, 29, 3, 4]),  # longitude -200 and EPSG:3857 metres are finite: good by default
    (WGS84, [1, 2, 3, 4]),
])
def test_every_bad_object_row_is_rejected_with_its_reason_and_good_rows_survive(tmp_path, bounds, ids):
    load = read_objects(write_objects_file(tmp_path), Vocabulary(), bounds=bounds)
    expected = expected_object_rejections(wgs84=bounds is not None)
    got = {r.line: r.reason for r in load.rejections}
    assert sorted(got) == sorted(expected)
    for line, reason in expected.items():
        assert reason in got[line], (line, got[line])
    assert load.objects.ids.tolist() == ids  # the first occurrence of id 2 is kept; stream order
    assert load.objects.t.tolist() == sorted(load.objects.t.tolist())
    assert load.lines.tolist() == {6: [2, 3, 33, 34, 35, 36], 4: [2, 3, 35, 36]}[len(ids)]


@pytest.mark.parametrize("wgs84", [False, True])
def test_every_bad_event_row_is_rejected_and_replay_order_is_deletions_first(tmp_path, wgs84):
    load = read_events(write_events_file(tmp_path), Vocabulary(), bounds=WGS84 if wgs84 else None)
    outcomes = expected_event_outcomes(wgs84)
    got = {r.line: r.reason for r in load.rejections}
    assert sorted(got) == sorted(line for line, reason in outcomes.items() if reason)
    for line, reason in outcomes.items():
        if reason:
            assert reason in got[line], (line, got[line])
    ev = load.events
    # Accepted rows in replay order: t ascending, deletions before insertions within t.
    projected = [] if wgs84 else [(1, "INSERT", 112), (1, "INSERT", 119)]
    assert list(zip(ev.t.tolist(), [Op(o).name for o in ev.op], ev.ids.tolist(), strict=True)) == [
        (0, "INSERT", 100), (0, "INSERT", 101), *projected, (2, "DELETE", 100), (2, "INSERT", 100),
        (3, "DELETE", 100), (5, "INSERT", 110),
    ]


def test_projected_coordinates_validate_in_memory_and_wgs84_bounds_refuse_them():
    # EPSG:3857 metres of a few real places (Chicago, New York, Denver), as a publisher holds them.
    rows = [
        (2, ["1", "-9757148.6", "5138517.3", "cafe", "0"], "1\t-9757148.6\t5138517.3\tcafe\t0"),
        (3, ["2", "-8238310.2", "4970071.6", "bar cafe", "1"], "2\t-8238310.2\t4970071.6\tbar cafe\t1"),
        (4, ["3", "-11685820.0", "4828990.0", "", "1"], "3\t-11685820.0\t4828990.0\t\t1"),
    ]
    load = validate_objects(rows, Vocabulary(), source="batch-7")
    assert load.objects.ids.tolist() == [1, 2] and load.lines.tolist() == [2, 3]
    assert load.objects.x.tolist() == [-9757148.6, -8238310.2]
    assert [(r.source, r.line, r.reason) for r in load.rejections] == [("batch-7", 4, "keywords are empty")]

    refused = validate_objects(rows, Vocabulary(), source="batch-7", bounds=WGS84)
    assert len(refused.objects) == 0
    assert [r.reason for r in refused.rejections] == [
        "x '-9757148.6' is outside the --bounds range [-180.0, 180.0]",
        "x '-8238310.2' is outside the --bounds range [-180.0, 180.0]",
        "x '-11685820.0' is outside the --bounds range [-180.0, 180.0]",
    ]
    events = validate_events(
        [(2, ["insert", "7", "-9757148.6", "5138517.3", "cafe", "3", "0"], ""),
         (3, ["delete", "7", "", "", "", "", "1"], "")], Vocabulary(), source="batch-7")
    assert events.events.ids.tolist() == [7, 7] and events.lines.tolist() == [2, 3] and events.rejections == []


def test_a_file_whose_every_row_is_rejected_is_an_error_naming_the_commonest_reasons(tmp_path):
    path = tmp_path / "metres.tsv"
    path.write_text("id\tx\ty\tkeywords\tt\n"
                    "1\t-9757148.6\t5138517.3\tcafe\t0\n"
                    "2\t-8238310.2\t4970071.6\tbar\t0\n"
                    "3\t-100\t40\tCafe\t0\n"
                    "4\t-11685820.0\t4828990.0\tbar\t0\n")
    with pytest.raises(AllRowsRejected) as caught:
        read_objects(path, Vocabulary(), bounds=WGS84)
    assert str(caught.value) == (
        f"{path}: all 4 row(s) were rejected, nothing was loaded; commonest reasons: "
        "3 like line 2: x '-9757148.6' is outside the --bounds range [-180.0, 180.0]; "
        "1 like line 4: keyword 'Cafe' is not normalised (lower-case [a-z0-9] words joined by '_')")
    assert isinstance(caught.value, InputError)
    assert len(read_objects(path, Vocabulary()).objects) == 3  # no bounds: only 'Cafe' is refused


@pytest.mark.parametrize(("spelling", "verdict", "pattern"), [
    ("1e5", "ok", "decimal"), ("1.", "ok", "decimal"), (".5", "ok", "decimal"), ("-.5E+3", "ok", "decimal"),
    ("+7", "ok", "decimal"), (" 1.5 ", "ok", "decimal"), ("007", "ok", "decimal"),
    ("1e999", "not finite", "decimal"),  # a decimal that overflows
    ("inf", "not finite", "non-finite"), ("-Infinity", "not finite", "non-finite"), ("NaN", "not finite", "non-finite"),
    ("+nan", "not finite", "non-finite"),
    ("infinit", "not a number", None), ("1_0", "not a number", None), ("0x1p3", "not a number", None),
    ("1.5d", "not a number", None), ("\t1.5", "not a number", None), ("1.5\x0c", "not a number", None),
    ("\u0661\u0662", "not a number", None), ("", "not a number", None), (".", "not a number", None),
    ("e5", "not a number", None), ("1e", "not a number", None), ("--1", "not a number", None),
    ("1 5", "not a number", None), ("\u0131nf", "not a number", None), ("nan(1)", "not a number", None),
])
def test_the_coordinate_rule_is_the_shared_pattern_whatever_parsers_accept(spelling, verdict, pattern):
    """The numpy reader's fast path (float() on plain ASCII) gives the verdict written here, and
    the patterns the Spark reader applies classify the spelling as written here."""
    load = validate_objects([(2, ["1", spelling, "0", "cafe", "0"], "")], Vocabulary(), source="s")
    reason = load.rejections[0].reason if load.rejections else ""
    got = "ok" if len(load.objects) else "not finite" if "is not finite" in reason else "not a number"
    assert reason in ("", f"x '{spelling}' is not finite: coordinates must be finite numbers",
                      f"x '{spelling}' is not a number")
    value = spelling.strip(" ")
    matched = ("decimal" if DECIMAL_PATTERN.fullmatch(value) else
               "non-finite" if NON_FINITE_PATTERN.fullmatch(value) else None)
    assert (got, matched) == (verdict, pattern)


@pytest.mark.parametrize(("text", "expected"), [
    ("wgs84", WGS84), (" WGS84 ", WGS84), ("0,0,1e6,2e6", Bounds(0.0, 0.0, 1e6, 2e6)),
    ("-20037508.34,-20037508.34,20037508.34,20037508.34", Bounds(-20037508.34, -20037508.34, 20037508.34, 20037508.34)),
    ("", None), ("none", None),
])
def test_bounds_option_spellings(text, expected):
    assert bounds_option(text) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("utm", "neither 'wgs84' nor four numbers xmin,ymin,xmax,ymax"),
    ("0,0,1", "neither 'wgs84' nor four numbers"),
    ("0,0,1_0,1", "neither 'wgs84' nor four numbers"),
    ("0,0,inf,1", "neither 'wgs84' nor four numbers"),
    ("0,0,1e999,1", "bounds must be finite numbers"),
    ("10,0,5,1", "are empty: give xmin <= xmax and ymin <= ymax"),
])
def test_bad_bounds_are_refused_with_a_fix_it_message(text, message):
    import argparse

    with pytest.raises(argparse.ArgumentTypeError, match=message):
        bounds_option(text)


def test_non_utf8_line_is_rejected_not_fatal(tmp_path):
    path = tmp_path / "objects.tsv"
    path.write_bytes(
        b"id\tx\ty\tkeywords\tt\n1\t1.0\t2.0\tcafe\t0\n2\t1.0\t2.0\tcaf\xe9\t0\n3\t1.5\t2.5\tbar\t0\n"
    )
    load = read_objects(path, Vocabulary())
    assert load.objects.ids.tolist() == [1, 3]
    assert [(r.line, r.reason) for r in load.rejections] == [(3, "line is not valid UTF-8 text")]


def test_empty_lines_carry_no_row_but_lines_of_separators_are_quarantined(tmp_path):
    path = tmp_path / "objects.tsv"
    path.write_bytes(b"id\tx\ty\tkeywords\tt\r\n1\t1.0\t2.0\tcafe\t0\r\n\r\n\t\t\t\t\r\n\n \t \n2\t1\t2\tbar\t0\n\n")
    load = read_objects(path, Vocabulary())
    assert load.objects.ids.tolist() == [1, 2]
    assert [(r.line, r.reason) for r in load.rejections] == [
        (4, "the line holds only separators or spaces, no values"),
        (6, "the line holds only separators or spaces, no values"),
    ]


@pytest.mark.parametrize("reader", [read_objects, read_events])
def test_an_id_beyond_int64_is_quarantined_not_a_crash(tmp_path, reader):
    path = tmp_path / "rows.tsv"
    if reader is read_objects:
        path.write_text("id\tx\ty\tkeywords\tt\n99999999999999999999\t1\t2\tcafe\t0\n"
                        "-9223372036854775808\t1\t2\tcafe\t0\n")
    else:
        path.write_text("op\tid\tx\ty\tkeywords\tk\tt\ninsert\t99999999999999999999\t1\t2\tcafe\t1\t0\n"
                        "insert\t-9223372036854775808\t1\t2\tcafe\t1\t0\n")
    load = reader(path, Vocabulary())
    assert [(r.line, r.reason) for r in load.rejections] == [
        (2, "id '99999999999999999999' is outside the int64 range")]
    accepted = load.objects if reader is read_objects else load.events
    assert accepted.ids.tolist() == [-(2**63)]


def test_missing_columns_and_missing_file_are_input_errors(tmp_path):
    path = tmp_path / "objects.tsv"
    path.write_text("id\tx\tkeywords\tt\n1\t2\tcafe\t0\n")
    with pytest.raises(InputError, match=r"lacks column\(s\) \['y'\]"):
        read_objects(path, Vocabulary())
    with pytest.raises(InputError, match="no such file"):
        read_objects(tmp_path / "absent.tsv", Vocabulary())


def test_empty_file_with_header_gives_no_rows(tmp_path):
    """A header without rows is an empty batch, not a file whose every row was rejected."""
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


@pytest.mark.parametrize(("damage", "message"), [
    ("truncate", "the gzip data ends early, the file is truncated (an interrupted copy or download?); "
                 "nothing was loaded: copy or compress the file again"),
    ("checksum", "the gzip data is corrupt (a block or checksum does not decode); nothing was loaded: "
                 "copy or compress the file again"),
    ("not gzip", "the name ends in .gz but the file is not gzip data; nothing was loaded: compress it with "
                 "gzip or drop .gz from its name"),
])
@pytest.mark.parametrize("reader", [read_objects, read_events])
def test_broken_gzip_is_one_clear_input_error(tmp_path, damage, message, reader):
    header = "id\tx\ty\tkeywords\tt" if reader is read_objects else "op\tid\tx\ty\tkeywords\tk\tt"
    row = "{i}\t1.5\t2.5\tcafe\t0" if reader is read_objects else "insert\t{i}\t1.5\t2.5\tcafe\t1\t0"
    text = ("\n".join([header, *(row.format(i=i) for i in range(3000))]) + "\n").encode()
    data = gzip.compress(text)
    path = tmp_path / "rows.tsv.gz"
    path.write_bytes({"truncate": data[: len(data) // 2],
                      "checksum": data[:-8] + bytes(b ^ 0xFF for b in data[-8:-4]) + data[-4:],
                      "not gzip": text}[damage])
    with pytest.raises(InputError) as caught:
        reader(path, Vocabulary())
    assert str(caught.value) == f"{path}: {message}"


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
    for part in ("ptr", "ids"):
        assert np.array_equal(getattr(again.events.keywords, part), getattr(load.events.keywords, part))

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



def test_results_export_lines_are_exact_across_sliced_batches(tmp_path, monkeypatch):
    """Several Arrow batches (each a slice of one table, with offsets not starting at 0) give
    the lines ``json.dumps`` gives, every distance reading back as ``np.sqrt(d2)``."""
    import dkmsks.io.writers as writers

    monkeypatch.setattr(writers, "_EXPORT_BATCH_ROWS", 3)
    rng = np.random.default_rng(5)
    results = {}
    for s in range(11):
        n = int(rng.integers(0, 5))
        d2 = np.sort(rng.random(n) * 10.0 ** rng.integers(-8, 30))
        d2[: n // 2] = np.floor(d2[: n // 2])  # whole distances too (printed with ".0")
        results[100 - s] = KnnResult(rng.integers(0, 2**62, n, dtype=np.int64), np.sort(d2))
    # exact squares: whole distances small and large (1e20 prints with an exponent)
    squares = np.array([0.0, 4.0, 2.25, 1e16, 1e40])
    results[50] = KnnResult(np.arange(5, dtype=np.int64), squares)
    assert write_results(tmp_path / "r.jsonl", results, 9) == 12
    lines = (tmp_path / "r.jsonl").read_text().splitlines()
    expected = [json.dumps({"sub_id": s, "t": 9, "object_ids": results[s].object_ids.tolist(),
                            "distances": np.sqrt(results[s].d2).tolist()}) for s in sorted(results)]
    assert [json.loads(x) for x in lines] == [json.loads(x) for x in expected]
    # every distance is a JSON float ("2.0", not "2"), as json.dumps writes it
    parsed = [json.loads(x)["distances"] for x in lines]
    assert all(type(d) is float for row in parsed for d in row)
    assert [row["distances"] for row in map(json.loads, lines) if row["sub_id"] == 50] == [[0.0, 2.0, 1.5, 1e8, 1e20]]


# --------------------------------------------------------------------------- windowed reads

_EXTRA_OBJECTS = ["30\t1\t2\tcafe\t+3", "31\t1\t2\tcafe\t 3", "32\t1\t2\tcafe\t03", "33\t1\t2\tcafe\t2\r",
                  "34\t1\t2\tcafe\t99999999999999999999", "35\t1\t2\tcafe\t4", "36\t1\t2\tcafe\t1",
                  "37\t1\t2\tcaf\xe9\t9", "38\t1\t2\tcafe\t", "39\t1\t2\tcafe\t2"]


def _plain_t_outside(raw: bytes, width: int, t_pos: int, after, upto) -> bool:
    """The window rule restated on raw bytes: the header's field count and a t of 1 to 18
    ASCII digits outside (after, upto]."""
    fields = raw.split(b"\t")
    if len(fields) != width:
        return False
    t = fields[t_pos].rstrip(b"\r") if t_pos == width - 1 else fields[t_pos]
    if not re.fullmatch(rb"[0-9]{1,18}", t):
        return False
    return not ((after is None or int(t) > after) and (upto is None or int(t) <= upto))


@pytest.mark.parametrize("window", [(None, 0), (0, 1), (1, 5), (2, None), (3, 3)])
@pytest.mark.parametrize("columns", [OBJECT_COLUMNS, EVENT_COLUMNS])
def test_a_windowed_read_skips_exactly_the_rows_whose_plain_t_is_outside(tmp_path, window, columns):
    if columns == OBJECT_COLUMNS:
        path = write_objects_file(tmp_path)
        extra = _EXTRA_OBJECTS
    else:
        path = write_events_file(tmp_path)
        extra = ["\t".join(["insert", *f[:4], "3", f[4]]) for f in (r.split("\t") for r in _EXTRA_OBJECTS)]
    data = path.read_bytes() + "\n".join(extra).encode("latin-1")  # the last line has no newline
    path.write_bytes(data)
    full_rejected, windowed_rejected = [], []
    full = list(file_rows(path, columns, full_rejected))
    scope = TimeWindow(*window)
    windowed = list(file_rows(path, columns, windowed_rejected, window=scope))

    lines = data.split(b"\n")[1:]
    skipped = {n for n, raw in enumerate(lines, start=2)
               if _plain_t_outside(raw, len(columns), len(columns) - 1, *window)}
    assert skipped and scope.skipped == len(skipped)
    assert windowed == [row for row in full if row[0] not in skipped]
    assert windowed_rejected == [r for r in full_rejected if r.line not in skipped]


def test_a_windowed_read_of_parquet_tests_integer_timestamps_as_stored(tmp_path):
    path = tmp_path / "objects.parquet"
    pd.DataFrame({"id": [1, 2, 3], "x": [0.5] * 3, "y": [0.5] * 3, "keywords": ["a"] * 3,
                  "t": [1, 2, 3]}).to_parquet(path)
    scope = TimeWindow(1, 2)
    rows = list(file_rows(path, OBJECT_COLUMNS, [], window=scope))
    assert [(line, fields[0]) for line, fields, _ in rows] == [(3, "2")] and scope.skipped == 2


@pytest.mark.parametrize("name", ["r.jsonl", "r.jsonl.gz"])
def test_the_columnar_export_reads_back_as_json_dumps_of_every_float(tmp_path, monkeypatch, name):
    """Distances that print differently in Arrow and in Python (whole numbers, 1e-05, huge,
    tiny), empty results, and more rows than one formatting batch: every line parses to what
    ``json.dumps`` of the same result gives."""
    import dkmsks.io.writers as writers

    monkeypatch.setattr(writers, "_EXPORT_BATCH_ROWS", 3)
    d2s = [[0.0, 1.0, 4.0], [1e-10, 2.0], [], [1e300, 1e-300 ** 2 + 5e-324], [0.1, 0.2 + 0.1], [9.0], [1 / 3], [2.5e-7]]
    results = {10 * i + 1: KnnResult(np.arange(len(d), dtype=np.int64) * (2**61 + 7 * i), np.array(d, dtype=np.float64))
               for i, d in enumerate(d2s)}
    path = tmp_path / name
    assert write_results(path, results, 9) == len(d2s)
    opener = gzip.open if name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    expected = [json.dumps({"sub_id": s, "t": 9, "object_ids": results[s].object_ids.tolist(),
                            "distances": results[s].distances.tolist()}) for s in sorted(results)]
    assert [json.loads(x) for x in lines] == [json.loads(x) for x in expected]
    for line in lines:  # floats stay floats, ints stay ints
        row = json.loads(line)
        assert all(type(v) is float for v in row["distances"]) and all(type(v) is int for v in row["object_ids"])
