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

The lock is an ``flock`` (:mod:`dkmsks.storage.writer_lock`), held for milliseconds: a publish
is a delta-rs append (no Spark application), a take is a delta-rs read. On object storage it
is a short lease (:mod:`dkmsks.storage.leases`, ``DKMSKS_LANDING_LEASE_SECONDS``) renewed
right before each append, and the seal is an object beside it. A run that dies after
sealing loses nothing: the next run takes the same pending timestamps again (they are after
the last processed one), and the seal only moves forward.

:func:`publish_rows` is the Spark-free publisher: rows already validated row by row
(:mod:`dkmsks.io.formats`) are checked against the warehouse — sealed timestamps, object ids
landed before with other values, subscriptions that are not live (or are) — and appended
idempotently: a row identical to a landed one is a replay and skipped, so publishing a batch
twice changes nothing, also after the pipeline took its timestamp. Refused rows are
quarantined in the same step, or, for an interactive caller, refuse the whole batch.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dkmsks.core.model import Op
from dkmsks.core.sets import in_any_sorted
from dkmsks.io.formats import EVENT_COLUMNS, OBJECT_COLUMNS, replay_liveness
from dkmsks.io.rejections import TEXT_LIMIT, InputError, Reason, Rejection
from dkmsks.storage import driver_data, tables
from dkmsks.storage.journal import last_processed
from dkmsks.storage.lake import Lake, where
from dkmsks.storage.writer_lock import check_lease, file_lock, lease_lock
from dkmsks.warehouse import Warehouse

if TYPE_CHECKING:
    from dkmsks.core.model import Objects, SubscriptionEvents, Vocabulary

#: Columns of the landing tables as publishers give them (``keywords``: list<string>).
OBJECT_FIELDS = ("id", "x", "y", "keywords", "t", "source", "line")
EVENT_FIELDS = ("op", "id", "x", "y", "keywords", "k", "t", "source", "line")
#: The source of refused rows that came without one.
PUBLISH_SOURCE = "publish"


def landing_lock(warehouse: Warehouse, who: str, *, timeout: float | None = None):
    """Hold the landing lock of ``warehouse``'s database for the block (milliseconds)."""
    if warehouse.is_local:
        return file_lock(warehouse.landing_lock_path, who, timeout=timeout)
    return lease_lock(warehouse, "landing.lock", who, timeout=timeout)


def _read_seal(warehouse: Warehouse) -> int | None:
    if warehouse.location is None:
        if not warehouse.seal_path.is_file():
            return None
        text = warehouse.seal_path.read_text(encoding="utf-8").strip()
    else:
        from dkmsks.storage.objectstore import ObjectStore

        got = ObjectStore.of(warehouse.location).get(warehouse.lock_key("sealed"))
        text = got[0].decode("utf-8").strip() if got is not None else ""
    return int(text) if text else None


def sealed_through(warehouse: Warehouse, lake: Lake | None = None) -> int | None:
    """The newest timestamp no publisher may add rows to: the last one a run took or the
    ledger's last processed one, whichever is newer (None before the first partitioning)."""
    marks = []
    if (seal := _read_seal(warehouse)) is not None:
        marks.append(seal)
    processed = last_processed(lake or Lake.of(warehouse))
    if processed is not None:
        marks.append(processed)
    return max(marks) if marks else None


def _seal(warehouse: Warehouse, t: int) -> None:
    """Record that runs took every timestamp up to ``t`` (atomically; only forward)."""
    current = sealed_through(warehouse)
    if current is not None and current >= t:
        return
    if warehouse.location is not None:
        from dkmsks.storage.objectstore import ObjectStore

        ObjectStore.of(warehouse.location).put(warehouse.lock_key("sealed"), f"{int(t)}\n".encode())
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
    """What :func:`publish_rows` did with a batch."""

    objects: int = 0  # rows appended
    events: int = 0
    replayed: int = 0  # rows identical to landed ones, skipped
    quarantined: int = 0  # refused rows recorded in quarantine by this call (new records only)
    first_t: int | None = None  # timestamps of the appended rows
    last_t: int | None = None
    #: Every row refused, by row validation or against the warehouse: ``(target table, rejection)``.
    refused: list[tuple[str, Rejection]] = field(default_factory=list)


class RefusedRows(InputError):
    """A strict publish (:func:`publish_rows` with ``strict=True``) refused rows; nothing was
    written. ``refused`` holds ``(target table, rejection)`` per refused row."""

    def __init__(self, refused: list[tuple[str, Rejection]]) -> None:
        self.refused = refused
        super().__init__("; ".join(r.reason for _, r in refused))

    @property
    def closed_only(self) -> bool:
        """Every refusal is a closed timestamp (a caller that chose no ``t`` may retry later)."""
        return all(r.reason.startswith(_CLOSED_PREFIX) for _, r in self.refused)


def publish_rows(warehouse: Warehouse, *, objects: pa.Table | None = None, events: pa.Table | None = None,
                 rejected: Sequence[tuple[str, Rejection]] = (), run_id: str = "publish",
                 who: str = "a publisher", strict: bool = False,
                 interactive: Collection[str] = ()) -> PublishReport:
    """Append rows that passed row validation (:mod:`dkmsks.io.formats`; columns
    :data:`OBJECT_FIELDS` / :data:`EVENT_FIELDS`) to the landing tables in one step under the
    landing lock (module doc).

    Checked against the warehouse, as the Spark ingestion does, and refused with the reason:
    a row for a sealed timestamp; an object whose id landed before with other values; a delete
    of a subscription that is not live or an insert of one that is (the current state, then
    the landed events not processed yet, then the batch, in replay order). A row identical to
    a landed one (an object by all its values, an event by ``(id, t, op)`` and its values) is
    a replay and skipped, so publishing a batch twice changes nothing and commits nothing.

    Refused rows — those given in ``rejected`` (refused by row validation, with their source
    and line) and those refused here — are quarantined in the same step, each line once (a
    line keeps its first verdict, as in the Spark ingestion). With ``strict=True`` a refusal
    writes nothing at all and raises :class:`RefusedRows` instead: for interactive callers
    (``dkm subscribe``, the client) that want an error, not a quarantine record. Rows of the
    sources in ``interactive`` are refused the same way but alone: they are reported, not
    quarantined, and the rest lands (the service's grouped subscribes, each answered with its
    own error).
    """
    objects, events = _conform(objects, OBJECT_FIELDS), _conform(events, EVENT_FIELDS)
    report = PublishReport(refused=list(rejected))
    if strict and report.refused:
        raise RefusedRows(report.refused)
    lake = Lake.of(warehouse)
    with landing_lock(warehouse, who):
        sealed = sealed_through(warehouse, lake)
        if sealed is None:
            raise ValueError(f"{warehouse}: no partition plan yet: publish the initial phase (O_init and the "
                             "initial subscriptions) with dkm run or the ingest DAG, then partition")
        if objects is not None:
            objects, replays, refusals = _check_objects(lake, objects, sealed)
            report.replayed += replays
            report.refused += [(tables.OBJECTS, r) for r in refusals]
        if events is not None:
            events, replays, refusals = _check_events(lake, events, sealed)
            report.replayed += replays
            report.refused += [(tables.EVENTS, r) for r in refusals]
        if strict and report.refused:
            raise RefusedRows(report.refused)
        recorded = [(target, r) for target, r in report.refused if r.source not in interactive]
        if recorded:
            rows = _new_quarantine(lake, _quarantine_rows(recorded, run_id))
            if rows.num_rows:
                lake.append(tables.QUARANTINE, rows)
            report.quarantined = rows.num_rows
        # Objects before events: a reader taking pending rows holds the lock, so the order
        # only matters to a crash between the two appends, after which a replay completes it.
        for name, rows in ((tables.OBJECTS, objects), (tables.EVENTS, events)):
            if rows is not None and rows.num_rows:
                # On object storage: renew the landing lease first, so that a publisher stopped
                # past its lease does not append after a run took its timestamp.
                check_lease(warehouse, "landing.lock")
                lake.append(name, rows)
    for rows, attr in ((objects, "objects"), (events, "events")):
        if rows is not None and rows.num_rows:
            setattr(report, attr, rows.num_rows)
            t = rows.column("t")
            lo, hi = int(pc.min(t).as_py()), int(pc.max(t).as_py())
            report.first_t = lo if report.first_t is None else min(report.first_t, lo)
            report.last_t = hi if report.last_t is None else max(report.last_t, hi)
    return report


_CLOSED_PREFIX = "timestamp "


def _closed_reason(t: int, sealed: int) -> str:
    return (f"{_CLOSED_PREFIX}{t} is closed: the pipeline has taken every timestamp up to {sealed}; "
            f"publish at t > {sealed}")


def _conform(rows: pa.Table | None, fields: tuple[str, ...]) -> pa.Table | None:
    """The landing columns of ``rows``, keywords as sorted distinct lists (how every writer
    stores them, so that a replay compares equal)."""
    if rows is None or rows.num_rows == 0:
        return None
    missing = [f for f in fields if f not in rows.column_names and f not in ("source", "line")]
    if missing:
        raise ValueError(f"rows to publish lack columns {missing}")
    columns = {f: rows.column(f) if f in rows.column_names else pa.nulls(rows.num_rows) for f in fields}
    keywords = [None if k is None else sorted(set(k)) for k in columns["keywords"].to_pylist()]
    columns["keywords"] = pa.array(keywords, type=pa.list_(pa.string()))
    table = pa.table(columns)
    return table.cast(pa.schema([pa.field(f, _LANDING_TYPES[f]) for f in fields]))


_LANDING_TYPES = {"op": pa.string(), "id": pa.int64(), "x": pa.float64(), "y": pa.float64(),
                  "keywords": pa.list_(pa.string()), "k": pa.int32(), "t": pa.int64(), "source": pa.string(),
                  "line": pa.int64()}


def _ints(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return np.asarray(column.to_numpy(), dtype=np.int64)


def _rejections(rows: pa.Table, reasons: list[str]) -> list[Rejection]:
    """``rows`` refused for ``reasons``, each with its source, line and the row as text."""
    out = []
    for row, reason in zip(rows.to_pylist(), reasons, strict=True):
        fields = [row.get(c) for c in (EVENT_COLUMNS if "op" in row else OBJECT_COLUMNS)]
        text = "\t".join("" if v is None else " ".join(v) if isinstance(v, list) else str(v) for v in fields)
        out.append(Rejection(row["source"] or PUBLISH_SOURCE, row["line"] or 0, reason, text[:TEXT_LIMIT]))
    return out


def _check_objects(lake: Lake, rows: pa.Table, sealed: int) -> tuple[pa.Table, int, list[Rejection]]:
    """``(rows to append, replayed rows, refusals)`` of a batch of objects (:func:`publish_rows`)."""
    ids = _ints(rows.column("id"))
    replay = np.zeros(rows.num_rows, dtype=bool)
    refuse: dict[int, str] = {}
    # The landed ids, sorted, read file by file once per process (Lake.sorted_values): object
    # ids are not ordered by time, so a batch's id range spans every landed file's.
    seen = np.flatnonzero(in_any_sorted(ids, lake.sorted_values(tables.OBJECTS, "id")))
    if seen.size:
        wanted = ids[seen]
        prior = lake.read(tables.OBJECTS, columns=["id", "x", "y", "keywords", "t", "source", "line"],
                          predicate=where(id__ge=int(wanted.min()), id__le=int(wanted.max())))
        prior = prior.filter(pc.is_in(prior.column("id"), value_set=pa.array(wanted)))
        by_id = {r["id"]: r for r in prior.to_pylist()}
        mine = rows.take(pa.array(seen)).to_pylist()
        for r, row in zip(seen.tolist(), mine, strict=True):
            old = by_id[row["id"]]
            if all(row[c] == old[c] for c in ("x", "y", "t")) and sorted(set(old["keywords"])) == row["keywords"]:
                replay[r] = True
            else:
                refuse[r] = Reason.ALREADY_INGESTED % (row["id"], old["source"] or PUBLISH_SOURCE, old["line"] or 0)
    t = _ints(rows.column("t"))
    for r in np.flatnonzero((t <= sealed) & ~replay).tolist():
        refuse.setdefault(r, _closed_reason(int(t[r]), sealed))
    # A repeat within the batch (validated rows have none; a caller's table may).
    _, first = np.unique(ids, return_index=True)
    if first.shape[0] < ids.shape[0]:
        lines = rows.column("line").to_pylist()
        first_of = dict(zip(ids[first].tolist(), first.tolist(), strict=True))
        for r in np.setdiff1d(np.arange(ids.shape[0]), first).tolist():
            refuse.setdefault(r, Reason.DUPLICATE_ID % (ids[r], lines[first_of[int(ids[r])]] or 0))
    return _split(rows, replay, refuse)


def _check_events(lake: Lake, rows: pa.Table, sealed: int) -> tuple[pa.Table, int, list[Rejection]]:
    """``(rows to append, replayed rows, refusals)`` of a batch of events (:func:`publish_rows`)."""
    t = _ints(rows.column("t"))
    landed = lake.read(tables.EVENTS, columns=["op", "id", "x", "y", "keywords", "k", "t"],
                       predicate=where(t__ge=int(t.min()), t__le=int(t.max())))
    known = {(r["id"], r["t"], r["op"]): r for r in landed.to_pylist()} if landed.num_rows else {}
    replay = np.zeros(rows.num_rows, dtype=bool)
    refuse: dict[int, str] = {}
    for r, row in enumerate(rows.to_pylist()):
        old = known.get((row["id"], row["t"], row["op"]))
        if old is not None and all(row[c] == old[c] for c in ("x", "y", "k")) \
                and (old["keywords"] is None) == (row["keywords"] is None) \
                and sorted(set(old["keywords"] or ())) == (row["keywords"] or []):
            replay[r] = True
        elif row["t"] <= sealed:
            refuse[r] = _closed_reason(row["t"], sealed)
    fresh = np.flatnonzero(~replay & ~np.isin(np.arange(rows.num_rows), list(refuse)))
    if fresh.size:
        batch = rows.take(pa.array(fresh))
        for r, reason in _liveness(lake, batch).items():
            refuse[int(fresh[r])] = reason
    return _split(rows, replay, refuse)


def _liveness(lake: Lake, batch: pa.Table) -> dict[int, str]:
    """Liveness refusals of ``batch`` (rows by position): the live subscriptions of the
    current state, then the landed events not processed yet, then the batch, in replay order
    (:func:`dkmsks.io.formats.replay_liveness`). Only the batch's ids are followed."""
    from dkmsks.storage.plans import current_plan
    from dkmsks.storage.state_io import StateView

    ids = _ints(batch.column("id"))
    wanted = pa.array(np.unique(ids))
    info = current_plan(lake)
    view = StateView.open(lake, fallback_plan=None if info is None else info.plan_version)
    live = view.live_among(ids)
    # Processed as of the journal version the state was read at: events after it are pending.
    processed = last_processed(lake, view.journal_version)
    pending = lake.read(tables.EVENTS, columns=["op", "id", "t"], predicate=where(t__gt=processed))
    pending = pending.filter(pc.is_in(pending.column("id"), value_set=wanted))
    # Landed events first within a (t, op): they happened before the batch arrived.
    op = np.concatenate([_ops(pending.column("op")), _ops(batch.column("op"))])
    sid = np.concatenate([_ints(pending.column("id")), ids])
    t = np.concatenate([_ints(pending.column("t")), _ints(batch.column("t"))])
    judged = np.arange(op.shape[0]) >= pending.num_rows
    _, refused = replay_liveness(op, sid, t, judged=judged, live=live.tolist())
    return {r - pending.num_rows: reason for r, reason in refused.items()}


def _ops(column: pa.ChunkedArray) -> np.ndarray:
    is_delete = np.asarray(pc.equal(column, "delete").to_numpy(zero_copy_only=False), dtype=bool)
    return np.where(is_delete, Op.DELETE, Op.INSERT).astype(np.int8)


def _split(rows: pa.Table, replay: np.ndarray, refuse: dict[int, str]) -> tuple[pa.Table, int, list[Rejection]]:
    refused = np.zeros(rows.num_rows, dtype=bool)
    refused[list(refuse)] = True
    order = sorted(refuse)
    refusals = _rejections(rows.take(pa.array(order, type=pa.int64())), [refuse[r] for r in order])
    return rows.filter(pa.array(~replay & ~refused)), int(replay.sum()), refusals


def _quarantine_rows(refused: list[tuple[str, Rejection]], run_id: str) -> pa.Table:
    n = len(refused)
    return pa.table({
        "target": pa.array([target for target, _ in refused], pa.string()),
        "source": pa.array([r.source for _, r in refused], pa.string()),
        "line": pa.array([r.line for _, r in refused], pa.int64()),
        "reason": pa.array([r.reason for _, r in refused], pa.string()),
        "text": pa.array([r.text for _, r in refused], pa.string()),
        "run_id": pa.array([run_id] * n, pa.string()),
    })


def _new_quarantine(lake: Lake, rows: pa.Table) -> pa.Table:
    """Rows whose line has no verdict yet: a line keeps its first one (the Spark ingestion's
    rule, key ``(target, source, line)``), so reading a file again records nothing twice."""
    landed = lake.read(tables.QUARANTINE, columns=["target", "source", "line"])
    keys = set(zip(*(landed.column(c).to_pylist() for c in ("target", "source", "line")), strict=True))
    keep, mine = [], set()
    for key in zip(*(rows.column(c).to_pylist() for c in ("target", "source", "line")), strict=True):
        keep.append(key not in keys and key not in mine)
        mine.add(key)
    return rows.filter(pa.array(keep, type=pa.bool_()))
