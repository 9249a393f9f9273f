"""The Python client of a running pipeline: subscribe, publish, read and watch results.

Usable from a notebook or any process next to the pipeline, without a JVM: every call reads
the Delta logs or appends to the landing tables through delta-rs (DESIGN §4 "Spark-free
access"), following the landing protocol of :mod:`dkmsks.storage.landing`::

    from dkmsks.client import Client

    c = Client("/data/warehouse")
    t = c.subscribe(17, x=-122.41, y=37.77, keywords=["cafe", "bakery"], k=5)
    for change in c.watch([17], from_t=t - 1):    # blocks; each change as its run commits
        print(change.t, change.change, change.object_ids, change.distances)
    c.results(17).object_ids                      # the exact kNN at the last processed timestamp

Timestamps. A subscription or an object lands at a timestamp ``t``; the pipeline processes
timestamps in order, and once it has taken ``t`` (sealed it) no row can be added there. The
*next open timestamp* is the first one still open; ``t=None`` means it. A subscription
registered at ``t`` receives the objects of ``t`` and later (DESIGN §1).

Validation uses the readers' rule set (:mod:`dkmsks.io.formats`): a bad field raises
``ValueError`` whose message names the field and the rule; a subscribe of a live id, an
unsubscribe of an id that is not live at ``t`` (the current state plus the events landed but
not processed yet) and an explicit ``t`` that is closed raise
:class:`~dkmsks.storage.landing.RefusedRows` (a ``ValueError``) with the reason, writing nothing.
"""

from __future__ import annotations

import hashlib
import math
import numbers
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dkmsks.core.model import Vocabulary
from dkmsks.io.formats import EVENT_COLUMNS, OBJECT_COLUMNS, Bounds, validate_events, validate_objects
from dkmsks.io.raw_rows import RawRow
from dkmsks.io.rejections import Reason, Rejection, shorten
from dkmsks.storage import tables
from dkmsks.storage.journal import last_processed
from dkmsks.storage.lake import Lake, where
from dkmsks.storage.landing import PublishReport, RefusedRows, next_open_timestamp, publish_rows
from dkmsks.warehouse import Warehouse

#: The landing source of subscriptions made through :meth:`Client.subscribe` / ``unsubscribe``.
CLIENT_SOURCE = "client"
#: How often a defaulted ``t`` is retried when the pipeline seals it between look-up and append.
_OPEN_ATTEMPTS = 3
#: Order of one subscription's changes within a timestamp (DESIGN §1), as the export applies them.
_CHANGE_ORDER = {"delete": 0, "insert": 1, "update": 2}


@dataclass(frozen=True)
class Result:
    """The exact kNN of a subscription at processed timestamp ``t``: object ids and Euclidean
    distances, ordered by ``(distance, object id)``."""

    sub_id: int
    t: int
    object_ids: list[int]
    distances: list[float]


@dataclass(frozen=True)
class Change:
    """One result change, committed with its timestamp ``t``: ``insert`` (registered, empty
    result), ``update`` (the new result) or ``delete`` (unsubscribed, no result)."""

    t: int
    sub_id: int
    change: str
    object_ids: tuple[int, ...]
    distances: tuple[float, ...]


class Client:
    """A warehouse database's pipeline, seen from a process without Spark (module doc).

    ``warehouse``: a folder or a :class:`~dkmsks.warehouse.Warehouse` (default
    ``$DKMSKS_WAREHOUSE``); ``database``: default ``$DKMSKS_DATABASE`` or ``default``;
    ``bounds``: a :class:`~dkmsks.io.formats.Bounds` or its spelling (``"wgs84"``) to refuse
    coordinates outside it, as ``--bounds`` does (default: any finite coordinate).
    """

    def __init__(self, warehouse: str | Path | Warehouse | None = None, database: str | None = None, *,
                 bounds: Bounds | str | None = None) -> None:
        if isinstance(warehouse, Warehouse):
            self.warehouse = warehouse if database is None else warehouse.with_database(database)
        else:
            self.warehouse = Warehouse.at(warehouse, database)
        self.bounds = Bounds.parse(bounds) if isinstance(bounds, str) else bounds
        self.lake = Lake.of(self.warehouse)

    def __repr__(self) -> str:
        return f"Client({str(self.warehouse)!r})"

    # ------------------------------------------------------------------ timestamps
    def next_open_timestamp(self) -> int:
        """The first timestamp rows can still be published at."""
        return next_open_timestamp(self.warehouse, self.lake)

    def last_processed(self) -> int | None:
        """The newest processed timestamp (None before the first partitioning)."""
        return last_processed(self.lake)

    # ------------------------------------------------------------------ subscriptions
    def subscribe(self, id: int, x: float, y: float, keywords: str | Iterable[str], k: int,
                  t: int | None = None) -> int:
        """Register subscription ``id`` at ``(x, y)`` for ``keywords`` (OR semantics; a list
        or one space-separated string) and ``k`` results at timestamp ``t`` (default: the
        next open timestamp); returns the timestamp used."""
        return self._event("insert", id, x, y, keywords, k, t)

    def unsubscribe(self, id: int, t: int | None = None) -> int:
        """Delete subscription ``id`` at ``t`` (default: the next open timestamp); returns it."""
        return self._event("delete", id, None, None, None, None, t)

    def _event(self, op: str, sid: Any, x: Any, y: Any, keywords: Any, k: Any, t: int | None) -> int:
        from dkmsks.storage.publish import events_table

        for attempt in range(_OPEN_ATTEMPTS):
            at = self.next_open_timestamp() if t is None else t
            fields = {"op": op, "id": sid, "x": x, "y": y, "keywords": keywords, "k": k, "t": at}
            row = _raw_row(1, fields, EVENT_COLUMNS)
            if isinstance(row, Rejection):
                raise ValueError(row.reason)
            vocab = Vocabulary()
            load = validate_events([row], vocab, source=CLIENT_SOURCE, bounds=self.bounds, liveness=False)
            if load.rejections:
                raise ValueError(load.rejections[0].reason)
            try:
                publish_rows(self.warehouse, events=events_table(load, vocab, CLIENT_SOURCE), strict=True,
                             run_id=CLIENT_SOURCE, who=f"a client ({op} of subscription {sid})")
            except RefusedRows as err:
                # Sealed between the look-up and the append: the next open timestamp moved on.
                if t is None and err.closed_only and attempt + 1 < _OPEN_ATTEMPTS:
                    continue
                raise
            return int(load.events.t[0])
        raise AssertionError("unreachable")  # the loop returns or raises

    # ------------------------------------------------------------------ publishing
    def publish(self, objects: Iterable[Mapping[str, Any] | Sequence[Any]] = (),
                events: Iterable[Mapping[str, Any] | Sequence[Any]] = (), *, t: int | None = None,
                source: str = CLIENT_SOURCE) -> PublishReport:
        """Publish objects (``id, x, y, keywords, t``) and subscription events (``op, id, x, y,
        keywords, k, t``; a delete needs only ``op, id, t``), each a dict by column name or a
        tuple in that column order, in one idempotent append.

        A row without ``t`` (or with ``t=None``) lands at ``t`` (default: the next open
        timestamp; should the pipeline take it meanwhile, such rows are refused as closed like
        any late row). A bad row does not stop the others: it is quarantined with its reason,
        as from a file, under the source ``<source>#<digest of the batch>`` and its position
        (1-based, objects and events numbered apart), and listed in the report's ``refused``.
        Publishing the same rows at the same timestamps again changes nothing.
        """
        object_rows, event_rows = list(objects), list(events)
        if not object_rows and not event_rows:
            return PublishReport()
        at = self.next_open_timestamp() if t is None else t
        rows = prepare_rows(object_rows, event_rows, t=at, source=source, bounds=self.bounds)
        return publish_rows(self.warehouse, objects=rows.objects, events=rows.events, rejected=rows.rejected,
                            run_id=source, who=f"a client ({source})")

    # ------------------------------------------------------------------ results
    def results(self, sub_id: int, as_of: int | None = None) -> Result:
        """The exact kNN of ``sub_id`` at processed timestamp ``as_of`` (default: the last)."""
        from dkmsks.storage.export import results_as_of

        sid = _subscription_id(sub_id)
        t, found = results_as_of(self.lake, as_of, sub_ids=[sid])
        if sid not in found:
            raise ValueError(f"subscription {sid} is not live at t={t}{self._pending_note(sid, t)}")
        r = found[sid]
        return Result(sid, t, [int(v) for v in r.object_ids], [float(v) for v in r.distances])

    def _pending_note(self, sid: int, t: int) -> str:
        """Why a subscription has no result yet, when its registration is landed but pending."""
        events = self.lake.read(tables.EVENTS, columns=["op", "id", "t"], predicate=where(id__eq=sid, t__gt=t))
        inserts = events.filter(pc.equal(events.column("op"), "insert")).column("t").to_pylist()
        if inserts:
            return (f": its registration at t={min(inserts)} is landed but not processed yet "
                    f"(processed through t={t})")
        return ": it was never registered, or it was deleted (subscribe it first)"

    # ------------------------------------------------------------------ watching
    def watch(self, sub_ids: int | Iterable[int] | None = None, from_t: int | None = None, *, poll: float = 1.0,
              until: int | None = None, follow: bool = True) -> Iterator[Change]:
        """Yield every result change of the timestamps after ``from_t``, a timestamp at a
        time as the runs commit them (read from the journal's ``change`` records).

        ``from_t`` is exclusive, so passing the last ``t`` seen resumes without a duplicate or
        a gap (a run commits all the changes of its timestamps at once); default: the last
        processed timestamp, i.e. only changes committed from now on. ``sub_ids`` restricts
        to those subscriptions (one id or several). Within a timestamp changes come as they apply: deletions,
        insertions, updates, each by subscription id. With ``follow`` the generator polls
        the journal every ``poll`` seconds for new commits; it returns once ``until`` is
        processed, or, without ``follow``, once the committed changes are yielded.
        """
        if isinstance(sub_ids, (int, np.integer, str)):
            sub_ids = [sub_ids]
        wanted = None if sub_ids is None else pa.array(sorted({_subscription_id(s) for s in sub_ids}), pa.int64())
        cursor = from_t if from_t is not None else self.last_processed()
        if cursor is None:
            raise ValueError(f"{self.warehouse}: nothing processed yet, so there is no change to watch: "
                             "partition first (dkm run, or the DAGs), or give from_t")
        journal = self.lake.table(tables.JOURNAL)
        seen_version = -1
        while until is None or cursor < until:
            version = journal.version()
            if version != seen_version:
                seen_version = version
                cursor, changes = self._changes_after(cursor, version, wanted, until)
                yield from changes
                continue
            if not follow:
                return
            time.sleep(poll)
            journal.update_incremental()

    def _changes_after(self, cursor: int, version: int, wanted: pa.Array | None,
                       until: int | None) -> tuple[int, list[Change]]:
        """The changes of the processed timestamps in ``(cursor, until]`` at journal
        ``version``, and the newest of those timestamps (the next cursor)."""
        ledger = self.lake.read(tables.JOURNAL, columns=["t"], version=version,
                                predicate=where(record__eq="ledger", t__gt=cursor, t__le=until)).column("t")
        if len(ledger) == 0:
            return cursor, []
        newest = int(pc.max(ledger).as_py())
        rows = self.lake.read(tables.JOURNAL, columns=["t", "sub_id", "change", "object_ids", "d2"], version=version,
                              predicate=where(record__eq="change", t__gt=cursor, t__le=newest))
        if wanted is not None:
            rows = rows.filter(pc.is_in(rows.column("sub_id"), value_set=wanted))
        changes = [
            Change(int(r["t"]), int(r["sub_id"]), r["change"], tuple(int(o) for o in r["object_ids"] or ()),
                   tuple(math.sqrt(d) for d in r["d2"] or ()))
            for r in rows.to_pylist()
        ]
        changes.sort(key=lambda c: (c.t, _CHANGE_ORDER[c.change], c.sub_id))
        return newest, changes


# ---------------------------------------------------------------------- a batch validated for landing


@dataclass
class PreparedRows:
    """A batch of rows given in memory, validated row by row with the readers' rules and ready
    for :func:`~dkmsks.storage.landing.publish_rows`: the landing tables of the accepted rows
    (``None`` when none), the refused rows with their reasons, and the quarantine source
    ``<source>#<digest of the batch>`` that names them (their lines are their 1-based positions,
    objects and events numbered apart)."""

    source: str
    objects: pa.Table | None
    events: pa.Table | None
    rejected: list[tuple[str, Rejection]]
    #: Lines (objects, events) of rows that named no timestamp: :meth:`at` gives them one.
    open_lines: tuple[frozenset[int], frozenset[int]] = (frozenset(), frozenset())

    def at(self, t: int) -> PreparedRows:
        """The batch with every row that named no timestamp at ``t``."""
        return PreparedRows(self.source, _with_t(self.objects, self.open_lines[0], t),
                            _with_t(self.events, self.open_lines[1], t), self.rejected)


#: The timestamp a row without one is validated with when the batch's is not chosen yet.
_OPEN_T = 0


def prepare_rows(objects: Iterable[Mapping[str, Any] | Sequence[Any]] = (),
                 events: Iterable[Mapping[str, Any] | Sequence[Any]] = (), *, t: int | None,
                 source: str = CLIENT_SOURCE, bounds: Bounds | None = None) -> PreparedRows:
    """Validate a batch as :meth:`Client.publish` does (its doc): objects (``id, x, y,
    keywords, t``) and subscription events (``op, id, x, y, keywords, k, t``), dicts by column
    name or tuples in column order. A row without ``t`` takes ``t``; with ``t=None`` it stays
    open (:attr:`PreparedRows.open_lines`) until :meth:`PreparedRows.at` chooses it, which
    lets a caller validate now and pick the timestamp when it lands (the service's publisher
    groups the batches of many requests into one append)."""
    from dkmsks.storage.publish import events_table, objects_table

    object_rows, event_rows = list(objects), list(events)
    open_lines: tuple[set[int], set[int]] = (set(), set())
    raw = {"objects": _raw_rows(object_rows, OBJECT_COLUMNS, t, open_lines[0]),
           "events": _raw_rows(event_rows, EVENT_COLUMNS, t, open_lines[1])}
    digest = hashlib.sha256(repr([[r if isinstance(r, Rejection) else r[2] for r in rows]
                                  for rows in raw.values()]).encode()).hexdigest()[:12]
    name = f"{source}#{digest}"
    vocab = Vocabulary()
    rejected: list[tuple[str, Rejection]] = []
    o_rows = [r for r in raw["objects"] if not isinstance(r, Rejection)]
    e_rows = [r for r in raw["events"] if not isinstance(r, Rejection)]
    o_load = validate_objects(o_rows, vocab, source=name, bounds=bounds)
    e_load = validate_events(e_rows, vocab, source=name, bounds=bounds, liveness=False)
    for target, rows, load_rejections in ((tables.OBJECTS, raw["objects"], o_load.rejections),
                                          (tables.EVENTS, raw["events"], e_load.rejections)):
        early = [Rejection(name, r.line, r.reason, r.text) for r in rows if isinstance(r, Rejection)]
        rejected += [(target, r) for r in sorted(early + load_rejections, key=lambda r: r.line)]
    return PreparedRows(name, objects_table(o_load, vocab, name) if len(o_load.objects) else None,
                        events_table(e_load, vocab, name) if len(e_load.events) else None, rejected,
                        (frozenset(open_lines[0]), frozenset(open_lines[1])))


def _with_t(rows: pa.Table | None, lines: frozenset[int], t: int) -> pa.Table | None:
    """``rows`` with the ``t`` of the rows at ``lines`` set to ``t``."""
    if rows is None or not lines:
        return rows
    opened = pc.is_in(rows.column("line"), value_set=pa.array(sorted(lines), pa.int64()))
    at = pc.if_else(opened, pa.scalar(int(t), pa.int64()), rows.column("t"))
    return rows.set_column(rows.column_names.index("t"), "t", at)


# ---------------------------------------------------------------------- rows as the rules read them


def _subscription_id(value: Any) -> int:
    """A subscription id checked by the readers' integer rule (a ValueError naming it)."""
    row = _raw_row(1, {"op": "delete", "id": value, "t": 0}, EVENT_COLUMNS)
    if not isinstance(row, Rejection):
        load = validate_events([row], Vocabulary(), source=CLIENT_SOURCE, liveness=False)
        if not load.rejections:
            return int(load.events.ids[0])
        row = load.rejections[0]
    raise ValueError(row.reason)


def _raw_rows(rows: list[Mapping[str, Any] | Sequence[Any]], columns: tuple[str, ...],
              t: int | None, open_lines: set[int] | None = None) -> list[RawRow | Rejection]:
    """Rows given in memory as :data:`~dkmsks.io.raw_rows.RawRow` text fields (their position
    is their line), or a :class:`Rejection` for a row of the wrong shape. ``t`` fills a
    missing timestamp; when it is None, such a row is validated at a placeholder and its line
    added to ``open_lines``."""
    out: list[RawRow | Rejection] = []
    for line, row in enumerate(rows, start=1):
        if type(row) is dict or isinstance(row, Mapping):
            unknown = sorted(set(row) - set(columns))
            if unknown:
                raise ValueError(f"row {line} has unknown field(s) {unknown}; the fields are {', '.join(columns)}")
            fields = dict(row)
        elif isinstance(row, (str, bytes)) or not isinstance(row, Sequence):
            raise TypeError(f"row {line} is a {type(row).__name__}: give a dict by field name or a tuple "
                             f"({', '.join(columns)})")
        elif len(row) != len(columns):
            text = "\t".join(_text(v) for v in row)
            out.append(Rejection("", line, Reason.COLUMN_COUNT % (len(columns), len(row)), text))
            continue
        else:
            fields = dict(zip(columns, row, strict=True))
        if fields.get("t") is None:
            fields["t"] = _OPEN_T if t is None else t
            if t is None and open_lines is not None:
                open_lines.add(line)
        out.append(_raw_row(line, fields, columns))
    return out


def _raw_row(line: int, fields: Mapping[str, Any], columns: tuple[str, ...]) -> RawRow | Rejection:
    """One row's fields as the text the rules validate; a keyword list element that holds a
    space is refused here (joining it would turn one bad keyword into two good ones)."""
    texts = []
    for c in columns:
        value = fields.get(c)
        if c == "keywords" and (type(value) is list or not isinstance(value, str) and isinstance(value, Iterable)):
            words = [_text(w) for w in value]
            spaced = next((w for w in words if " " in w), None)
            if spaced is not None:
                return Rejection("", line, Reason.NOT_NORMALISED % shorten(spaced), " ".join(words))
            value = " ".join(words)
        texts.append(_text(value))
    return line, texts, "\t".join(texts)


def _text(value: Any) -> str:
    """A value as the text field a file would hold: numbers written exactly, nothing coerced
    (``5.0`` as an id stays ``'5.0'``, which the integer rule refuses)."""
    # The exact built-in types first: the abstract-class checks below cost ~1 µs each, and a
    # burst of 100 timestamps holds ~900,000 values (its 100,000 objects' rows: 0.77 -> 0.55 s).
    kind = type(value)
    if kind is str:
        return value
    if kind is int:
        return str(value)
    if kind is float:
        return repr(value)
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return str(int(value))
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return repr(float(value))
    if isinstance(value, np.generic):
        return str(value.item())
    return str(value)
