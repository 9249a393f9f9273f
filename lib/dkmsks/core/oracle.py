"""Brute-force oracle: the exact results of docs/design.md §1, computed the slow, obvious way.

Every fast path (each partitioner, worker count, index, the Spark pipeline) is tested
against this module, so it favours clarity over speed and shares no code with them beyond
the column types of :mod:`dkmsks.core.model`.
"""

from __future__ import annotations

import numpy as np

from dkmsks.core.model import (
    KnnResult,
    Objects,
    Op,
    Results,
    SubscriptionEvents,
    Subscriptions,
)

#: Registration time given to initial subscriptions: they see all of ``O_init`` (docs/design.md §1,
#: "the initial subscriptions S are registered at timestamp 0, then O_init arrives").
INITIAL_REGISTRATION = np.iinfo(np.int64).min


def live_subscriptions(events: SubscriptionEvents, as_of: int, *, t0: int = 0) -> Subscriptions:
    """Subscriptions live after every event with ``t <= as_of`` has been applied.

    Within a timestamp, deletions apply before insertions (docs/design.md §1), whatever their order
    in ``events``. Subscriptions registered at ``t <= t0`` are initial: their registration
    time becomes :data:`INITIAL_REGISTRATION` so that all of ``O_init`` qualifies.

    Raises
    ------
    ValueError
        On a deletion of an id that is not live, or an insertion of an id that is live
        (the readers quarantine such rows; the oracle refuses to guess).
    """
    live: dict[int, int] = {}  # sub id -> row in events
    for t in np.unique(events.t[events.t <= as_of]):
        rows = np.flatnonzero(events.t == t)
        for r in rows[events.op[rows] == Op.DELETE]:
            sid = int(events.ids[r])
            if sid not in live:
                raise ValueError(f"delete of subscription {sid} at t={t}, which is not live")
            del live[sid]
        for r in rows[events.op[rows] == Op.INSERT]:
            sid = int(events.ids[r])
            if sid in live:
                raise ValueError(f"insert of subscription {sid} at t={t}, which is already live")
            live[sid] = int(r)
    order = np.array(sorted(live.values()), dtype=np.int64)
    picked = events.take(order)
    t = np.where(picked.t <= t0, INITIAL_REGISTRATION, picked.t).astype(np.int64)
    return Subscriptions(picked.ids, picked.x, picked.y, picked.keywords, picked.k, t)


def brute_force_knn(objects: Objects, subs: Subscriptions, as_of: int) -> Results:
    """``A(s)`` for each subscription over the objects with ``s.t <= o.t <= as_of``.

    Candidates come from a plain keyword -> objects posting map (no spatial pruning), then
    every candidate's ``d²`` is computed and the list is sorted by ``(d², id)``.
    """
    visible = np.flatnonzero(objects.t <= as_of)
    postings: dict[int, list[int]] = {}
    for r in visible:
        for kw in objects.keywords.row(int(r)).tolist():
            postings.setdefault(kw, []).append(int(r))
    posting_arrays = {kw: np.array(rows, dtype=np.int64) for kw, rows in postings.items()}

    results: Results = {}
    for i in range(len(subs)):
        lists = [posting_arrays[kw] for kw in subs.keywords.row(i).tolist() if kw in posting_arrays]
        cand = np.unique(np.concatenate(lists)) if lists else np.zeros(0, dtype=np.int64)
        cand = cand[objects.t[cand] >= subs.t[i]]
        dx = objects.x[cand] - subs.x[i]
        dy = objects.y[cand] - subs.y[i]
        d2 = dx * dx + dy * dy
        ids = objects.ids[cand]
        order = np.lexsort((ids, d2))[: int(subs.k[i])]
        results[int(subs.ids[i])] = KnnResult(ids[order].astype(np.int64), d2[order])
    return results


def oracle_results(
    objects: Objects, events: SubscriptionEvents, as_of: int, *, t0: int = 0
) -> Results:
    """The exact results of every live subscription at timestamp ``as_of`` (docs/design.md §1)."""
    return brute_force_knn(objects, live_subscriptions(events, as_of, t0=t0), as_of)
