"""Hand-written input files with one kind of bad row each, shared by the numpy and Spark
reader tests and the end-to-end reliability tests. Each bad row names (by a substring) the
reason it must be rejected with. A row is text, or bytes when its point is not being UTF-8.

:data:`KINDS` lists every kind of bad input the project handles and where it is exercised;
the whole-file cases (wrong encoding, schema change, empty input) have writers below."""

from __future__ import annotations

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
    ("6\tnan\t40\tcafe\t1", "must be finite"),
    ("7\t-100\tinf\tcafe\t1", "must be finite"),
    ("8\t-200\t40\tcafe\t1", "outside"),
    ("9\t-100\t40\t\t1", "keywords are empty"),
    ("10\t-100\t40\tCafe\t1", "not normalised"),
    ("11\t-100\t40\tcafe  bar\t1", "empty token"),
    ("12.5\t-100\t40\tcafe\t1", "id '12.5' is not an integer"),
    ("13\t-100\t40\tcafe\tnoon", "t 'noon' is not an integer"),
    ("14\t-100\t40\tcafe", "wrong column count"),
    ("15\t-100\t40\tcafe\t1\textra", "wrong column count"),
    ("2\t-101\t41\tbar\t3", "duplicate object id 2"),  # across timestamps (2 is at t=0)
    ("1\t-100.2\t40.1\tbar\t0", "duplicate object id 1"),  # within one timestamp
    ("16\t1e999\t40\tcafe\t1", "must be finite"),  # overflows to inf
    (b"17\t-100\t40\tcaf\xe9\t1", "line is not valid UTF-8 text"),  # a Latin-1 row
]

EVENTS_HEADER = "op\tid\tx\ty\tkeywords\tk\tt"
# Every row of the events file in file order, with the reason it must be rejected with (a
# substring) or None when it is good. Worked out by hand from DESIGN §1: within a timestamp
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
    ("insert\t112\t-100\t95\tcafe\t3\t1", "outside"),
    ("insert\t113\t-100\t40\tcafe\t2.5\t1", "k '2.5' is not an integer"),
    (b"insert\t114\t-100\t40\tcaf\xe9\t3\t1", "line is not valid UTF-8 text"),
]


def _write_rows(path: Path, rows: list[str | bytes]) -> Path:
    path.write_bytes(b"".join((r if isinstance(r, bytes) else r.encode("utf-8")) + b"\n" for r in rows))
    return path


def write_objects_file(folder: Path, name: str = "objects.tsv") -> Path:
    rows = [OBJECTS_HEADER, *GOOD_OBJECTS[:2], *[b for b, _ in BAD_OBJECTS], *GOOD_OBJECTS[2:]]
    return _write_rows(folder / name, rows)


def write_events_file(folder: Path, name: str = "events.tsv") -> Path:
    return _write_rows(folder / name, [EVENTS_HEADER, *[r for r, _ in EVENT_ROWS]])


# --------------------------------------------------------------------------- whole inputs

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
]


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
    ("out-of-range coordinate", "is outside", "file"),
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
]


def expected_object_rejections() -> dict[int, str]:
    """Line number -> reason substring for the file of :func:`write_objects_file`."""
    return {4 + i: reason for i, (_, reason) in enumerate(BAD_OBJECTS)}


def expected_event_outcomes() -> dict[int, str | None]:
    return {2 + i: reason for i, (_, reason) in enumerate(EVENT_ROWS)}
