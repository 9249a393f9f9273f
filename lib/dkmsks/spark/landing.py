"""Landing new objects and subscription events while the pipeline runs (docs/design.md §10).

Publishers (``dkm publish``, ``dkm subscribe``, the client, the ingest DAG) and the pipeline
(micro-batches, follow mode) meet at the landing tables. Two rules keep a live warehouse exact:

1. **A timestamp lands whole.** A publisher appends a batch — objects and events, several
   timestamps at once if it likes — under the warehouse's *landing lock*, and the pipeline reads
   the pending rows under the same lock (:func:`take_pending`), so it never sees half of a
   publish (the objects of a timestamp without its events, say).
2. **A taken timestamp is sealed.** When a run reads the pending timestamps it records, still
   under the lock, the newest one it took (:func:`sealed_through`). A row for a sealed (or
   processed) timestamp would never be applied, so it is refused with its reason and
   quarantined — never lost silently. Publishers that do not care which timestamp they get
   ask for :func:`next_open_timestamp`.

The lock is an ``flock`` (:mod:`dkmsks.spark.writer_lock`), held for milliseconds: a publish
is a delta-rs append (no Spark application), a take is a delta-rs read. A run that dies after
sealing loses nothing: the next run takes the same pending timestamps again (they are after
the last processed one), and the seal only moves forward.

:func:`publish_rows` is the Spark-free publisher: rows already validated row by row
(:mod:`dkmsks.io.formats`) are checked against the warehouse — sealed timestamps, object ids
landed before with other values — and appended idempotently: a row identical to a landed one
(an object by ``id``, an event by ``(id, t, op)``, as the Spark ingestion's MERGEs) is a replay
and skipped, so publishing a batch twice changes nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dkmsks.spark import driver_data, tables
from dkmsks.spark.journal import last_processed
from dkmsks.spark.lake import Lake, where
from dkmsks.spark.writer_lock import file_lock
from dkmsks.warehouse import Warehouse

if TYPE_CHECKING:
    from dkmsks.core.model import Objects, SubscriptionEvents, Vocabulary

#: Columns of the landing tables as publishers give them (``keywords``: list<string>).
OBJECT_FIELDS = ("id", "x", "y", "keywords", "t", "source", "line")
EVENT_FIELDS = ("op", "id", "x", "y", "keywords", "k", "t", "source", "line")


def landing_lock(warehouse: Warehouse, who: str, *, timeout: float | None = None):
    """Hold the landing lock of ``warehouse``'s database for the block (milliseconds)."""
    return file_lock(warehouse.landing_lock_path, who, timeout=timeout)


def sealed_through(warehouse: Warehouse, lake: Lake | None = None) -> int | None:
    """The newest timestamp no publisher may add rows to: the last one a run took or the
    ledger's last processed one, whichever is newer (None before the first partitioning)."""
    marks = []
    if warehouse.seal_path.is_file():
        text = warehouse.seal_path.read_text(encoding="utf-8").strip()
        if text:
            marks.append(int(text))
    processed = last_processed(lake or Lake.of(warehouse))
    if processed is not None:
        marks.append(processed)
    return max(marks) if marks else None


def _seal(warehouse: Warehouse, t: int) -> None:
    """Record that runs took every timestamp up to ``t`` (atomically; only forward)."""
    current = sealed_through(warehouse)
    if current is not None and current >= t:
        return
    path = warehouse.seal_path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(f"{int(t)}\n", encoding="utf-8")
    os.replace(tmp, path)


def next_open_timestamp(warehouse: Warehouse, lake: Lake | None = None) -> int:
    """The first timestamp a publisher can still add rows to."""
    sealed = sealed_through(warehouse, lake)
    if sealed is None:
        raise ValueError(f"{warehouse}: no partition plan yet, so no stream timestamp is open: "
                         "ingest O_init and partition first (dkm run, or the DAGs)")
    return sealed + 1


@dataclass
class Pending:
    """What a run took: its timestamps and their objects and events, in stream order."""

    timestamps: list[int]
    objects: Objects
    events: SubscriptionEvents


def take_pending(warehouse: Warehouse, lake: Lake, vocab: Vocabulary, *, after: int, until: int | None = None,
                 max_timestamps: int | None = None, who: str = "a run") -> Pending:
    """The pending timestamps after ``after`` (up to ``until``, at most ``max_timestamps``) with
    their rows, read under the landing lock and sealed (module doc, rules 1 and 2)."""
    with landing_lock(warehouse, f"{who} (taking pending timestamps)"):
        ts = driver_data.pending_timestamps(lake, after, until)
        if max_timestamps is not None:
            ts = ts[:max_timestamps]
        upto = ts[-1] if ts else after
        objects = driver_data.read_objects_between(lake, vocab, after=after, upto=upto)
        events = driver_data.read_events_between(lake, vocab, after=after, upto=upto)
        if ts:
            _seal(warehouse, ts[-1])
    return Pending(ts, objects, events)


@dataclass
class PublishReport:
    objects: int = 0  # rows appended
    events: int = 0
    replayed: int = 0  # rows identical to landed ones, skipped
    quarantined: int = 0
    first_t: int | None = None
    last_t: int | None = None


def _conform(rows: pa.Table | None, fields: tuple[str, ...]) -> pa.Table | None:
    if rows is None or rows.num_rows == 0:
        return None
    missing = [f for f in fields if f not in rows.column_names]
    if missing:
        raise ValueError(f"rows to publish lack columns {missing}")
    return rows.select(list(fields))


def publish_rows(warehouse: Warehouse, *, objects: pa.Table | None = None, events: pa.Table | None = None,
                 run_id: str = "publish", who: str = "a publisher") -> PublishReport:
    """Append validated rows (columns :data:`OBJECT_FIELDS` / :data:`EVENT_FIELDS`) to the
    landing tables in one step under the landing lock (module doc).

    Rows for sealed timestamps, and objects whose id landed before with other values, are
    quarantined with the reason; rows identical to landed ones are skipped as replays.
    """
    lake = Lake.of(warehouse)
    objects, events = _conform(objects, OBJECT_FIELDS), _conform(events, EVENT_FIELDS)
    report = PublishReport()
    refused: list[pa.Table] = []
    with landing_lock(warehouse, who):
        sealed = sealed_through(warehouse, lake)
        if sealed is None:
            raise ValueError(f"{warehouse}: no partition plan yet: publish the initial phase (O_init and the "
                             "initial subscriptions) with dkm run or the ingest DAG, then partition")
        if objects is not None:
            objects, late = _split_late(objects, sealed)
            refused.append(_quarantine_rows(late, tables.OBJECTS, [_late_reason(t, sealed) for t in
                                                                  late.column("t").to_pylist()], run_id))
            objects, replays, clashes = _new_objects(lake, objects)
            report.replayed += replays
            refused.append(_quarantine_rows(clashes, tables.OBJECTS, [
                f"object id {i} landed before with other values" for i in clashes.column("id").to_pylist()], run_id))
        if events is not None:
            events, late = _split_late(events, sealed)
            refused.append(_quarantine_rows(late, tables.EVENTS, [_late_reason(t, sealed) for t in
                                                                 late.column("t").to_pylist()], run_id))
            events, replays = _new_events(lake, events)
            report.replayed += replays
        quarantine = [q for q in refused if q is not None and q.num_rows]
        if quarantine:
            rows = _new_quarantine(lake, pa.concat_tables(quarantine))
            if rows.num_rows:
                lake.append(tables.QUARANTINE, rows)
            report.quarantined = sum(q.num_rows for q in quarantine)
        # Objects before events: a reader taking pending rows holds the lock, so the order
        # only matters to a crash between the two appends, after which a replay completes it.
        for name, rows in ((tables.OBJECTS, objects), (tables.EVENTS, events)):
            if rows is not None and rows.num_rows:
                lake.append(name, rows)
    for rows, attr in ((objects, "objects"), (events, "events")):
        if rows is not None and rows.num_rows:
            setattr(report, attr, rows.num_rows)
            t = rows.column("t")
            lo, hi = int(pc.min(t).as_py()), int(pc.max(t).as_py())
            report.first_t = lo if report.first_t is None else min(report.first_t, lo)
            report.last_t = hi if report.last_t is None else max(report.last_t, hi)
    return report


def _late_reason(t: int, sealed: int) -> str:
    return (f"timestamp {t} is closed: the pipeline has taken every timestamp up to {sealed}; "
            f"publish at t > {sealed}")


def _split_late(rows: pa.Table, sealed: int) -> tuple[pa.Table, pa.Table]:
    late = pc.less_equal(rows.column("t"), sealed)
    return rows.filter(pc.invert(late)), rows.filter(late)


def _quarantine_rows(rows: pa.Table, target: str, reasons: list[str], run_id: str) -> pa.Table | None:
    if rows.num_rows == 0:
        return None
    text = [f"id {i}, t {t}" for i, t in zip(rows.column("id").to_pylist(), rows.column("t").to_pylist(), strict=True)]
    n = rows.num_rows
    return pa.table({
        "target": pa.array([target] * n), "source": pc.fill_null(rows.column("source"), "publish"),
        "line": pc.fill_null(rows.column("line"), 0), "reason": pa.array(reasons), "text": pa.array(text),
        "run_id": pa.array([run_id] * n),
    })


def _new_quarantine(lake: Lake, rows: pa.Table) -> pa.Table:
    """Rows not recorded yet (the Spark ingestion's MERGE key: target, source, line, reason)."""
    landed = lake.read(tables.QUARANTINE, columns=["target", "source", "line", "reason"])
    if landed.num_rows == 0:
        return rows
    keys = set(zip(*(landed.column(c).to_pylist() for c in ("target", "source", "line", "reason")), strict=True))
    keep = [k not in keys for k in zip(*(rows.column(c).to_pylist() for c in ("target", "source", "line", "reason")),
                                       strict=True)]
    return rows.filter(pa.array(keep))


def _new_objects(lake: Lake, rows: pa.Table) -> tuple[pa.Table, int, pa.Table]:
    """``(new rows, replayed rows, rows whose id landed before with other values)``."""
    ids = np.asarray(rows.column("id").to_numpy(), dtype=np.int64)
    landed = lake.read(tables.OBJECTS, columns=["id", "x", "y", "t"])
    if landed.num_rows == 0:
        return rows, 0, rows.slice(0, 0)
    landed_ids = np.asarray(landed.column("id").to_numpy(), dtype=np.int64)
    seen = np.isin(ids, landed_ids)
    if not seen.any():
        return rows, 0, rows.slice(0, 0)
    order = np.argsort(landed_ids)
    pos = order[np.searchsorted(landed_ids, ids[seen], sorter=order)]
    same = np.ones(int(seen.sum()), dtype=bool)
    for name in ("x", "y", "t"):
        mine = np.asarray(rows.column(name).to_numpy(zero_copy_only=False))[seen]
        theirs = np.asarray(landed.column(name).to_numpy(zero_copy_only=False))[pos]
        same &= mine == theirs
    seen_rows = np.flatnonzero(seen)
    clash = np.zeros(rows.num_rows, dtype=bool)
    clash[seen_rows[~same]] = True
    return rows.filter(pa.array(~seen)), int(same.sum()), rows.filter(pa.array(clash))


def _new_events(lake: Lake, rows: pa.Table) -> tuple[pa.Table, int]:
    """``(new rows, replayed rows)``: an event is identified by ``(id, t, op)``."""
    t = rows.column("t")
    landed = lake.read(tables.EVENTS, columns=["id", "t", "op"],
                       predicate=where(t__ge=int(pc.min(t).as_py()), t__le=int(pc.max(t).as_py())))
    if landed.num_rows == 0:
        return rows, 0
    keys = set(zip(landed.column("id").to_pylist(), landed.column("t").to_pylist(), landed.column("op").to_pylist(),
                   strict=True))
    fresh = [k not in keys for k in zip(rows.column("id").to_pylist(), rows.column("t").to_pylist(),
                                        rows.column("op").to_pylist(), strict=True)]
    return rows.filter(pa.array(fresh)), len(fresh) - sum(fresh)
