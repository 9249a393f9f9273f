"""The per-timestamp protocol, written once for the in-memory engine and the Spark path.

Within a timestamp ``t`` (docs/design.md §1): subscription deletions, then insertions, then objects.
The work splits between the main server and the workers (docs/design.md §4):

1. :func:`route_timestamp` (:func:`route_deletions`, :func:`route_insertions`) — the main server
   forgets the deleted subscriptions (subtracting their costs from ``C(w)``) and names the worker
   holding each, then assigns every new subscription to a worker with its method's cost model
   (paper §3, §4 "Dealing with new subscriptions");
2. :func:`remove_deletions`, :func:`add_insertions` (:func:`deletions_by_worker`,
   :func:`insertions_by_worker` for all workers at once) — each worker drops the deletions it holds and
   registers its new subscriptions with an empty result (a new subscription sees objects from
   ``t`` on);
3. the workers update the exact kNN of their subscriptions with the new objects
   (:class:`~dkmsks.core.update.Worker`);
4. under ``new_cost = live`` the main server re-costs the new subscriptions whose balls shrank,
   from the squared radii the workers report (:func:`ragged_ball_radius2`).

:class:`~dkmsks.core.engine.Engine` runs the four steps in one process;
:mod:`dkmsks.spark.main_server` runs 1 and 4 on the driver and :mod:`dkmsks.spark.bridge` runs
2 and 3 in one Spark task per worker.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from dkmsks.core.model import Float64Array, Int32Array, Int64Array, Subscriptions

__all__ = ["RoutedDeletions", "RoutedInsertions", "RoutedTimestamp", "route_deletions", "route_insertions",
           "route_timestamp", "remove_deletions", "add_insertions", "deletions_by_worker",
           "insertions_by_worker", "ragged_ball_radius2"]


@dataclass(frozen=True)
class RoutedDeletions:
    """Deletions of timestamp ``t`` the main server applied, each with the worker holding it
    (``-1``: the server does not track workers, so every worker is asked)."""

    t: int
    ids: Int64Array
    workers: Int32Array
    refused: list[tuple[int, str]] = field(default_factory=list)  # (sub id, reason)


@dataclass(frozen=True)
class RoutedInsertions:
    """Insertions of timestamp ``t`` the main server accepted, with the worker chosen for each
    and its integer cost (``0`` when the server keeps none)."""

    t: int
    subs: Subscriptions
    workers: Int32Array
    weights: Int64Array
    refused: list[tuple[int, str]] = field(default_factory=list)


@dataclass(frozen=True)
class RoutedTimestamp:
    """The main server's routing of one timestamp: its deletions and its insertions."""

    deletions: RoutedDeletions
    insertions: RoutedInsertions

    @property
    def refused(self) -> list[tuple[int, str]]:
        """The refused events of the timestamp, ``(id, reason)``, deletions first."""
        return self.deletions.refused + self.insertions.refused


def route_deletions(server: Any, t: int, del_ids: npt.ArrayLike, *, refuse: bool = False) -> RoutedDeletions:
    """Step 1a (module doc): forget deleted subscriptions, subtracting their costs from ``C(w)``.

    ``server`` is a :class:`~dkmsks.core.partition.MainServer` (or anything with ``delete``).
    With ``refuse=False`` a deletion of a subscription that is not live raises
    :class:`ValueError`; with ``refuse=True`` (a pipeline, whose inputs arrive over time) it is
    skipped and reported, and the rest of the timestamp goes on.
    """
    ids = np.atleast_1d(np.asarray(del_ids, dtype=np.int64))
    if ids.shape[0] == 0:
        return RoutedDeletions(int(t), ids, np.zeros(0, dtype=np.int32))
    if refuse:
        workers = np.asarray(server.delete(ids, missing="ignore"), dtype=np.int32)
        gone = workers < 0
        refused = [(sid, f"delete of subscription {sid}, which is not live at t={t}") for sid in ids[gone].tolist()]
        return RoutedDeletions(int(t), ids[~gone], workers[~gone], refused)
    try:
        found = server.delete(ids)
    except KeyError as err:  # MainServer refuses ids that are not live, before any change
        raise ValueError(f"t={t}: {err.args[0]}; a deletion must name a live subscription") from None
    workers = np.full(ids.shape[0], -1, dtype=np.int32) if found is None else np.asarray(found, dtype=np.int32)
    return RoutedDeletions(int(t), ids, workers)


def route_insertions(server: Any, t: int, insertions: Subscriptions, *, refuse: bool = False) -> RoutedInsertions:
    """Step 1b (module doc): a worker for each new subscription, by the method's cost model.

    With ``refuse=True`` an insertion of a subscription that is already live is skipped and
    reported (the server needs ``lookup_weights``); otherwise the server's own check raises.
    """
    refused: list[tuple[int, str]] = []
    if refuse and len(insertions):
        live, _ = server.lookup_weights(insertions.ids)
        refused = [(sid, f"insert of subscription {sid}, which is already live")
                   for sid in insertions.ids[live >= 0].tolist()]
        insertions = insertions.take(np.flatnonzero(live < 0))
    if not len(insertions):
        return RoutedInsertions(int(t), insertions, np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int64), refused)
    weighted = getattr(server, "assign_weighted", None)
    if weighted is not None:  # (a MainServer: its weights without looking them up again)
        workers, weights = weighted(insertions)
        return RoutedInsertions(int(t), insertions, np.asarray(workers, dtype=np.int32),
                                np.asarray(weights, dtype=np.int64), refused)
    workers = np.asarray(server.assign(insertions), dtype=np.int32)
    lookup = getattr(server, "lookup_weights", None)
    weights = (np.asarray(lookup(insertions.ids)[1], dtype=np.int64) if lookup is not None
               else np.zeros(len(insertions), dtype=np.int64))
    return RoutedInsertions(int(t), insertions, workers, weights, refused)


def route_timestamp(
    server: Any, t: int, del_ids: npt.ArrayLike, insertions: Subscriptions, *, refuse: bool = False
) -> RoutedTimestamp:
    """Step 1 (module doc): deletions, then insertions, of timestamp ``t``."""
    return RoutedTimestamp(route_deletions(server, t, del_ids, refuse=refuse),
                           route_insertions(server, t, insertions, refuse=refuse))


def remove_deletions(worker: Any, worker_id: int, routed: RoutedDeletions, *, at_t: bool = False) -> int:
    """Step 2a (module doc) on one :class:`~dkmsks.core.update.Worker`: drop the deletions
    routed to ``worker_id`` (or to every worker). ``at_t``: remove as of ``routed.t``, for a
    worker that probes several timestamps at once (docs/design.md §3 fact 2). Returns how many it held."""
    mine = (routed.workers == worker_id) | (routed.workers < 0)
    if not mine.any():
        return 0
    return int(worker.remove(routed.ids[mine], t=routed.t if at_t else None))


def add_insertions(worker: Any, worker_id: int, routed: RoutedInsertions) -> Int64Array:
    """Step 2b (module doc): register the new subscriptions assigned to ``worker_id`` with an
    empty result; the worker indexes each by its actual ball (the whole space until it has
    ``k`` results; docs/design.md §2). Returns their rows in ``routed.subs``."""
    rows = np.flatnonzero(routed.workers == worker_id)
    if rows.shape[0]:
        worker.add(routed.subs.take(rows), None)
    return rows


def deletions_by_worker(routed: RoutedDeletions, workers: int) -> Iterator[tuple[int, Int64Array]]:
    """Step 2a's split for a caller that holds all ``workers`` (the in-memory engine): each
    worker's deletions as ``(worker id, sub ids)``, in routed order, from one stable sort; a
    deletion the server does not place (``-1``) is asked of every worker, as by
    :func:`remove_deletions`."""
    ids, placed = routed.ids, routed.workers
    if ids.shape[0] == 0:
        return
    unplaced = placed < 0
    if unplaced.any():
        for w in range(workers):
            yield w, ids[(placed == w) | unplaced]
        return
    order = np.argsort(placed, kind="stable")
    ids, placed = ids[order], placed[order]
    bounds = [0, *(np.flatnonzero(placed[1:] != placed[:-1]) + 1).tolist(), int(placed.shape[0])]
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=False):
        yield int(placed[lo]), ids[lo:hi]


def insertions_by_worker(routed: RoutedInsertions) -> tuple[Subscriptions, list[tuple[int, int, int]]]:
    """Step 2b's split for a caller that holds every worker (the in-memory engine): the
    insertions ordered by worker (stably: each worker's in routed order) and ``(worker id, lo,
    hi)`` of each worker's part, rows ``lo .. hi - 1`` (:meth:`Subscriptions.slice_rows`). One
    stable sort and one take serve all workers, where :func:`add_insertions` takes one worker's
    part with a dozen array calls of its own (~20 µs per worker at 1M/1M, m = 20); slicing its
    part is left to each worker, as reading its share of a shuffle would be."""
    workers = routed.workers
    if workers.shape[0] == 0:
        return routed.subs, []
    order = np.argsort(workers, kind="stable")
    workers = workers[order]
    bounds = [0, *(np.flatnonzero(workers[1:] != workers[:-1]) + 1).tolist(), int(workers.shape[0])]
    spans = [(int(workers[lo]), lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:], strict=False)]
    return routed.subs.take(order), spans


def ragged_ball_radius2(offsets: Int64Array, values: Float64Array, k: npt.ArrayLike) -> Float64Array:
    """Squared ball radius of each ragged row (row ``i`` is ``values[offsets[i]:offsets[i+1]]``,
    sorted ascending, at most ``k_i`` long, as Arrow list columns hold the results): its
    ``k_i``-th value, ``inf`` while the row holds fewer than ``k_i`` (docs/design.md §1)."""
    k = np.asarray(k, dtype=np.int64)
    lengths = np.diff(offsets)
    full = (lengths >= k) & (k >= 1)
    out = np.full(k.shape[0], np.inf)
    out[full] = values[offsets[:-1][full] - offsets[0] + k[full] - 1]
    return out


