"""Publishers' rows, from workload files or from memory, validated and landed without Spark.

Both halves of a publish use one rule set each: rows are checked field by field with
:mod:`dkmsks.io.formats` (the rules of every reader; line numbers and reasons kept), then
against the warehouse and appended by :func:`dkmsks.storage.landing.publish_rows` (sealed
timestamps, landed ids, liveness; idempotent; refused rows quarantined in the same step).
No JVM is started: a publish is a delta-rs read or two and one append per table.

:func:`publish_files` is ``dkm publish``: the next timestamps of a workload after the newest
landed one. A workload file holds the whole stream, so the rows of other timestamps are
skipped by a cheap look at their ``t`` field before any validation
(:func:`dkmsks.io.raw_rows.file_rows`); rows whose ``t`` is not plainly readable are validated
in every window and land in theirs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dkmsks.core.model import Op, Vocabulary
from dkmsks.io.formats import (
    EVENT_COLUMNS,
    OBJECT_COLUMNS,
    Bounds,
    EventsLoad,
    ObjectsLoad,
    validate_events,
    validate_objects,
)
from dkmsks.io.raw_rows import TimeWindow, file_rows
from dkmsks.io.rejections import AllRowsRejected, Rejection, commonest_reasons
from dkmsks.storage import tables
from dkmsks.storage.lake import Lake, where
from dkmsks.storage.landing import PublishReport, publish_rows, sealed_through
from dkmsks.warehouse import Warehouse


def objects_table(load: ObjectsLoad, vocab: Vocabulary, source: str) -> pa.Table:
    """Validated objects as landing rows (:data:`dkmsks.storage.landing.OBJECT_FIELDS`)."""
    o = load.objects
    return pa.table({
        "id": pa.array(o.ids, pa.int64()), "x": pa.array(o.x, pa.float64()), "y": pa.array(o.y, pa.float64()),
        "keywords": _keywords(o.keywords, vocab), "t": pa.array(o.t, pa.int64()),
        "source": pa.array([source] * len(o), pa.string()), "line": pa.array(load.lines, pa.int64()),
    })


def events_table(load: EventsLoad, vocab: Vocabulary, source: str) -> pa.Table:
    """Validated subscription events as landing rows; a deletion fills only op, id and t."""
    e = load.events
    insert = e.op == Op.INSERT
    keywords = _keywords(e.keywords, vocab)
    return pa.table({
        "op": pa.array(np.where(insert, "insert", "delete").tolist(), pa.string()),
        "id": pa.array(e.ids, pa.int64()),
        "x": pa.array(e.x, pa.float64(), mask=~insert), "y": pa.array(e.y, pa.float64(), mask=~insert),
        "keywords": pc.if_else(pa.array(insert), keywords, pa.nulls(len(e), keywords.type)),
        "k": pa.array(e.k, pa.int32(), mask=~insert), "t": pa.array(e.t, pa.int64()),
        "source": pa.array([source] * len(e), pa.string()), "line": pa.array(load.lines, pa.int64()),
    })


def _keywords(keywords, vocab: Vocabulary) -> pa.ListArray:
    words = np.asarray(vocab.words, dtype=object)
    return pa.ListArray.from_arrays(pa.array(keywords.ptr.astype(np.int32)),
                                    pa.array(words[keywords.ids].tolist(), pa.string()))


@dataclass
class FilesPublished:
    """What :func:`publish_files` did: the window it took and the publish report."""

    after: int  # timestamps after this one ...
    upto: int  # ... up to this one were published
    report: PublishReport


def newest_landed(lake: Lake, sealed: int, sources: set[str]) -> int:
    """The newest timestamp with rows landed from ``sources`` (file names), or ``sealed``
    when none is newer.

    Why per source: a subscription made with ``dkm subscribe`` at the next open timestamp,
    or any other publisher's rows, must not make a workload's publisher skip that timestamp.
    """
    newest = sealed
    for name in (tables.OBJECTS, tables.EVENTS):
        rows = lake.read(name, columns=["t", "source"], predicate=where(t__gt=sealed))
        mine = rows.filter(pc.is_in(rows.column("source"), value_set=pa.array(sorted(sources), pa.string())))
        if mine.num_rows:
            newest = max(newest, int(pc.max(mine.column("t")).as_py()))
    return newest


def publish_files(warehouse: Warehouse, *, objects: Path | None = None, events: Path | None = None,
                  timestamps: int = 1, after: int | None = None, bounds: Bounds | None = None,
                  run_id: str = "publish") -> FilesPublished:
    """Land the rows of the next ``timestamps`` timestamps of workload files: those after
    ``after``, by default the newest timestamp landed from files of these names or the last
    one the pipeline took, whichever is newer (:func:`newest_landed`; module doc).

    Raises :class:`~dkmsks.io.rejections.InputError` for a file unusable as a whole, having
    written nothing, and :class:`~dkmsks.io.rejections.AllRowsRejected` for a file with no usable
    row at all (every row read was refused and none lay outside the window), after
    quarantining the refused rows for inspection.
    """
    if timestamps < 1:
        raise ValueError(f"--timestamps is {timestamps}: publish at least one timestamp")
    if objects is None and events is None:
        raise ValueError("nothing to publish: give an objects file, an events file or both")
    lake = Lake.of(warehouse)
    sealed = sealed_through(warehouse, lake)
    if sealed is None:
        raise ValueError(f"{warehouse}: no partition plan yet: land O_init and the initial subscriptions and "
                         "partition first (dkm run --until T0, or the ingest and partition DAGs)")
    named = {Path(p).name for p in (objects, events) if p is not None}
    start = newest_landed(lake, sealed, named) if after is None else after
    window = (start, start + timestamps)
    vocab = Vocabulary()
    rejected: list[tuple[str, Rejection]] = []
    unusable: list[AllRowsRejected] = []
    rows: dict[str, pa.Table] = {}
    for path, target in ((objects, tables.OBJECTS), (events, tables.EVENTS)):
        if path is None:
            continue
        path = Path(path)
        refused: list[Rejection] = []
        scope = TimeWindow(*window)
        if target == tables.OBJECTS:
            o_load = validate_objects(file_rows(path, OBJECT_COLUMNS, refused, window=scope), vocab,
                                      source=path.name, bounds=bounds)
            accepted, table, t = len(o_load.objects), objects_table(o_load, vocab, path.name), o_load.objects.t
            refused += o_load.rejections
        else:
            e_load = validate_events(file_rows(path, EVENT_COLUMNS, refused, window=scope), vocab,
                                     source=path.name, bounds=bounds, liveness=False)
            accepted, table, t = len(e_load.events), events_table(e_load, vocab, path.name), e_load.events.t
            refused += e_load.rejections
        # Rows whose t needed the full rules may lie outside the window: they land in theirs.
        rows[target] = table.filter(pa.array(scope.holds(t)))
        rejected += [(target, r) for r in sorted(refused, key=lambda r: r.line)]
        if accepted == 0 and refused and scope.skipped == 0:
            unusable.append(AllRowsRejected(path, len(refused), commonest_reasons(refused),
                                            note="the rejected rows are in the quarantine table"))
    if unusable:
        publish_rows(warehouse, rejected=rejected, run_id=run_id, who="dkm publish")
        raise unusable[0]
    report = publish_rows(warehouse, objects=rows.get(tables.OBJECTS), events=rows.get(tables.EVENTS),
                          rejected=rejected, run_id=run_id, who="dkm publish")
    return FilesPublished(window[0], window[1], report)
