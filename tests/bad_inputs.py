"""Hand-written input files with one kind of bad row each, shared by the numpy and Spark
reader tests. Each bad row names (by a substring) the reason it must be rejected with."""

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
    ("2\t-101\t41\tbar\t3", "duplicate object id 2"),
]

EVENTS_HEADER = "op\tid\tx\ty\tkeywords\tk\tt"
# Every row of the events file in file order, with the reason it must be rejected with (a
# substring) or None when it is good. Worked out by hand from DESIGN §1: within a timestamp
# deletions apply before insertions, whatever the file order.
EVENT_ROWS: list[tuple[str, str | None]] = [
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
]


def write_objects_file(folder: Path, name: str = "objects.tsv") -> Path:
    path = folder / name
    rows = [OBJECTS_HEADER, *GOOD_OBJECTS[:2], *[b for b, _ in BAD_OBJECTS], *GOOD_OBJECTS[2:]]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def write_events_file(folder: Path, name: str = "events.tsv") -> Path:
    path = folder / name
    rows = [EVENTS_HEADER, *[r for r, _ in EVENT_ROWS]]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def expected_object_rejections() -> dict[int, str]:
    """Line number -> reason substring for the file of :func:`write_objects_file`."""
    return {4 + i: reason for i, (_, reason) in enumerate(BAD_OBJECTS)}


def expected_event_outcomes() -> dict[int, str | None]:
    return {2 + i: reason for i, (_, reason) in enumerate(EVENT_ROWS)}
