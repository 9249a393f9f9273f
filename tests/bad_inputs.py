"""Hand-written input files with one kind of bad row each, shared by the numpy and Spark
reader tests and the end-to-end reliability tests. Each bad row names (by a substring) the
reason it must be rejected with. A row is text, or bytes when its point is not being UTF-8.

Coordinates are any finite numbers by default (docs/design.md §1): the rows of
:data:`OUTSIDE_WGS84_OBJECTS` and :data:`OUTSIDE_WGS84_EVENTS` (longitude -200, latitude 95,
EPSG:3857 metres) are good unless the reader is given ``bounds = wgs84`` (``--bounds wgs84``).

:data:`KINDS` lists every kind of bad input the project handles and where it is exercised;
the whole-file cases (wrong encoding, schema change, empty input, broken gzip, every row
rejected) have writers below."""

from __future__ import annotations

import gzip
from pathlib import Path

OBJECTS_HEADER = "id\tx\ty\tkeywords\tt"
GOOD_OBJECTS = [
    "1\t-100.5\t40.25\tcafe coffee\t0",
    "2\t-100.0\t40.0\tcafe\t0",
    "3\t-99.5\t41.0\tbar\t1",
    "4\t-98.0\t39.0\tcoffee bar cafe\t2",
]
# (line text, expected reason substring)
BAD_OBJECTS = [
    ("5\tabc\t40\tcafe\t1", "x 'abc' is not a number"),
    ("6\tnan\t40\tcafe\t1", "x 'nan' is not finite: coordinates must be finite numbers"),
    ("7\t-100\tinf\tcafe\t1", "y 'inf' is not finite: coordinates must be finite numbers"),
    ("9\t-100\t40\t\t1", "keywords are empty"),
    ("10\t-100\t40\tCafe\t1", "not normalised"),
    ("11\t-100\t40\tcafe  bar\t1", "empty token"),
    ("12.5\t-100\t40\tcafe\t1", "id '12.5' is not an integer"),
    ("13\t-100\t40\tcafe\tnoon", "t 'noon' is not an integer"),
    ("14\t-100\t40\tcafe", "wrong column count"),
    ("15\t-100\t40\tcafe\t1\textra", "wrong column count"),
    ("2\t-101\t41\tbar\t3", "duplicate object id 2"),  # across timestamps (2 is at t=0)
    ("1\t-100.2\t40.1\tbar\t0", "duplicate object id 1"),  # within one timestamp
    ("16\t1e999\t40\tcafe\t1", "x '1e999' is not finite: coordinates must be finite numbers"),  # overflows
    (b"17\t-100\t40\tcaf\xe9\t1", "line is not valid UTF-8 text"),  # a Latin-1 row
    # Issue 15: rows that once crashed a reader, vanished, or passed.
    ("99999999999999999999\t-100\t40\tcafe\t1", "id '99999999999999999999' is outside the int64 range"),
    ("18\t-100\t40\tcafe\t9223372036854775808", "t '9223372036854775808' is outside the int64 range"),
    ("\t\t\t\t", "the line holds only separators or spaces, no values"),
    ("   ", "the line holds only separators or spaces, no values"),
    ("19\t-100\t40\t" + "a" * 100_000 + "\t1",
     "keyword '" + "a" * 60 + "...' has 100000 characters, more than the limit of 256"),
    ("20\t-100\t40\t" + "b" * 257 + "\t1", "' has 257 characters, more than the limit of 256"),
    # Spellings one reader's parser took and the other's did not: the rules decide, not a parser.
    ("1_000\t-100\t40\tcafe\t1", "id '1_000' is not an integer"),  # Python's int() takes it
    ("21\t1_0.5\t40\tcafe\t1", "x '1_0.5' is not a number"),  # Python's float() takes it
    ("22\t\u0661\u0662\t40\tcafe\t1", "x '\u0661\u0662' is not a number"),  # Arabic-Indic digits: float() too
    ("23\t0x1p3\t40\tcafe\t1", "x '0x1p3' is not a number"),  # Java's parseDouble takes it
    ("24\t1.5d\t40\tcafe\t1", "x '1.5d' is not a number"),  # Java's parseDouble takes it
    ("25\t-100\t40\tcafe\u2028\t1", "keyword 'cafe\u2028' is not normalised"),  # Java's $ matches before U+2028
    ("26\t-100\t40\tca\rfe\t1", "keyword 'ca\rfe' is not normalised"),  # a lone CR ends no line
    ("27\t-100\t40\tCafe  bar\t1", "keywords 'Cafe  bar' contain an empty token (use single spaces)"),  # rule order
    ("28\t-100\t40\tcaf\ufffd\t1", "line is not valid UTF-8 text"),  # U+FFFD marks a failed decoding
]
#: Good by default (any finite coordinates); refused with their reason under ``bounds = wgs84``.
OUTSIDE_WGS84_OBJECTS = [
    ("8\t-200\t40\tcafe\t1", "x '-200' is outside the --bounds range [-180.0, 180.0]"),
    ("29\t10687020.661\t4865942.28\tcafe\t1", "x '10687020.661' is outside the --bounds range [-180.0, 180.0]"),
]

EVENTS_HEADER = "op\tid\tx\ty\tkeywords\tk\tt"
# Every row of the events file in file order, with the reason it must be rejected with (a
# substring) or None when it is good. Worked out by hand from docs/design.md §1: within a timestamp
# deletions apply before insertions, whatever the file order.
EVENT_ROWS: list[tuple[str | bytes, str | None]] = [
    ("insert\t100\t-100\t40\tcafe\t3\t0", None),
    ("insert\t101\t-99\t41\tbar coffee\t1\t0", None),
    ("upsert\t102\t-100\t40\tcafe\t3\t1", "unknown op"),
    ("insert\t103\t-100\t40\tcafe\t0\t1", "k is 0"),
    ("insert\t104\t-100\t40\tcafe\t-2\t1", "k is -2"),
    ("insert\t105\t-100\t40\tcafe\t5000\t1", "more than the limit"),
    ("insert\t106\t-100\t40\tcafe\tten\t1", "k 'ten' is not an integer"),
    ("insert\t107\tnan\t40\tcafe\t3\t1", "must be finite"),
    ("insert\t108\t-100\t40\t\t3\t1", "keywords are empty"),
    ("delete\t999\t\t\t\t\t1", "delete of subscription 999"),
    ("insert\t101\t-100\t40\tcafe\t3\t1", "insert of subscription 101, which is already live"),
    ("delete\t100\t\t\t\t\t2", None),
    ("INSERT\t100\t-98\t40\tcafe\t2\t2", None),  # a deleted id registered again
    ("insert\t109\t-100\t40\tcafe\t3", "wrong column count"),
    ("delete\t100\t\t\t\t\t3", None),
    ("delete\t100\t\t\t\t\t3", "delete of subscription 100"),
    ("insert\t110\t-97\t39\tbar\t4\t5", None),
    ("delete\t110\t\t\t\t\t5", "delete of subscription 110"),  # deletions come first at t=5
    ("insert\t111\t-100\t40\tCafe\t3\t1", "not normalised"),
    ("insert\t113\t-100\t40\tcafe\t2.5\t1", "k '2.5' is not an integer"),
    (b"insert\t114\t-100\t40\tcaf\xe9\t3\t1", "line is not valid UTF-8 text"),
    ("insert\t115\t-100\t40\tcafe\t99999999999\t1", "k is 99999999999, more than the limit of 1000"),
    ("insert\t116\t-100\t40\tcafe\t99999999999999999999\t1", "k '99999999999999999999' is outside the int64 range"),
    ("delete\t99999999999999999999\t\t\t\t\t1", "id '99999999999999999999' is outside the int64 range"),
    # upper() gives INSERT:
    ("\u0131nsert\t117\t-100\t40\tcafe\t3\t1", "unknown op '\u0131nsert'; valid ops: insert, delete"),
    ("\t\t\t\t\t\t", "the line holds only separators or spaces, no values"),
    ("insert\t118\t-100\t40\t" + "c" * 100_000 + "\t3\t1", "' has 100000 characters, more than the limit of 256"),
]
#: Good by default; refused with their reason under ``bounds = wgs84``. After EVENT_ROWS in the file.
OUTSIDE_WGS84_EVENTS = [
    ("insert\t112\t-100\t95\tcafe\t3\t1", "y '95' is outside the --bounds range [-90.0, 90.0]"),
    ("insert\t119\t10687020.661\t4865942.28\tcafe\t2\t1",
     "x '10687020.661' is outside the --bounds range [-180.0, 180.0]"),
]


def _write_rows(path: Path, rows: list[str | bytes]) -> Path:
    path.write_bytes(b"".join((r if isinstance(r, bytes) else r.encode("utf-8")) + b"\n" for r in rows))
    return path


def write_objects_file(folder: Path, name: str = "objects.tsv") -> Path:
    rows = [OBJECTS_HEADER, *GOOD_OBJECTS[:2], *[r for r, _ in BAD_OBJECTS], *[r for r, _ in OUTSIDE_WGS84_OBJECTS],
            *GOOD_OBJECTS[2:]]
    return _write_rows(folder / name, rows)


def write_events_file(folder: Path, name: str = "events.tsv") -> Path:
    return _write_rows(folder / name,
                       [EVENTS_HEADER, *[r for r, _ in EVENT_ROWS], *[r for r, _ in OUTSIDE_WGS84_EVENTS]])


# --------------------------------------------------------------------------- whole inputs

_MANY_OBJECTS = ("\n".join([OBJECTS_HEADER, *(f"{i}\t-100.{i}\t40.{i}\tcafe bar\t0" for i in range(1, 2001))])
                 + "\n").encode()
_GZIPPED = gzip.compress(_MANY_OBJECTS)

#: (file name, bytes, what must happen) for inputs that are unusable or empty as a whole.
#: "error: <substring>" means the load stops with an error naming the problem; "rows: N" means
#: the load succeeds with N accepted rows and nothing quarantined.
WHOLE_OBJECT_FILES: list[tuple[str, bytes, str]] = [
    ("utf16.tsv", ("\n".join([OBJECTS_HEADER, *GOOD_OBJECTS]) + "\n").encode("utf-16"),
     "error: not UTF-8 text"),
    ("empty.tsv", b"", "error: empty"),
    ("header-only.tsv", (OBJECTS_HEADER + "\n").encode(), "rows: 0"),  # an empty batch
    ("renamed-columns.tsv", ("id\tlon\tlat\tkeywords\tt\n" + GOOD_OBJECTS[0] + "\n").encode(),
     "error: lacks column(s) ['x', 'y']"),  # a schema change
    ("extra-column.tsv", ("id\tx\ty\tkeywords\tt\tnote\n"
                          + "".join(r + "\tfrom a newer producer\n" for r in GOOD_OBJECTS)).encode(),
     "rows: 4"),  # an added column is ignored
    ("bom.tsv", ("\ufeff" + "\n".join([OBJECTS_HEADER, *GOOD_OBJECTS]) + "\n").encode("utf-8"), "rows: 4"),
    ("truncated.tsv.gz", _GZIPPED[: len(_GZIPPED) // 2],  # an interrupted copy
     "error: the gzip data ends early, the file is truncated"),
    ("crc.tsv.gz", _GZIPPED[:-8] + bytes(b ^ 0xFF for b in _GZIPPED[-8:-4]) + _GZIPPED[-4:],
     "error: the gzip data is corrupt"),
    ("plain.tsv.gz", _MANY_OBJECTS, "error: the name ends in .gz but the file is not gzip data"),
    ("all-rejected.tsv", "\n".join([OBJECTS_HEADER, "1\tabc\t40\tcafe\t0", "2\tdef\t40\tcafe\t0",
                                    "3\t-100\t40\t\t0"]).encode() + b"\n",
     "error: all 3 row(s) were rejected, nothing was loaded; commonest reasons: 2 like line 2: x 'abc' is not "
     "a number; 1 like line 4: keywords are empty"),
]
#: The quarantine rows the Spark ingestion still writes for "all-rejected.tsv": line -> reason.
ALL_REJECTED_LINES = {2: "x 'abc' is not a number", 3: "x 'def' is not a number", 4: "keywords are empty"}


def write_whole_object_files(folder: Path) -> dict[str, tuple[Path, str]]:
    out = {}
    for name, data, outcome in WHOLE_OBJECT_FILES:
        (folder / name).write_bytes(data)
        out[name] = (folder / name, outcome)
    return out


#: Every kind of bad input (issue 7's list), the reason (substring) it is refused with, and
#: where the tests exercise it: "file" rows are in the files above (every reader), "batch"
#: kinds need landed or processed data (tests/reliability/test_bad_input.py), "whole" kinds
#: are in WHOLE_OBJECT_FILES.
KINDS: list[tuple[str, str, str]] = [
    ("unparsable number", "is not a number", "file"),
    ("non-integer id / t / k", "is not an integer", "file"),
    ("NaN coordinate", "must be finite", "file"),
    ("infinite coordinate (inf, 1e999)", "must be finite", "file"),
    ("coordinate outside --bounds (only when asked: any finite value is good by default)",
     "is outside the --bounds range", "bounds"),
    ("integer beyond int64 (id, t, k)", "is outside the int64 range", "file"),
    ("number spellings only some parsers take (1_0, 0x1p3, 1.5d, non-ASCII digits)", "is not a number", "file"),
    ("line of only tabs or spaces", "holds only separators or spaces", "file"),
    ("keyword longer than 256 characters", "more than the limit of 256", "file"),
    ("empty keywords", "keywords are empty", "file"),
    ("non-normalised keyword", "is not normalised", "file"),
    ("empty keyword token", "empty token", "file"),
    ("k <= 0", "it must be at least", "file"),
    ("absurdly large k", "more than the limit", "file"),
    ("unknown op", "unknown op", "file"),
    ("duplicate object id within a timestamp", "duplicate object id", "file"),
    ("duplicate object id across timestamps", "duplicate object id", "file"),
    ("duplicate object id across batches", "already ingested from", "batch"),
    ("delete of an unknown subscription", "which is not live", "file"),
    ("delete of an already-deleted subscription", "which is not live", "file"),
    ("insert of a live id", "which is already live", "file"),
    ("insert of an id live from an earlier batch", "which is already live", "batch"),
    ("rows for an already-processed timestamp", "is already processed", "batch"),
    ("wrong column count", "wrong column count", "file"),
    ("line not UTF-8", "not valid UTF", "file"),
    ("whole file not UTF-8 (UTF-16)", "not UTF-8 text", "whole"),
    ("schema change: a renamed column", "lacks column(s)", "whole"),
    ("empty file", "empty", "whole"),
    ("empty batch (header only)", "", "whole"),
    ("truncated gzip", "the gzip data ends early", "whole"),
    ("corrupt gzip (checksum)", "the gzip data is corrupt", "whole"),
    ("named .gz, not gzip", "is not gzip data", "whole"),
    ("every row rejected", "were rejected, nothing was loaded", "whole"),
]


def expected_object_rejections(wgs84: bool = False) -> dict[int, str]:
    """Line number -> reason substring for the file of :func:`write_objects_file`, read
    without bounds (the default) or with ``bounds = wgs84``."""
    rejected = {4 + i: reason for i, (_, reason) in enumerate(BAD_OBJECTS)}
    if wgs84:
        first = 4 + len(BAD_OBJECTS)
        rejected.update({first + i: reason for i, (_, reason) in enumerate(OUTSIDE_WGS84_OBJECTS)})
    return rejected


def expected_event_outcomes(wgs84: bool = False) -> dict[int, str | None]:
    """Line number -> reason substring (None: accepted) for the file of :func:`write_events_file`."""
    outcomes = {2 + i: reason for i, (_, reason) in enumerate(EVENT_ROWS)}
    first = 2 + len(EVENT_ROWS)
    outcomes.update({first + i: reason if wgs84 else None for i, (_, reason) in enumerate(OUTSIDE_WGS84_EVENTS)})
    return outcomes
