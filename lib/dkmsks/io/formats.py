r"""Readers and writers for the file formats of docs/design.md §6, with row-level validation.

A bad row never stops the load of the good ones: it becomes a :class:`Rejection` carrying its
file line number and the reason. Input that is unusable as a whole raises
:class:`InputError`: a missing or empty file, missing columns, a header that is not UTF-8,
gzip data that is truncated or corrupt, and a file whose every row is rejected
(:class:`AllRowsRejected`, which names the commonest reasons). A file with a header and no
row is an empty batch, not an error.

The rules live here, once: the field patterns, the limits, the optional coordinate
:class:`Bounds` and the :class:`Reason` texts. The Spark readers (:mod:`dkmsks.spark.readers`)
apply the same rules as SQL expressions and write the same reason for the same line; a test
runs the bad-input catalogue through both and compares their quarantine rows line by line.

Rules, in the order a row is checked (its first failure is its reason)
----------------------------------------------------------------------
- Lines end at ``\n``; trailing ``\r`` are dropped; an empty line carries no row.
- A line must be UTF-8 and free of U+FFFD (the mark of an earlier failed decoding).
- A line of only separators and spaces is refused (it would otherwise vanish unseen).
- A line must have as many fields as the header; fields are picked by header name.
- Fields are trimmed of spaces (``' '`` only). Integers (``id``, ``t``, ``k``) match
  :data:`INTEGER_PATTERN` and fit int64. Coordinates match :data:`DECIMAL_PATTERN` and are
  finite (``nan``, ``inf`` and overflowing values such as ``1e999`` are refused). Any finite
  coordinate is accepted — degrees, projected metres — unless the caller passes ``bounds``
  (``--bounds``; docs/design.md §1).
- Keywords: non-empty, separated by single spaces, each at most :data:`MAX_KEYWORD_LENGTH`
  characters and normalised (:data:`KEYWORD_PATTERN`).
- Events: ``op`` is ``insert`` or ``delete`` (any case); an insert needs ``x``, ``y``,
  keywords and ``1 <= k <= max_k``; a delete needs only ``id`` and ``t``.
- Objects: a repeated id is refused after its first occurrence. Events are replayed in
  timestamp order (deletions first); a delete of an id that is not live, or an insert of a
  live one, is refused.

Formats
-------
- Objects: ``id  x  y  keywords  t`` with a header; TSV (``.tsv``, anything else), CSV
  (``.csv``), either gzip-compressed (``.gz``), or Parquet (``.parquet``) with those columns.
- Subscription events: ``op  id  x  y  keywords  k  t``; ``op`` is ``insert`` or ``delete``
  and a delete row needs only ``id`` and ``t``.
- Results export: JSON lines ``{"sub_id", "t", "object_ids", "distances"}``.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import math
import re
import zlib
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dkmsks.core.model import (
    Int64Array,
    KeywordSets,
    Objects,
    Op,
    Results,
    SubscriptionEvents,
    Vocabulary,
)
from dkmsks.cores import usable_cores

OBJECT_COLUMNS = ("id", "x", "y", "keywords", "t")
EVENT_COLUMNS = ("op", "id", "x", "y", "keywords", "k", "t")

#: ``k`` above this is refused as absurd (a subscription keeps at most this many results).
MAX_K = 1000
#: Keywords longer than this are refused. The real data's longest is 178 characters (a
#: category path joined by '_'); a keyword of 100,000 characters is a broken producer.
MAX_KEYWORD_LENGTH = 256
KEYWORD_PATTERN = re.compile(r"[a-z0-9]+(?:_[a-z0-9]+)*")
#: An integer field (after trimming spaces); it must also fit int64.
INTEGER_PATTERN = re.compile(r"[+-]?[0-9]+")
#: A coordinate: a plain decimal with an optional exponent. Not ``1_0``, ``0x1p3``, ``1.5d``.
DECIMAL_PATTERN = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
#: The spellings of NaN and infinity, refused as not finite rather than as not a number.
NON_FINITE_PATTERN = re.compile(r"[+-]?(?:[nN][aA][nN]|[iI][nN][fF](?:[iI][nN][iI][tT][yY])?)")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: A rejected row keeps this many characters of its text.
TEXT_LIMIT = 500
#: A value quoted in a reason is cut to this many characters (then ``...``).
QUOTE_LIMIT = 60
#: Exit status of a job or command whose input is unusable as a whole: retrying cannot help
#: (the Airflow DAGs fail such a task at once instead of retrying it).
EXIT_INPUT_UNUSABLE = 2


class Reason:
    """Why a row is refused: printf templates shared by the numpy readers (``%``) and the
    Spark readers (``format_string``), so both write the same text for the same line.

    A quoted value is the field as read (surrounding spaces kept), cut by :func:`shorten`.
    """

    NOT_UTF8 = "line is not valid UTF-8 text"
    ONLY_SEPARATORS = "the line holds only separators or spaces, no values"
    COLUMN_COUNT = "wrong column count: expected %d, got %d"
    NOT_INTEGER = "%s '%s' is not an integer"
    BEYOND_INT64 = "%s '%s' is outside the int64 range"
    NOT_A_NUMBER = "%s '%s' is not a number"
    NOT_FINITE = "%s '%s' is not finite: coordinates must be finite numbers"
    OUTSIDE_BOUNDS = "%s '%s' is outside %s"
    KEYWORDS_EMPTY = "keywords are empty"
    EMPTY_TOKEN = "keywords '%s' contain an empty token (use single spaces)"
    KEYWORD_TOO_LONG = "keyword '%s' has %d characters, more than the limit of %d"
    NOT_NORMALISED = "keyword '%s' is not normalised (lower-case [a-z0-9] words joined by '_')"
    UNKNOWN_OP = "unknown op '%s'; valid ops: insert, delete"
    K_TOO_SMALL = "k is %d, it must be at least 1"
    K_TOO_LARGE = "k is %d, more than the limit of %d"
    DUPLICATE_ID = "duplicate object id %d (first seen on line %d)"
    ALREADY_INGESTED = "duplicate object id %d (already ingested from %s line %d)"
    LATE = "t=%d is already processed (last processed timestamp %d): a late row is never applied"
    DELETE_NOT_LIVE = "delete of subscription %d, which is not live at t=%d"
    INSERT_LIVE = "insert of subscription %d, which is already live"


def shorten(value: str) -> str:
    """``value`` as quoted in a reason: at most :data:`QUOTE_LIMIT` characters, then ``...``."""
    return value if len(value) <= QUOTE_LIMIT else value[:QUOTE_LIMIT] + "..."


#: Quoted values and numbers, masked by :func:`reason_kind` so that like reasons group.
QUOTED_VALUE_PATTERN = re.compile(r"'[^']*'")
NUMBER_PATTERN = re.compile(r"[0-9]+")


def reason_kind(reason: str) -> str:
    """The kind of a reason: quoted values and numbers masked (``x '...' is not a number``)."""
    return NUMBER_PATTERN.sub("N", QUOTED_VALUE_PATTERN.sub("'...'", reason))


# --------------------------------------------------------------------------- bounds


@dataclass(frozen=True)
class Bounds:
    """An optional coordinate range check: ``xmin <= x <= xmax`` and ``ymin <= y <= ymax``.

    Off by default: coordinates are planar and unitless to the algorithm, so degrees and
    projected metres are equally valid (docs/design.md §1). Users turn it on with ``--bounds``.
    """

    xmin: float
    ymin: float
    xmax: float
    ymax: float

    def __post_init__(self) -> None:
        values = (self.xmin, self.ymin, self.xmax, self.ymax)
        if not all(math.isfinite(v) for v in values):
            raise ValueError(f"bounds must be finite numbers, got {values}")
        if self.xmin > self.xmax or self.ymin > self.ymax:
            raise ValueError(f"bounds {values} are empty: give xmin <= xmax and ymin <= ymax, in that order "
                             "(xmin,ymin,xmax,ymax)")

    @classmethod
    def parse(cls, text: str) -> Bounds:
        """``'wgs84'`` (longitude in [-180, 180], latitude in [-90, 90]) or ``'xmin,ymin,xmax,ymax'``."""
        spelled = text.strip().lower()
        if spelled == "wgs84":
            return WGS84
        parts = [p.strip() for p in spelled.split(",")]
        if len(parts) != 4 or not all(DECIMAL_PATTERN.fullmatch(p) for p in parts):
            raise ValueError(f"bounds {text!r} are neither 'wgs84' nor four numbers xmin,ymin,xmax,ymax "
                             "(e.g. 0,0,1000000,1000000)")
        return cls(*(float(p) for p in parts))

    def axis(self, name: str) -> tuple[float, float]:
        """``(low, high)`` of coordinate ``name`` (``'x'`` or ``'y'``)."""
        return (self.xmin, self.xmax) if name == "x" else (self.ymin, self.ymax)

    def describe(self, name: str) -> str:
        """The range of ``name`` as reasons quote it: ``the --bounds range [-180.0, 180.0]``."""
        low, high = self.axis(name)
        return f"the --bounds range [{low!r}, {high!r}]"


WGS84 = Bounds(-180.0, -90.0, 180.0, 90.0)

BOUNDS_HELP = (
    "refuse rows whose coordinates fall outside a box: 'wgs84' (x in [-180, 180], y in [-90, 90]) "
    "or 'xmin,ymin,xmax,ymax' (write --bounds=-180,-90,180,90 when xmin is negative). "
    "Default: no range check; any finite coordinates are accepted (degrees, projected metres, ...)"
)


def bounds_option(text: str) -> Bounds | None:
    """The ``--bounds`` flag's type: ``''`` or ``'none'`` means no check (an empty DAG param)."""
    if text.strip().lower() in ("", "none"):
        return None
    try:
        return Bounds.parse(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


# --------------------------------------------------------------------------- errors and results


class InputError(ValueError):
    """The input cannot be used at all (missing file, missing columns, unknown format)."""


class AllRowsRejected(InputError):
    """Every row of a non-empty input was refused; the message names the commonest reasons.

    ``commonest`` holds ``(rows, example line, example reason)`` per kind of reason
    (:func:`reason_kind`), most frequent first.
    """

    def __init__(self, path: str | Path, total: int, commonest: Sequence[tuple[int, int, str]],
                 *, note: str = "") -> None:
        self.total = total
        self.commonest = list(commonest)
        reasons = "; ".join(f"{rows:,} like line {line}: {reason}" for rows, line, reason in commonest)
        super().__init__(f"{path}: all {total:,} row(s) were rejected, nothing was loaded; "
                         f"commonest reasons: {reasons}" + (f"; {note}" if note else ""))


def truncated_gzip_error(path: str | Path) -> InputError:
    """The error for a gzip file that ends early."""
    return InputError(f"{path}: the gzip data ends early, the file is truncated (an interrupted copy or "
                      "download?); nothing was loaded: copy or compress the file again")


def corrupt_gzip_error(path: str | Path) -> InputError:
    """The error for a gzip file whose data does not decode."""
    return InputError(f"{path}: the gzip data is corrupt (a block or checksum does not decode); "
                      "nothing was loaded: copy or compress the file again")


def check_file(path: Path) -> None:
    """Refuse, before reading rows, a file that is missing, empty, or named ``.gz`` but not
    gzip data (its first two bytes). Both readers call it."""
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if path.stat().st_size == 0:
        raise InputError(f"{path}: the file is empty (no header line)")
    if path.name.endswith(".gz") and not _is_parquet(path):
        with open(path, "rb") as fh:
            if fh.read(2) != b"\x1f\x8b":
                raise InputError(f"{path}: the name ends in .gz but the file is not gzip data; nothing was "
                                 "loaded: compress it with gzip or drop .gz from its name")


@contextmanager
def _gzip_errors(path: Path) -> Iterator[None]:
    """Turn a gzip stream's failure while reading ``path`` into the one-line InputError."""
    try:
        yield
    except EOFError:
        raise truncated_gzip_error(path) from None
    except (gzip.BadGzipFile, zlib.error):
        raise corrupt_gzip_error(path) from None


def check_gzip_data(path: Path) -> None:
    """Decompress ``path`` to its end, keeping nothing: truncated or corrupt gzip data raises
    the one-line InputError. The Spark reader calls it before any Spark job, so a broken file
    never reaches an executor (which would log a JVM stack trace before the error); it costs
    about 0.7 s of CPU for the 32 MB real data file."""
    with _gzip_errors(path), gzip.open(path, "rb") as fh:
        while fh.read(1 << 20):
            pass


@dataclass(frozen=True)
class Rejection:
    """One quarantined input row: where it was and why it was refused."""

    source: str
    line: int
    reason: str
    text: str

    def as_dict(self) -> dict[str, object]:
        """The rejection as a dict (the quarantine table's columns)."""
        return {"source": self.source, "line": self.line, "reason": self.reason, "text": self.text}


def commonest_reasons(rejections: Sequence[Rejection], top: int = 3) -> list[tuple[int, int, str]]:
    """``(rows, example line, example reason)`` of the ``top`` commonest kinds of reason,
    most frequent first (ties: earliest example first); the example is the kind's first line."""
    kinds: dict[str, list] = {}
    for r in sorted(rejections, key=lambda r: r.line):
        entry = kinds.setdefault(reason_kind(r.reason), [0, r.line, r.reason])
        entry[0] += 1
    ranked = sorted(kinds.values(), key=lambda e: (-e[0], e[1]))
    return [(rows, line, reason) for rows, line, reason in ranked[:top]]


def refuse_if_all_rejected(path: str | Path, accepted: int, rejections: Sequence[Rejection]) -> None:
    """Raise :class:`AllRowsRejected` when rows were read and none was accepted. A file
    without rows (a header only) is an empty batch and passes."""
    if accepted == 0 and rejections:
        raise AllRowsRejected(path, len(rejections), commonest_reasons(rejections))


@dataclass
class ObjectsLoad:
    """Accepted objects in stream order, the line each came from, and the rejected rows."""

    objects: Objects
    lines: Int64Array
    rejections: list[Rejection] = field(default_factory=list)


@dataclass
class EventsLoad:
    """Accepted subscription events in replay order, the line each came from, and the rejected rows."""

    events: SubscriptionEvents
    lines: Int64Array
    rejections: list[Rejection] = field(default_factory=list)


#: A row to validate: its line (header = 1), its fields in column order (OBJECT_COLUMNS or
#: EVENT_COLUMNS), and its text as read (kept, cut, in its rejection).
RawRow = tuple[int, Sequence[str], str]


# --------------------------------------------------------------------------- raw rows of a file


def _is_parquet(path: Path) -> bool:
    return path.suffix == ".parquet" or path.name.endswith(".parquet.gz")


def _delimiter(path: Path) -> str:
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    return "," if name.endswith(".csv") else "\t"


def _open_binary(path: Path) -> io.BufferedIOBase:
    if path.name.endswith(".gz"):
        return gzip.open(path, "rb")
    return open(path, "rb")


def _file_rows(path: Path, expected: tuple[str, ...], rejections: list[Rejection],
               window: TimeWindow | None = None) -> Iterator[RawRow]:
    """Yield a :data:`RawRow` for every line of ``path`` that has the header's shape.

    Lines that are not UTF-8, hold only separators, or have the wrong number of fields are
    rejected here. Parquet files yield their rows as strings so one validator serves every
    format. Truncated or corrupt gzip data raises :class:`InputError`. With a ``window``,
    rows whose ``t`` is plainly outside it are left out first (:func:`file_rows`).
    """
    check_file(path)
    if _is_parquet(path):
        yield from _parquet_rows(path, expected, window)
        return
    delim = _delimiter(path)
    source = path.name
    with _gzip_errors(path), _open_binary(path) as fh:
        header_bytes = fh.readline()
        if not header_bytes:
            raise InputError(f"{path}: the file is empty (no header line)")
        positions, width = _header_positions(path, header_bytes, delim, expected)
        if window is None or window.unbounded:
            lines: Iterable[tuple[int, bytes]] = enumerate(fh, start=2)
        else:
            lines = _lines_in_window(fh.read(), delim, positions[expected.index("t")], width, window)
        for lineno, raw in lines:
            row = _raw_row(lineno, raw, delim, positions, width, source, rejections)
            if row is not None:
                yield row


def _raw_row(lineno: int, raw: bytes, delim: str, positions: list[int], width: int, source: str,
             rejections: list[Rejection]) -> RawRow | None:
    """The fields of one line, or None when it carries no row (empty) or is rejected here."""
    try:
        text = raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError:
        rejections.append(Rejection(source, lineno, Reason.NOT_UTF8, repr(raw[:TEXT_LIMIT])))
        return None
    if not text:
        return None  # an empty line (e.g. after the last newline) carries no row
    if "\ufffd" in text:
        rejections.append(Rejection(source, lineno, Reason.NOT_UTF8, text[:TEXT_LIMIT]))
        return None
    if not text.strip(" " + delim):
        rejections.append(Rejection(source, lineno, Reason.ONLY_SEPARATORS, text[:TEXT_LIMIT]))
        return None
    fields = text.split(delim)
    if len(fields) != width:
        rejections.append(Rejection(source, lineno, Reason.COLUMN_COUNT % (width, len(fields)), text[:TEXT_LIMIT]))
        return None
    return lineno, [fields[p] for p in positions], text


@dataclass
class TimeWindow:
    """Timestamps ``after < t <= upto`` (either bound optional) that a windowed read keeps.

    ``skipped`` counts the rows a read left out because their ``t`` was outside the window.
    """

    after: int | None = None
    upto: int | None = None
    skipped: int = 0

    @property
    def unbounded(self) -> bool:
        """Whether no timestamp range applies."""
        return self.after is None and self.upto is None

    def holds(self, t: np.ndarray) -> np.ndarray:
        """Whether each timestamp of ``t`` lies in the range."""
        inside = np.ones(t.shape[0], dtype=bool)
        if self.after is not None:
            inside &= t > self.after
        if self.upto is not None:
            inside &= t <= self.upto
        return inside


#: A ``t`` field the window test reads without the full rules: 1 to 18 ASCII digits (no sign,
#: no spaces), so it fits int64. Any other spelling goes through the full validation.
_PLAIN_T_DIGITS = 18


def _lines_in_window(body: bytes, delim: str, t_col: int, width: int,
                     window: TimeWindow) -> Iterator[tuple[int, bytes]]:
    """``(line number, bytes)`` of the body lines that may hold a row of ``window``.

    Why: publishing the next timestamp of a large workload file must not validate the whole
    file. The ``t`` field of every line is located and parsed with array operations over
    the bytes; a line is left out only when it has the header's number of fields and a
    plain ``t`` (:data:`_PLAIN_T_DIGITS`) outside the window. Every other line — a short one,
    a ``t`` with a sign or spaces, an empty line — goes through the full rules, which give
    the same verdict as an unwindowed read; nothing relies on the file being sorted by ``t``.
    """
    buf = np.frombuffer(body, dtype=np.uint8)
    newlines = np.flatnonzero(buf == ord("\n"))
    ends = newlines if buf.size == 0 or buf[-1] == ord("\n") else np.append(newlines, buf.size)
    starts = np.concatenate(([0], newlines + 1))[: ends.shape[0]]
    n = ends.shape[0]
    delims = np.flatnonzero(buf == ord(delim))
    # Line i's delimiters are delims[lo[i]] onwards, up to the first one at or after its end;
    # a regular line has width - 1 of them.
    lo = np.searchsorted(delims, starts)
    regular = np.searchsorted(delims, ends) - lo == width - 1
    lo = lo[regular]
    first = starts[regular] if t_col == 0 else delims[lo + t_col - 1] + 1
    last = ends[regular] if t_col == width - 1 else delims[lo + t_col]
    if t_col == width - 1:  # a line's trailing carriage returns are no part of its last field
        while True:
            cr = (last > first) & (buf[np.maximum(last - 1, 0)] == ord("\r"))
            if not cr.any():
                break
            last = last - cr
    length = last - first
    plain = (length >= 1) & (length <= _PLAIN_T_DIGITS)
    t = np.zeros(first.shape[0], dtype=np.int64)
    width_t = int(length[plain].max()) if plain.any() else 0
    for j in range(width_t):  # Horner's rule, one digit position at a time
        present = plain & (j < length)
        digit = buf[np.where(present, first + j, 0)].astype(np.int64) - ord("0")
        plain &= ~present | ((digit >= 0) & (digit <= 9))
        t = np.where(present, t * 10 + digit, t)
    outside = plain & ~window.holds(t)
    keep = np.ones(n, dtype=bool)
    keep[np.flatnonzero(regular)[outside]] = False
    window.skipped += int(outside.sum())
    for i in np.flatnonzero(keep).tolist():
        yield i + 2, body[starts[i]:ends[i] + 1]  # with its newline, as a line read from the file


def file_rows(path: str | Path, columns: tuple[str, ...], rejections: list[Rejection], *,
              window: TimeWindow | None = None) -> Iterator[RawRow]:
    """The raw rows of an objects or events file (``columns``: :data:`OBJECT_COLUMNS` or
    :data:`EVENT_COLUMNS`) for :func:`validate_objects` / :func:`validate_events`; lines
    refused before field validation are appended to ``rejections``.

    With ``window`` the rows whose ``t`` is plainly outside it are skipped before any other
    check and counted in ``window.skipped`` (:func:`_lines_in_window`). Rows whose ``t`` is
    not plain are still yielded, so a caller keeps the validated rows inside the window.
    """
    return _file_rows(Path(path), columns, rejections, window)


def _header_positions(path: Path, header_bytes: bytes, delim: str,
                      expected: tuple[str, ...]) -> tuple[list[int], int]:
    """Positions of the expected columns in the header line, and the header's width."""
    try:
        # utf-8-sig: a UTF-8 byte order mark is not part of the first column's name.
        header_text = header_bytes.decode("utf-8-sig").rstrip("\r\n")
    except UnicodeDecodeError:
        header_text = "\x00"
    if "\x00" in header_text or "\ufffd" in header_text:  # undecodable, or UTF-16 read as UTF-8
        raise InputError(f"{path}: the header line is not UTF-8 text (a UTF-16 or Latin-1 file?); "
                         "save the file as UTF-8")
    header = [h.strip().lower() for h in header_text.split(delim)]
    missing = [c for c in expected if c not in header]
    if missing:
        raise InputError(
            f"{path}: header {header} lacks column(s) {missing}; expected "
            f"{' '.join(expected)} separated by {'tabs' if delim == chr(9) else 'commas'}"
        )
    return [header.index(c) for c in expected], len(header)


def _parquet_rows(path: Path, expected: tuple[str, ...], window: TimeWindow | None = None) -> Iterator[RawRow]:
    import pyarrow as pa  # local: only Parquet inputs need it
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except pa.ArrowInvalid as err:
        raise InputError(f"{path}: not a readable Parquet file ({err}); nothing was loaded") from None
    missing = [c for c in expected if c not in table.column_names]
    if missing:
        raise InputError(f"{path}: Parquet columns {table.column_names} lack {missing}")
    rows = np.arange(table.num_rows)
    t_col = table.column("t")
    if window is not None and not window.unbounded and pa.types.is_integer(t_col.type):
        # Integer timestamps are tested as stored; nulls and text go through the full rules.
        t = np.asarray(pc.fill_null(t_col, 0).to_numpy(), dtype=np.int64)
        outside = ~window.holds(t) & ~np.asarray(pc.is_null(t_col).to_numpy(zero_copy_only=False), dtype=bool)
        window.skipped += int(outside.sum())
        rows = rows[~outside]
        table = table.take(pa.array(rows))
    columns = [table.column(c).to_pylist() for c in expected]
    for i, values in zip(rows.tolist(), zip(*columns, strict=True), strict=True):
        fields = ["" if v is None else str(v) for v in values]
        # Row numbers count like a text file with a header so reasons read the same.
        yield i + 2, fields, "\t".join(fields)


# --------------------------------------------------------------------------- field rules


class _RowError(Exception):
    pass


def _integer(name: str, text: str) -> int:
    value = text.strip(" ")
    if value.isdigit() and value.isascii() and len(value) < 19:  # the common case, without a regex
        return int(value)
    if not INTEGER_PATTERN.fullmatch(value):
        raise _RowError(Reason.NOT_INTEGER % (name, shorten(text)))
    number = int(value)
    if not INT64_MIN <= number <= INT64_MAX:
        raise _RowError(Reason.BEYOND_INT64 % (name, shorten(text)))
    return number


def _coordinate(name: str, text: str, bounds: Bounds | None) -> float:
    value = text.strip(" ")
    # On printable ASCII without '_', float() accepts exactly DECIMAL_PATTERN and
    # NON_FINITE_PATTERN (a unit test holds it to that); it is several times faster than a regex.
    try:
        number = float(value) if value.isascii() and value.isprintable() and "_" not in value else None
    except ValueError:
        number = None
    if number is None:
        raise _RowError(Reason.NOT_A_NUMBER % (name, shorten(text)))
    if not math.isfinite(number):  # nan, inf, or a decimal that overflows such as 1e999
        raise _RowError(Reason.NOT_FINITE % (name, shorten(text)))
    if bounds is not None:
        low, high = bounds.axis(name)
        if not low <= number <= high:
            raise _RowError(Reason.OUTSIDE_BOUNDS % (name, shorten(text), bounds.describe(name)))
    return number


def _keyword_failure(text: str, words: list[str]) -> str | None:
    """The reason the keywords field ``text`` (split into ``words``) is refused, or None."""
    if words == [""]:
        return Reason.KEYWORDS_EMPTY
    if "" in words:
        return Reason.EMPTY_TOKEN % shorten(text)
    too_long = next((w for w in words if len(w) > MAX_KEYWORD_LENGTH), None)
    if too_long is not None:
        return Reason.KEYWORD_TOO_LONG % (shorten(too_long), len(too_long), MAX_KEYWORD_LENGTH)
    not_normalised = next((w for w in words if not KEYWORD_PATTERN.fullmatch(w)), None)
    if not_normalised is not None:
        return Reason.NOT_NORMALISED % shorten(not_normalised)
    return None


class _KeywordEncoder:
    """Validates keyword fields and maps their words to vocabulary ids; a word is checked
    once, the first time it is seen."""

    def __init__(self, vocab: Vocabulary) -> None:
        self.vocab = vocab
        self.known: dict[str, int] = {}

    def encode(self, text: str) -> list[int]:
        words = text.strip(" ").split(" ")
        known = self.known
        try:
            return sorted({known[w] for w in words})
        except KeyError:
            pass  # a word not seen yet: check the whole field in rule order
        reason = _keyword_failure(text, words)
        if reason is not None:
            raise _RowError(reason)
        for w in words:
            if w not in known:
                known[w] = self.vocab.id_of(w)
        return sorted({known[w] for w in words})


def _keyword_sets(lengths: list[int], flat: list[int]) -> KeywordSets:
    ptr = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(np.asarray(lengths, dtype=np.int64), out=ptr[1:])
    return KeywordSets(ptr, np.asarray(flat, dtype=np.int32))


# --------------------------------------------------------------------------- objects


def validate_objects(
    rows: Iterable[RawRow], vocab: Vocabulary, *, source: str, bounds: Bounds | None = None,
    limit: int | None = None,
) -> ObjectsLoad:
    """Validate object rows given as text fields; the rules of this module's docstring.

    ``rows`` yields :data:`RawRow` values (fields in :data:`OBJECT_COLUMNS` order), from a file
    (:func:`read_objects`) or from memory. Refused: a field that breaks a rule (``bounds``
    adds the range check; ``None`` accepts any finite coordinate), and every repeat of an
    object id after its first occurrence. Accepted rows come back in stream order — stably
    sorted by ``t`` — with their lines; ``limit`` stops after that many accepted rows.
    """
    rejections: list[Rejection] = []
    enc = _KeywordEncoder(vocab)
    ids: list[int] = []
    xs: list[float] = []
    ys: list[float] = []
    ts: list[int] = []
    lines: list[int] = []
    lengths: list[int] = []
    flat: list[int] = []
    for lineno, (f_id, f_x, f_y, f_kw, f_t), text in rows:
        try:
            oid = _integer("id", f_id)
            x = _coordinate("x", f_x, bounds)
            y = _coordinate("y", f_y, bounds)
            kws = enc.encode(f_kw)
            t = _integer("t", f_t)
        except _RowError as err:
            rejections.append(Rejection(source, lineno, str(err), text[:TEXT_LIMIT]))
            continue
        ids.append(oid)
        xs.append(x)
        ys.append(y)
        ts.append(t)
        lines.append(lineno)
        lengths.append(len(kws))
        flat.extend(kws)
        if limit is not None and len(ids) >= limit:
            break

    objects = Objects(
        np.asarray(ids, dtype=np.int64),
        np.asarray(xs, dtype=np.float64),
        np.asarray(ys, dtype=np.float64),
        _keyword_sets(lengths, flat),
        np.asarray(ts, dtype=np.int64),
    )
    line_arr = np.asarray(lines, dtype=np.int64)
    keep = _first_occurrences(objects.ids)
    if not keep.all():
        first_line = _first_line_by_id(objects.ids, line_arr)
        for r in np.flatnonzero(~keep):
            oid = int(objects.ids[r])
            rejections.append(Rejection(source, int(line_arr[r]), Reason.DUPLICATE_ID % (oid, first_line[oid]),
                                        _object_text(objects, int(r), vocab)))
        objects, line_arr = objects.take(np.flatnonzero(keep)), line_arr[keep]
    if objects.t.size and np.any(np.diff(objects.t) < 0):
        order = np.argsort(objects.t, kind="stable")
        objects, line_arr = objects.take(order), line_arr[order]
    rejections.sort(key=lambda r: r.line)
    return ObjectsLoad(objects, line_arr, rejections)


def read_objects(
    path: str | Path, vocab: Vocabulary, *, bounds: Bounds | None = None, limit: int | None = None
) -> ObjectsLoad:
    """Read and validate an objects file (docs/design.md §6) with :func:`validate_objects`.

    Raises :class:`InputError` when the file is unusable as a whole, including when it has
    rows and every one is rejected (:class:`AllRowsRejected`).
    """
    path = Path(path)
    line_rejections: list[Rejection] = []
    load = validate_objects(_file_rows(path, OBJECT_COLUMNS, line_rejections), vocab, source=path.name,
                            bounds=bounds, limit=limit)
    load.rejections = sorted(line_rejections + load.rejections, key=lambda r: r.line)
    refuse_if_all_rejected(path, len(load.objects), load.rejections)
    return load


def _object_text(objects: Objects, r: int, vocab: Vocabulary) -> str:
    # Raw lines are not kept for 1M-row files; the accepted row is re-rendered instead.
    kw = " ".join(vocab.word(k) for k in objects.keywords.row(r))
    return f"{int(objects.ids[r])}\t{float(objects.x[r])!r}\t{float(objects.y[r])!r}\t{kw}\t{int(objects.t[r])}"


def _event_text(events: SubscriptionEvents, r: int, vocab: Vocabulary) -> str:
    if events.op[r] == Op.DELETE:
        return f"delete\t{int(events.ids[r])}\t\t\t\t\t{int(events.t[r])}"
    kw = " ".join(vocab.word(k) for k in events.keywords.row(r))
    return (
        f"insert\t{int(events.ids[r])}\t{float(events.x[r])!r}\t{float(events.y[r])!r}\t{kw}\t"
        f"{int(events.k[r])}\t{int(events.t[r])}"
    )


def _first_occurrences(ids: np.ndarray) -> np.ndarray:
    """Mask that is True on the first row of every id (file order)."""
    keep = np.zeros(ids.shape[0], dtype=bool)
    _, first = np.unique(ids, return_index=True)
    keep[first] = True
    return keep


def _first_line_by_id(ids: np.ndarray, lines: np.ndarray) -> dict[int, int]:
    uniq, first = np.unique(ids, return_index=True)
    return dict(zip(uniq.tolist(), lines[first].tolist(), strict=True))


# --------------------------------------------------------------------------- events

_OPS = {"insert": Op.INSERT, "delete": Op.DELETE}


def validate_events(
    rows: Iterable[RawRow], vocab: Vocabulary, *, source: str, bounds: Bounds | None = None,
    max_k: int = MAX_K, liveness: bool = True,
) -> EventsLoad:
    """Validate subscription event rows given as text fields (:data:`EVENT_COLUMNS` order).

    Besides the field rules (``k`` an integer in ``[1, max_k]``; ``op`` ``insert`` or
    ``delete``; ``bounds`` as in :func:`validate_objects`), the events are replayed in
    timestamp order — within a timestamp deletions before insertions (docs/design.md §1) — and a
    delete of an id that is not live, or an insert of an id that is live, is refused.
    Accepted events come back in that replay order, with their lines. ``liveness=False``
    leaves the replay to a caller that knows which subscriptions are live already (a
    publisher: :func:`dkmsks.spark.landing.publish_rows` replays the warehouse's state first).
    """
    rejections: list[Rejection] = []
    enc = _KeywordEncoder(vocab)
    ops: list[int] = []
    ids: list[int] = []
    xs: list[float] = []
    ys: list[float] = []
    ks: list[int] = []
    ts: list[int] = []
    lines: list[int] = []
    lengths: list[int] = []
    flat: list[int] = []
    for lineno, (f_op, f_id, f_x, f_y, f_kw, f_k, f_t), text in rows:
        try:
            op = _OPS.get(f_op.strip(" ").lower())
            if op is None:
                raise _RowError(Reason.UNKNOWN_OP % shorten(f_op))
            sid = _integer("id", f_id)
            t = _integer("t", f_t)
            if op == Op.INSERT:
                x = _coordinate("x", f_x, bounds)
                y = _coordinate("y", f_y, bounds)
                kws = enc.encode(f_kw)
                k = _integer("k", f_k)
                if k < 1:
                    raise _RowError(Reason.K_TOO_SMALL % k)
                if k > max_k:
                    raise _RowError(Reason.K_TOO_LARGE % (k, max_k))
            else:
                x, y, kws, k = math.nan, math.nan, [], 0
        except _RowError as err:
            rejections.append(Rejection(source, lineno, str(err), text[:TEXT_LIMIT]))
            continue
        ops.append(int(op))
        ids.append(sid)
        xs.append(x)
        ys.append(y)
        ks.append(k)
        ts.append(t)
        lines.append(lineno)
        lengths.append(len(kws))
        flat.extend(kws)

    events = SubscriptionEvents(
        np.asarray(ops, dtype=np.int8),
        np.asarray(ids, dtype=np.int64),
        np.asarray(xs, dtype=np.float64),
        np.asarray(ys, dtype=np.float64),
        _keyword_sets(lengths, flat),
        np.asarray(ks, dtype=np.int32),
        np.asarray(ts, dtype=np.int64),
    )
    line_arr = np.asarray(lines, dtype=np.int64)
    if liveness:
        order, refused = replay_liveness(events.op, events.ids, events.t)
    else:
        order, refused = replay_order(events.op, events.t), {}
    keep = np.ones(len(events), dtype=bool)
    for r, reason in refused.items():
        keep[r] = False
        rejections.append(Rejection(source, lines[r], reason, _event_text(events, r, vocab)))
    replayed = order[keep[order]]
    rejections.sort(key=lambda r: r.line)
    return EventsLoad(events.take(replayed), line_arr[replayed], rejections)


def replay_order(op: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Row order of subscription events as they apply: by ``t``, deletions before insertions,
    then the given order (DESIGN §1)."""
    return np.lexsort((np.arange(op.shape[0]), -op.astype(np.int64), t))


def replay_liveness(op: np.ndarray, ids: np.ndarray, t: np.ndarray, *, judged: np.ndarray | None = None,
                    live: Iterable[int] = ()) -> tuple[np.ndarray, dict[int, str]]:
    """Replay subscription events and refuse those that do not fit the subscriptions' lives.

    Events apply in :func:`replay_order`. Starting from the ids in ``live``, a delete of an
    id that is not live or an insert of an id that is live is refused and changes nothing. Rows where ``judged``
    is False (events landed earlier) are applied without a verdict. Returns the replay order
    and ``{row: reason}`` of the refused rows. The one liveness rule of every reader and
    publisher (the Spark readers apply it per id in ``mapInPandas``).
    """
    order = replay_order(op, t)
    refused: dict[int, str] = {}
    current = {int(i) for i in live}
    for r in order.tolist():
        sid = int(ids[r])
        if op[r] == Op.DELETE:
            if sid in current:
                current.remove(sid)
                continue
            reason = Reason.DELETE_NOT_LIVE % (sid, int(t[r]))
        else:
            if sid not in current:
                current.add(sid)
                continue
            reason = Reason.INSERT_LIVE % sid
        if judged is None or judged[r]:
            refused[r] = reason
    return order, refused


def read_events(
    path: str | Path,
    vocab: Vocabulary,
    *,
    bounds: Bounds | None = None,
    max_k: int = MAX_K,
) -> EventsLoad:
    """Read and validate a subscription events file (docs/design.md §6) with :func:`validate_events`.

    Raises :class:`InputError` when the file is unusable as a whole, including when it has
    rows and every one is rejected (:class:`AllRowsRejected`).
    """
    path = Path(path)
    line_rejections: list[Rejection] = []
    load = validate_events(_file_rows(path, EVENT_COLUMNS, line_rejections), vocab, source=path.name,
                           bounds=bounds, max_k=max_k)
    load.rejections = sorted(line_rejections + load.rejections, key=lambda r: r.line)
    refuse_if_all_rejected(path, len(load.events), load.rejections)
    return load


# --------------------------------------------------------------------------- writers


def _open_text_out(path: Path) -> IO[str]:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.name.endswith(".gz"):
        # Level 1: these files are rewritten often and read once; speed beats size here.
        return io.TextIOWrapper(gzip.open(path, "wb", compresslevel=1), encoding="utf-8", newline="\n")
    return open(path, "w", encoding="utf-8", newline="\n")


def _open_binary_out(path: Path) -> gzip.GzipFile | BinaryIO:
    if path.name.endswith(".gz"):
        return gzip.GzipFile(path, "wb", compresslevel=1)  # level as in _open_text_out
    return open(path, "wb")


def _keyword_texts(keywords: KeywordSets, vocab: Vocabulary) -> list[str]:
    words = vocab.words
    return [" ".join(words[k] for k in keywords.row(i)) for i in range(len(keywords))]


def write_objects(path: str | Path, objects: Objects, vocab: Vocabulary) -> None:
    """Write objects as TSV (gzip when the name ends in ``.gz``)."""
    kw = _keyword_texts(objects.keywords, vocab)
    with _open_text_out(Path(path)) as out:
        out.write("\t".join(OBJECT_COLUMNS) + "\n")
        for i, oid, x, y, t in zip(
            range(len(objects)), objects.ids.tolist(), objects.x.tolist(), objects.y.tolist(),
            objects.t.tolist(), strict=True,
        ):
            out.write(f"{oid}\t{x!r}\t{y!r}\t{kw[i]}\t{t}\n")


def write_events(path: str | Path, events: SubscriptionEvents, vocab: Vocabulary) -> None:
    """Write subscription events as TSV; delete rows carry only ``op``, ``id`` and ``t``."""
    kw = _keyword_texts(events.keywords, vocab)
    with _open_text_out(Path(path)) as out:
        out.write("\t".join(EVENT_COLUMNS) + "\n")
        for i, op, sid, x, y, k, t in zip(
            range(len(events)), events.op.tolist(), events.ids.tolist(), events.x.tolist(),
            events.y.tolist(), events.k.tolist(), events.t.tolist(), strict=True,
        ):
            if op == Op.DELETE:
                out.write(f"delete\t{sid}\t\t\t\t\t{t}\n")
            else:
                out.write(f"insert\t{sid}\t{x!r}\t{y!r}\t{kw[i]}\t{k}\t{t}\n")


def write_results(path: str | Path, results: Results, t: int) -> int:
    """Write the results export (docs/design.md §6), one JSON line per live subscription by id.

    Returns the number of lines written.
    """
    return write_results_table(path, results_table(results), t)


def results_table(results: Results) -> pa.Table:
    """``results`` as columns ``sub_id``, ``object_ids``, ``d2`` (lists), ordered by ``sub_id``."""
    keys = sorted(results)
    rows = [results[s] for s in keys]
    offsets = np.zeros(len(rows) + 1, dtype=np.int32)
    np.cumsum([len(r.object_ids) for r in rows], out=offsets[1:])
    ids = np.concatenate([r.object_ids for r in rows]) if rows else np.zeros(0, np.int64)
    d2 = np.concatenate([r.d2 for r in rows]) if rows else np.zeros(0, np.float64)
    return pa.table({
        "sub_id": pa.array(keys, type=pa.int64()),
        "object_ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(ids, type=pa.int64())),
        "d2": pa.ListArray.from_arrays(pa.array(offsets), pa.array(d2, type=pa.float64())),
    })


#: Rows formatted per Arrow call in :func:`write_results_table` (bounds memory and keeps the
#: string offsets of a batch well inside int32 at any |S|).
_EXPORT_BATCH_ROWS = 100_000


def write_results_table(path: str | Path, table: pa.Table, t: int) -> int:
    """Write the results export from columns ``sub_id``, ``object_ids``, ``d2`` ordered by
    ``sub_id`` (:func:`results_table`, :func:`dkmsks.spark.export.results_table_as_of`).

    The lines are built by Arrow's string kernels, not one ``json.dumps`` per subscription
    (1M subscriptions: ~20 s in Python). Distances are ``sqrt(d2)`` printed in the shortest
    form that reads back as the same float64 (Arrow's formatter; ``.0`` is added to whole
    numbers so every distance stays a JSON float): ``json.loads`` returns exactly the values
    ``np.sqrt(d2)`` holds. Returns the number of lines written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    batches = table.combine_chunks().to_batches(max_chunksize=_EXPORT_BATCH_ROWS)
    # Arrow's kernels release the GIL: batches are formatted on every core, a round of one
    # batch per thread at a time (so only that many formatted batches are held), written in order.
    threads = min(4, usable_cores())
    with _open_binary_out(path) as out, ThreadPoolExecutor(max_workers=threads) as pool:
        for first in range(0, len(batches), threads):
            for lines in pool.map(lambda batch: _json_lines(batch, int(t)), batches[first:first + threads]):
                out.write(lines)
    return table.num_rows


def _json_lines(batch: pa.RecordBatch, t: int) -> memoryview:
    """The export lines of ``batch``, concatenated (each ends with a newline)."""
    ids = batch.column("object_ids")
    d2 = batch.column("d2")
    # Both lists are formatted flat and joined per row through offsets of their own (the
    # batch may be a slice): casting the list column itself to list<string> costs 3-5x the
    # flat cast of the same values (measured, pyarrow 21, 100k results of the 1M warehouse).
    starts = np.zeros(len(batch) + 1, dtype=np.int32)
    np.cumsum(pc.list_value_length(ids).fill_null(0).to_numpy(zero_copy_only=False), out=starts[1:])
    offsets = pa.array(starts)
    id_text = pc.binary_join(pa.ListArray.from_arrays(offsets, pc.cast(pc.list_flatten(ids), pa.string())), ", ")
    values = _json_floats(pc.sqrt(pc.list_flatten(d2)))
    distance_text = pc.binary_join(pa.ListArray.from_arrays(offsets, values), ", ")
    lines = pc.binary_join_element_wise(
        '{"sub_id": ', pc.cast(batch.column("sub_id"), pa.string()), f', "t": {t}, "object_ids": [', id_text,
        '], "distances": [', distance_text, "]}\n", "")
    if len(lines) == 0:
        return memoryview(b"")
    # The lines are back to back in the string array's data buffer: write that slice as is.
    ends = np.frombuffer(lines.buffers()[1], dtype=np.int32)[lines.offset:lines.offset + len(lines) + 1]
    return memoryview(lines.buffers()[2])[ends[0]:ends[-1]]


def _json_floats(values: pa.Array) -> pa.Array:
    """``values`` (float64) as text that reads back as the same floats, each a JSON float.

    Arrow prints the shortest round-trip form, which for a whole number has neither a point
    nor an exponent ("3"): those get ".0". Only whole numbers can lack both, and distances
    rarely are, so only they are looked at (testing every string with a regex was a third
    of the export's formatting time at 1M subscriptions)."""
    text = pc.cast(values, pa.string())
    x = values.to_numpy(zero_copy_only=False)
    whole = np.flatnonzero(np.trunc(x) == x)
    if whole.size == 0:
        return text
    candidates = text.take(pa.array(whole))
    bare = np.asarray(pc.invert(pc.match_substring_regex(candidates, r"[.eE]")), dtype=bool)
    if not bare.any():
        return text
    mask = np.zeros(len(text), dtype=bool)
    mask[whole[bare]] = True
    suffixed = pc.binary_join_element_wise(candidates.filter(pa.array(bare)), ".0", "")
    return pc.replace_with_mask(text, pa.array(mask), suffixed)


def read_results(path: str | Path) -> dict[int, dict[str, object]]:
    """Read a results export back, keyed by subscription id (for comparisons)."""
    rows: dict[int, dict[str, object]] = {}
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                rows[int(row["sub_id"])] = row
    return rows
