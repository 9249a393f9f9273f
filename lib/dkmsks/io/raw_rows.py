"""A file's lines as rows of text fields, before any field rule (docs/design.md §6).

Objects and events files alike: TSV, CSV, either gzip-compressed, or Parquet, with a header that
names the columns. A line that is not UTF-8, holds only separators or has the wrong number of
fields is refused here (a :class:`~dkmsks.io.rejections.Rejection`); a file unusable as a whole
(missing, empty, without the columns, broken gzip or Parquet data) raises
:class:`~dkmsks.io.rejections.InputError`. The field rules that follow are
:mod:`dkmsks.io.formats`'s. A :class:`TimeWindow` leaves out, before any rule, the lines whose
``t`` is plainly outside it: publishing the next timestamp of a large workload file must not
validate the whole file.
"""

from __future__ import annotations

import gzip
import io
import zlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dkmsks.io.rejections import TEXT_LIMIT, InputError, Reason, Rejection, corrupt_gzip_error, truncated_gzip_error


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
