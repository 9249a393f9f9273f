"""Readers and writers for the file formats of DESIGN §6, with row-level validation.

A bad row never stops the load of the good ones: it becomes a :class:`Rejection` carrying its
file line number and the reason. Only input that is unusable as a whole (missing file,
missing columns) raises :class:`InputError`.

Formats
-------
- Objects: ``id  x  y  keywords  t`` with a header; TSV (``.tsv``, anything else), CSV
  (``.csv``), either gzip-compressed (``.gz``), or Parquet (``.parquet``) with those columns.
- Subscription events: ``op  id  x  y  keywords  k  t``; ``op`` is ``insert`` or ``delete``
  and a delete row needs only ``id`` and ``t``.
- Results export: JSON lines ``{"sub_id", "t", "object_ids", "distances"}``.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import numpy as np

from dkmsks.core.model import (
    KeywordSets,
    Objects,
    Op,
    Rect,
    Results,
    SubscriptionEvents,
    Vocabulary,
)

OBJECT_COLUMNS = ("id", "x", "y", "keywords", "t")
EVENT_COLUMNS = ("op", "id", "x", "y", "keywords", "k", "t")

#: Coordinates are WGS84 longitude/latitude unless the caller says otherwise.
WGS84 = Rect(-180.0, -90.0, 180.0, 90.0)
#: ``k`` above this is refused as absurd (a subscription keeps at most this many results).
MAX_K = 1000
KEYWORD_PATTERN = re.compile(r"[a-z0-9]+(?:_[a-z0-9]+)*")
_RAW_TEXT_LIMIT = 500


class InputError(ValueError):
    """The input cannot be used at all (missing file, missing columns, unknown format)."""


@dataclass(frozen=True)
class Rejection:
    """One quarantined input row: where it was and why it was refused."""

    source: str
    line: int
    reason: str
    text: str

    def as_dict(self) -> dict[str, object]:
        return {"source": self.source, "line": self.line, "reason": self.reason, "text": self.text}


@dataclass
class ObjectsLoad:
    objects: Objects
    rejections: list[Rejection] = field(default_factory=list)


@dataclass
class EventsLoad:
    events: SubscriptionEvents
    rejections: list[Rejection] = field(default_factory=list)


# --------------------------------------------------------------------------- raw rows


def _is_parquet(path: Path) -> bool:
    return path.suffix == ".parquet" or path.name.endswith(".parquet.gz")


def _delimiter(path: Path) -> str:
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    return "," if name.endswith(".csv") else "\t"


def _open_binary(path: Path) -> IO[bytes]:
    if path.name.endswith(".gz"):
        return gzip.open(path, "rb")
    return open(path, "rb")


def _raw_rows(
    path: Path, expected: tuple[str, ...], source: str, rejections: list[Rejection]
) -> Iterator[tuple[int, list[str], str]]:
    """Yield ``(line number, fields in expected order, raw text)`` for every well-formed row.

    Rows that are not UTF-8 or have the wrong number of fields are rejected here. Parquet
    files yield their rows as strings so one validator serves every format.
    """
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if _is_parquet(path):
        yield from _parquet_rows(path, expected)
        return
    delim = _delimiter(path)
    with _open_binary(path) as fh:
        header_bytes = fh.readline()
        if not header_bytes:
            raise InputError(f"{path}: the file is empty (no header line)")
        try:
            # utf-8-sig: a UTF-8 byte order mark is not part of the first column's name.
            header_text = header_bytes.decode("utf-8-sig").rstrip("\r\n")
        except UnicodeDecodeError:
            header_text = "\x00"
        if "\x00" in header_text:  # undecodable, or UTF-16 read as UTF-8
            raise InputError(f"{path}: the header line is not UTF-8 text (a UTF-16 or Latin-1 file?); "
                             "save the file as UTF-8") from None
        header = header_text.split(delim)
        header = [h.strip().lower() for h in header]
        missing = [c for c in expected if c not in header]
        if missing:
            raise InputError(
                f"{path}: header {header} lacks column(s) {missing}; expected "
                f"{' '.join(expected)} separated by {'tabs' if delim == chr(9) else 'commas'}"
            )
        positions = [header.index(c) for c in expected]
        width = len(header)
        for lineno, raw in enumerate(fh, start=2):
            try:
                text = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError:
                rejections.append(
                    Rejection(source, lineno, "line is not valid UTF-8 text", repr(raw[:_RAW_TEXT_LIMIT]))
                )
                continue
            if not text.strip():
                continue  # blank lines (e.g. a trailing newline) carry no row
            fields = text.split(delim)
            if len(fields) != width:
                rejections.append(
                    Rejection(
                        source,
                        lineno,
                        f"wrong column count: expected {width}, got {len(fields)}",
                        text[:_RAW_TEXT_LIMIT],
                    )
                )
                continue
            yield lineno, [fields[p] for p in positions], text


def _parquet_rows(path: Path, expected: tuple[str, ...]) -> Iterator[tuple[int, list[str], str]]:
    import pyarrow.parquet as pq  # local: only Parquet inputs need it

    table = pq.read_table(path)
    missing = [c for c in expected if c not in table.column_names]
    if missing:
        raise InputError(f"{path}: Parquet columns {table.column_names} lack {missing}")
    columns = [table.column(c).to_pylist() for c in expected]
    for i, values in enumerate(zip(*columns, strict=True)):
        fields = ["" if v is None else str(v) for v in values]
        # Row numbers count like a text file with a header so reasons read the same.
        yield i + 2, fields, "\t".join(fields)


# --------------------------------------------------------------------------- field checks


class _RowError(Exception):
    pass


def _parse_int(name: str, text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise _RowError(f"{name} {text!r} is not an integer") from None


def _parse_coord(name: str, text: str, low: float | None, high: float | None) -> float:
    try:
        value = float(text)
    except ValueError:
        raise _RowError(f"{name} {text!r} is not a number") from None
    if not math.isfinite(value):
        raise _RowError(f"{name} is {value}, coordinates must be finite")
    if low is not None and high is not None and not (low <= value <= high):
        raise _RowError(f"{name} {value} is outside [{low}, {high}]")
    return value


class _KeywordEncoder:
    """Validates keyword tokens once per distinct word and maps them to vocabulary ids."""

    def __init__(self, vocab: Vocabulary) -> None:
        self.vocab = vocab
        self.checked: dict[str, int] = {}

    def encode(self, text: str) -> list[int]:
        words = text.split(" ")
        if words == [""]:
            raise _RowError("keywords are empty")
        ids = []
        for w in words:
            kid = self.checked.get(w)
            if kid is None:
                if w == "":
                    raise _RowError(f"keywords {text!r} contain an empty token (use single spaces)")
                if not KEYWORD_PATTERN.fullmatch(w):
                    raise _RowError(
                        f"keyword {w!r} is not normalised (lower-case [a-z0-9] words joined by '_')"
                    )
                kid = self.vocab.id_of(w)
                self.checked[w] = kid
            ids.append(kid)
        return sorted(set(ids))


def _bounds(bounds: Rect | None) -> tuple[float | None, float | None, float | None, float | None]:
    if bounds is None:
        return None, None, None, None
    return bounds.xmin, bounds.xmax, bounds.ymin, bounds.ymax


def _keyword_sets(lengths: list[int], flat: list[int]) -> KeywordSets:
    ptr = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(np.asarray(lengths, dtype=np.int64), out=ptr[1:])
    return KeywordSets(ptr, np.asarray(flat, dtype=np.int32))


# --------------------------------------------------------------------------- objects


def read_objects(
    path: str | Path, vocab: Vocabulary, *, bounds: Rect | None = WGS84, limit: int | None = None
) -> ObjectsLoad:
    """Read and validate an objects file (DESIGN §6).

    Rejected rows: wrong column count, non-UTF-8 text, unparsable or non-finite numbers,
    coordinates outside ``bounds`` (``None`` disables the check), empty or non-normalised
    keywords, and every repeat of an object id after its first occurrence. Accepted rows are
    returned in stream order: stably sorted by ``t`` (file order within a timestamp).
    """
    path = Path(path)
    source = path.name
    rejections: list[Rejection] = []
    xlo, xhi, ylo, yhi = _bounds(bounds)
    enc = _KeywordEncoder(vocab)
    ids: list[int] = []
    xs: list[float] = []
    ys: list[float] = []
    ts: list[int] = []
    lines: list[int] = []
    lengths: list[int] = []
    flat: list[int] = []
    for lineno, (f_id, f_x, f_y, f_kw, f_t), text in _raw_rows(path, OBJECT_COLUMNS, source, rejections):
        try:
            oid = _parse_int("id", f_id)
            x = _parse_coord("x", f_x, xlo, xhi)
            y = _parse_coord("y", f_y, ylo, yhi)
            kws = enc.encode(f_kw.strip())
            t = _parse_int("t", f_t)
        except _RowError as err:
            rejections.append(Rejection(source, lineno, str(err), text[:_RAW_TEXT_LIMIT]))
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
            rejections.append(
                Rejection(
                    source,
                    int(line_arr[r]),
                    f"duplicate object id {int(objects.ids[r])} (first seen on line "
                    f"{first_line[int(objects.ids[r])]})",
                    _object_text(objects, int(r), vocab),
                )
            )
        objects = objects.take(np.flatnonzero(keep))
    if objects.t.size and np.any(np.diff(objects.t) < 0):
        objects = objects.take(np.argsort(objects.t, kind="stable"))
    rejections.sort(key=lambda r: r.line)
    return ObjectsLoad(objects, rejections)


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


def read_events(
    path: str | Path,
    vocab: Vocabulary,
    *,
    bounds: Rect | None = WGS84,
    max_k: int = MAX_K,
) -> EventsLoad:
    """Read and validate a subscription events file (DESIGN §6).

    Besides the per-field checks of :func:`read_objects` (``k`` must be an integer in
    ``[1, max_k]``; ``op`` one of ``insert``/``delete``), the events are replayed in
    timestamp order — within a timestamp deletions before insertions (DESIGN §1) — and a
    delete of an id that is not live, or an insert of an id that is live, is rejected.
    Accepted events are returned in that replay order.
    """
    path = Path(path)
    source = path.name
    rejections: list[Rejection] = []
    xlo, xhi, ylo, yhi = _bounds(bounds)
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
    for lineno, (f_op, f_id, f_x, f_y, f_kw, f_k, f_t), text in _raw_rows(
        path, EVENT_COLUMNS, source, rejections
    ):
        try:
            try:
                op = Op.from_str(f_op)
            except ValueError as err:
                raise _RowError(str(err)) from None
            sid = _parse_int("id", f_id)
            t = _parse_int("t", f_t)
            if op == Op.INSERT:
                x = _parse_coord("x", f_x, xlo, xhi)
                y = _parse_coord("y", f_y, ylo, yhi)
                kws = enc.encode(f_kw.strip())
                k = _parse_int("k", f_k)
                if k < 1:
                    raise _RowError(f"k is {k}, it must be at least 1")
                if k > max_k:
                    raise _RowError(f"k is {k}, more than the limit of {max_k}")
            else:
                x, y, kws, k = math.nan, math.nan, [], 0
        except _RowError as err:
            rejections.append(Rejection(source, lineno, str(err), text[:_RAW_TEXT_LIMIT]))
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
    # Replay order: by t, deletions (op 1) before insertions (op 0), file order otherwise.
    order = np.lexsort((np.arange(len(events)), -events.op.astype(np.int64), events.t))
    keep = np.ones(len(events), dtype=bool)
    live: set[int] = set()
    op_sorted = events.op[order]
    id_sorted = events.ids[order]
    for pos in range(order.shape[0]):
        sid = int(id_sorted[pos])
        if op_sorted[pos] == Op.DELETE:
            if sid in live:
                live.remove(sid)
                continue
            reason = f"delete of subscription {sid}, which is not live at t={int(events.t[order[pos]])}"
        else:
            if sid not in live:
                live.add(sid)
                continue
            reason = f"insert of subscription {sid}, which is already live"
        r = int(order[pos])
        keep[r] = False
        rejections.append(Rejection(source, lines[r], reason, _event_text(events, r, vocab)))
    events = events.take(order[keep[order]])
    rejections.sort(key=lambda r: r.line)
    return EventsLoad(events, rejections)


# --------------------------------------------------------------------------- writers


def _open_text_out(path: Path) -> IO[str]:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.name.endswith(".gz"):
        # Level 1: these files are rewritten often and read once; speed beats size here.
        return io.TextIOWrapper(gzip.open(path, "wb", compresslevel=1), encoding="utf-8", newline="\n")
    return open(path, "w", encoding="utf-8", newline="\n")


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
    """Write the results export (DESIGN §6), one JSON line per live subscription by id.

    Returns the number of lines written.
    """
    with _open_text_out(Path(path)) as out:
        for sid in sorted(results):
            r = results[sid]
            out.write(
                json.dumps(
                    {
                        "sub_id": sid,
                        "t": int(t),
                        "object_ids": r.object_ids.tolist(),
                        "distances": r.distances.tolist(),
                    }
                )
                + "\n"
            )
    return len(results)


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


def write_rejections(path: str | Path, rejections: list[Rejection]) -> None:
    """Write quarantined rows as JSON lines (source, line, reason, text)."""
    with _open_text_out(Path(path)) as out:
        for r in rejections:
            out.write(json.dumps(r.as_dict()) + "\n")
