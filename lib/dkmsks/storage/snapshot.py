"""What a map shows at a processed timestamp ``T``, read from the Delta logs without Spark.

A map draws each live subscription at its place with its exact kNN at ``T`` (the ball of
radius the k-th distance and a line to every result object) in the colour of the worker that
holds it, and the objects of the timestamps before ``T``. The results are those of
:func:`dkmsks.storage.export.results_as_of` — the newest ``knn_state`` version exact at or before
``T`` with the journal's result changes in ``(through_t, T]`` applied in order (docs/design.md
§1) — and the rest of a subscription comes from the same two reads and one more:

- **place, k and keywords** of a registration from before ``through_t``: its ``knn_state`` row;
  of one after it: its ``insert`` event in ``subscription_events`` (the registration is the
  subscription's newest ``insert`` change at or before ``T``, and a landed insertion is the
  only row of its id and timestamp: the publishers refuse a second one);
- **worker**: the worker of its last change at or before ``T`` (the journal's change records
  carry it), else its ``knn_state`` row's.

Many subscriptions (1M) do not fit one page, so a caller may name ``sub_ids``, a ``box`` and a
``limit``: the live subscriptions inside the box are counted, and ``limit`` of them are taken
in a fixed pseudo-random order of their ids (:func:`spread_order`), which spreads them over the
space and keeps the same ones from one ``T``, box or call to the next. The first pass reads
places only (``sub_id, x, y, worker``); the results and keywords are read for the chosen ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dkmsks.core.sets import member
from dkmsks.storage import tables
from dkmsks.storage.export import (
    _DELETE,
    _apply_changes,
    change_kinds,
    exact_base,
    last_change_rows,
)
from dkmsks.storage.lake import PREDICATE_IDS, Lake, where

#: A rectangle ``(xmin, ymin, xmax, ymax)``, bounds included.
Box = tuple[float, float, float, float]
_INSERT = 1  # change_kinds' rank of an insertion

#: The columns of :attr:`Snapshot.subscriptions`.
SNAPSHOT_COLUMNS = ("sub_id", "x", "y", "k", "keywords", "worker", "registered_t", "object_ids", "d2")


@dataclass(frozen=True)
class Snapshot:
    """The subscriptions a map shows at processed timestamp ``t`` (module doc)."""

    t: int
    total: int  # live subscriptions matching sub_ids and box, before the limit
    subscriptions: pa.Table  # SNAPSHOT_COLUMNS, ordered by sub_id


def spread_order(ids: np.ndarray) -> np.ndarray:
    """A fixed pseudo-random order of ``ids`` (indices), the same in every call: by the
    SplitMix64 mix of each id (Steele, Lea and Flood, "Fast splittable pseudorandom number
    generators", OOPSLA 2014), ties by id."""
    z = np.asarray(ids, dtype=np.int64).view(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return np.lexsort((np.asarray(ids, dtype=np.int64), z))


def _inside(x: np.ndarray, y: np.ndarray, box: Box | None) -> np.ndarray:
    if box is None:
        return np.ones(x.shape[0], dtype=bool)
    xmin, ymin, xmax, ymax = box
    return (x >= xmin) & (x <= xmax) & (y >= ymin) & (y <= ymax)


def subscriptions_as_of(lake: Lake, as_of: int | None = None, *, sub_ids: Sequence[int] | None = None,
                        box: Box | None = None, limit: int | None = None) -> Snapshot:
    """The live subscriptions at processed timestamp ``as_of`` (default: the last) with their
    place, ``k``, keywords, worker, registration timestamp and exact result (module doc);
    only ``sub_ids`` when given, only those inside ``box``, at most ``limit`` of them. A ``T``
    beyond the as-of horizon raises ValueError, as :func:`~dkmsks.storage.export.results_as_of`."""
    t, through, version = exact_base(lake, as_of)
    picked = None if sub_ids is None else sorted({int(s) for s in sub_ids})
    if picked is not None and not picked:
        return Snapshot(t, 0, _empty())

    # Pass 1: who is live at t, where, on which worker.
    state = lake.read(tables.STATE, columns=["sub_id", "x", "y", "worker"], version=version, sub_ids=picked)
    changes = lake.read(tables.JOURNAL, columns=["t", "sub_id", "change", "worker"],
                        predicate=where(record__eq="change", t__gt=through, t__le=t), sub_ids=picked)
    state_sub = np.asarray(state.column("sub_id").to_numpy(), dtype=np.int64)
    c_sub = np.asarray(changes.column("sub_id").to_numpy(), dtype=np.int64)
    c_t = np.asarray(changes.column("t").to_numpy(), dtype=np.int64)
    kind = change_kinds(changes.column("change")) if changes.num_rows else np.zeros(0, dtype=np.int64)
    c_worker = np.asarray(changes.column("worker").fill_null(-1).to_numpy(), dtype=np.int64)
    last = last_change_rows(c_sub, c_t, kind)
    live_changed = last[kind[last] != _DELETE]
    worker_of = dict(zip(c_sub[live_changed].tolist(), c_worker[live_changed].tolist(), strict=True))
    # A changed subscription's registration is its newest insertion at or before t, if any.
    inserted = np.flatnonzero(kind == _INSERT)
    newest = inserted[last_change_rows(c_sub[inserted], c_t[inserted], kind[inserted])]
    registered = {s: r for s, r in zip(c_sub[newest].tolist(), c_t[newest].tolist(), strict=True) if s in worker_of}
    events = _registrations(lake, through, t, np.fromiter(registered, dtype=np.int64, count=len(registered)))
    landed = {(int(i), int(r)): (float(a), float(b)) for i, r, a, b in zip(
        events.column("id").to_pylist(), events.column("t").to_pylist(), events.column("x").to_pylist(),
        events.column("y").to_pylist(), strict=True)}
    # Untouched since the snapshot, or registered before it: the snapshot's row holds the place.
    s_x = np.asarray(state.column("x").to_numpy(), dtype=np.float64)
    s_y = np.asarray(state.column("y").to_numpy(), dtype=np.float64)
    s_w = np.asarray(state.column("worker").fill_null(-1).to_numpy(), dtype=np.int64)
    keep = ~member(state_sub, c_sub[last]) | member(state_sub, np.fromiter(
        (s for s in worker_of if s not in registered), dtype=np.int64))
    s_w = np.fromiter((worker_of.get(s, w) for s, w in zip(state_sub.tolist(), s_w.tolist(), strict=True)),
                      dtype=np.int64, count=state_sub.shape[0])
    new = [(s, *landed[(s, r)]) for s, r in registered.items() if (s, r) in landed]
    sub = np.concatenate([state_sub[keep], np.array([n[0] for n in new], dtype=np.int64)])
    x = np.concatenate([s_x[keep], np.array([n[1] for n in new], dtype=np.float64)])
    y = np.concatenate([s_y[keep], np.array([n[2] for n in new], dtype=np.float64)])
    worker = np.concatenate([s_w[keep], np.array([worker_of[n[0]] for n in new], dtype=np.int64)])

    inside = _inside(x, y, box)
    sub, x, y, worker = sub[inside], x[inside], y[inside], worker[inside]
    total = int(sub.shape[0])
    if limit is not None and total > limit:
        keep = spread_order(sub)[:limit]
        sub, x, y, worker = sub[keep], x[keep], y[keep], worker[keep]
    by_id = np.argsort(sub, kind="stable")
    sub, x, y, worker = sub[by_id], x[by_id], y[by_id], worker[by_id]
    if not sub.shape[0]:
        return Snapshot(t, total, _empty())

    # Pass 2: the chosen ones' results, k, keywords and registration timestamps.
    chosen = sub.tolist()
    rows = lake.read(tables.STATE, columns=["sub_id", "k", "keywords", "registered_t", "object_ids", "d2"],
                     version=version, sub_ids=chosen)
    full_changes = lake.read(tables.JOURNAL, columns=["t", "sub_id", "change", "object_ids", "d2"],
                             predicate=where(record__eq="change", t__gt=through, t__le=t), sub_ids=chosen)
    results = _apply_changes(rows.select(["sub_id", "object_ids", "d2"]), full_changes)
    results = results.filter(pc.is_in(results.column("sub_id"), value_set=pa.array(sub)))
    attrs: dict[int, tuple[int, list[str], int]] = {}
    for r in rows.select(["sub_id", "k", "keywords", "registered_t"]).to_pylist():
        attrs[int(r["sub_id"])] = (int(r["k"]), sorted(r["keywords"] or []), int(r["registered_t"]))
    for r in events.select(["id", "k", "keywords", "t"]).to_pylist():
        if registered.get(int(r["id"])) == int(r["t"]):
            attrs[int(r["id"])] = (int(r["k"]), sorted(r["keywords"] or []), int(r["t"]))
    r_sub = np.asarray(results.column("sub_id").to_numpy(), dtype=np.int64)
    if not np.array_equal(r_sub, sub):
        raise RuntimeError(f"the snapshot at t={t} lost track of subscriptions "
                           f"{sorted(set(sub.tolist()) ^ set(r_sub.tolist()))[:5]}")
    table = pa.table({
        "sub_id": pa.array(sub, pa.int64()), "x": pa.array(x, pa.float64()), "y": pa.array(y, pa.float64()),
        "k": pa.array([attrs[s][0] for s in chosen], pa.int32()),
        "keywords": pa.array([attrs[s][1] for s in chosen], pa.list_(pa.string())),
        "worker": pa.array(worker, pa.int32()),
        "registered_t": pa.array([attrs[s][2] for s in chosen], pa.int64()),
        "object_ids": results.column("object_ids"), "d2": results.column("d2"),
    })
    return Snapshot(t, total, table)


def _registrations(lake: Lake, after: int, through: int, ids: np.ndarray) -> pa.Table:
    """The landed insertions of ``ids`` in ``(after, through]`` (``id, x, y, k, keywords, t``),
    ordered by ``(id, t)``."""
    columns = ["id", "x", "y", "k", "keywords", "t"]
    if not ids.shape[0]:
        return pa.table({c: pa.array([], type=_EVENT_TYPES[c]) for c in columns})
    wanted = sorted({int(i) for i in ids})
    predicate = where(op__eq="insert", t__gt=after, t__le=through)
    if len(wanted) <= PREDICATE_IDS:
        predicate = f"{predicate} AND {where(id__in=wanted)}"
    rows = lake.read(tables.EVENTS, columns=columns, predicate=predicate)
    rows = rows.filter(pc.is_in(rows.column("id"), value_set=pa.array(wanted, pa.int64())))
    return rows.sort_by([("id", "ascending"), ("t", "ascending")])


_EVENT_TYPES = {"id": pa.int64(), "x": pa.float64(), "y": pa.float64(), "k": pa.int32(),
                "keywords": pa.list_(pa.string()), "t": pa.int64()}


def _empty() -> pa.Table:
    types = {"sub_id": pa.int64(), "x": pa.float64(), "y": pa.float64(), "k": pa.int32(),
             "keywords": pa.list_(pa.string()), "worker": pa.int32(), "registered_t": pa.int64(),
             "object_ids": pa.list_(pa.int64()), "d2": pa.list_(pa.float64())}
    return pa.table({c: pa.array([], type=types[c]) for c in SNAPSHOT_COLUMNS})


# --------------------------------------------------------------------------- objects

#: The columns of the objects a map reads.
OBJECT_COLUMNS = ["id", "x", "y", "keywords", "t"]


def objects_between(lake: Lake, after: int, through: int, *, box: Box | None = None,
                    limit: int | None = None) -> tuple[pa.Table, int]:
    """The landed objects with ``after < t <= through`` (inside ``box``), at most ``limit`` of
    them, the newest timestamps first kept; ordered by ``(t, id)``; and how many matched."""
    rows = lake.read(tables.OBJECTS, columns=OBJECT_COLUMNS, predicate=where(t__gt=after, t__le=through))
    if box is not None:
        x = np.asarray(rows.column("x").to_numpy(), dtype=np.float64)
        y = np.asarray(rows.column("y").to_numpy(), dtype=np.float64)
        rows = rows.filter(pa.array(_inside(x, y, box)))
    total = rows.num_rows
    rows = rows.sort_by([("t", "descending"), ("id", "ascending")])
    if limit is not None and total > limit:
        rows = rows.slice(0, limit)
    return rows.sort_by([("t", "ascending"), ("id", "ascending")]), total


def objects_by_id(lake: Lake, ids: Sequence[int], *, through: int | None = None) -> pa.Table:
    """The landed objects of ``ids`` with ``t <= through`` (default: any), ordered by id
    (ids not found are left out). Up to :data:`~dkmsks.storage.lake.PREDICATE_IDS` ids go into
    the scan's predicate; more are found by reading the id column whole and the rest of the
    matching rows after."""
    wanted = sorted({int(i) for i in ids})
    if not wanted:
        return pa.table({c: pa.array([], type=_EVENT_TYPES[c]) for c in OBJECT_COLUMNS})
    value_set = pa.array(wanted, pa.int64())
    if len(wanted) <= PREDICATE_IDS:
        rows = lake.read(tables.OBJECTS, columns=OBJECT_COLUMNS,
                         predicate=" AND ".join(p for p in (where(t__le=through), where(id__in=wanted)) if p))
    else:
        rows = lake.read(tables.OBJECTS, columns=OBJECT_COLUMNS, predicate=where(t__le=through))
    rows = rows.filter(pc.is_in(rows.column("id"), value_set=value_set))
    return rows.sort_by("id")
