r"""Reading the file formats of docs/design.md §6, with row-level validation.

A bad row never stops the load of the good ones: it becomes a
:class:`~dkmsks.io.rejections.Rejection` carrying its file line number and the reason. Input
that is unusable as a whole raises :class:`~dkmsks.io.rejections.InputError`: a missing or
empty file, missing columns, a header that is not UTF-8, gzip data that is truncated or
corrupt, and a file whose every row is rejected (:class:`~dkmsks.io.rejections.AllRowsRejected`,
which names the commonest reasons). A file with a header and no row is an empty batch, not an
error.

The rules live here, once: the field patterns, the limits and the optional coordinate
:class:`Bounds`; the reasons' texts are :class:`~dkmsks.io.rejections.Reason`. The Spark
readers (:mod:`dkmsks.spark.readers`) apply the same rules as SQL expressions and write the
same reason for the same line; a test runs the bad-input catalogue through both and compares
their quarantine rows line by line. The package's other modules: :mod:`dkmsks.io.raw_rows`
(a file's lines as rows of text fields, the first rules below), :mod:`dkmsks.io.rejections`
and :mod:`dkmsks.io.writers` (the workload files and the results export).

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
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dkmsks.core.model import (
    Int64Array,
    KeywordSets,
    Objects,
    Op,
    SubscriptionEvents,
    Vocabulary,
)
from dkmsks.io.raw_rows import RawRow, file_rows
from dkmsks.io.rejections import (
    TEXT_LIMIT,
    Reason,
    Rejection,
    refuse_if_all_rejected,
    shorten,
)

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
    load = validate_objects(file_rows(path, OBJECT_COLUMNS, line_rejections), vocab, source=path.name,
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
    publisher: :func:`dkmsks.storage.landing.publish_rows` replays the warehouse's state first).
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
    load = validate_events(file_rows(path, EVENT_COLUMNS, line_rejections), vocab, source=path.name,
                           bounds=bounds, max_k=max_k)
    load.rejections = sorted(line_rejections + load.rejections, key=lambda r: r.line)
    refuse_if_all_rejected(path, len(load.events), load.rejections)
    return load
