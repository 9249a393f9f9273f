"""The exact kNN update of one worker, and the worker object (state + index).

Given a batch of new objects (one or many timestamps), a worker:

1. asks its index for candidate ``(object, subscription row)`` pairs (paper §3.1, §3.2, §4.3
   "kNN update"; the index may over-approximate balls, docs/design.md §3 fact 1);
2. keeps the pairs whose subscription is live at ``o.t`` (``s.t <= o.t < end``, docs/design.md §1);
3. accepts a pair when the result is not full or ``(d², o.id) < (d², id)`` of the current k-th
   result, with ``d² = dx*dx + dy*dy`` in float64 exactly as the oracle computes it;
4. merges all accepted pairs at once: per affected row, the current result and its accepted
   objects are sorted by ``(row, d², id)`` and the first ``k`` kept.

Every candidate is tested against the state *before* the batch. That is exact for any batch
of timestamps (docs/design.md §3 fact 2: with insert-only objects the top-k of a union is the top-k of
the merged top-ks, and an object that does not beat the old k-th cannot be in the new top-k),
and it makes the counters independent of how the batch is chunked.

Work counters (docs/design.md §3 fact 4) are deterministic:

- ``pairs_tested``: candidate pairs produced by the index (a subscription sharing ``j`` keywords
  with an object is produced ``j`` times, as by the inverted files of the paper);
- ``pairs_accepted``: distinct pairs whose object lies in the subscription's ball at the start
  of the batch — for a single-timestamp batch this is the *minimum possible work*, the same for
  every index; :func:`process_stepwise` counts each timestamp's pairs inside the balls as they
  stand after the timestamps before it, so its counts are those of one timestamp at a time,
  whatever the number of timestamps probed together;
- ``subs_updated``: subscriptions whose result changed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from dkmsks.core.kernel import Probe, SortedProbe, kernel_name, merge_accepted
from dkmsks.core.knn_state import NEVER, KnnState, StateArrays, enters
from dkmsks.core.model import Float64Array, Int64Array, Objects, Rect, Results, Subscriptions
from dkmsks.core.postings import DEFAULT_BUDGET
from dkmsks.core.worker_index import DEFAULT_GRID, WorkerIndex, make_index


@dataclass
class UpdateStats:
    """Deterministic work counters of one :func:`process_batch` call (docs/design.md §3 fact 4)."""

    objects: int = 0
    pairs_tested: int = 0
    pairs_accepted: int = 0
    subs_updated: int = 0
    updated_rows: Int64Array = field(default_factory=lambda: np.zeros(0, dtype=np.int64), repr=False)
    #: Distinct objects of the accepted pairs: the objects this worker needed (the minimum an
    #: object routing must send it, docs/design.md §2.6); counted by :func:`process_batch`.
    objects_accepted: int = 0
    #: Their ids, ascending (:func:`process_batch`).
    accepted_ids: Int64Array = field(default_factory=lambda: np.zeros(0, dtype=np.int64), repr=False)

    def __iadd__(self, other: UpdateStats) -> UpdateStats:
        self.objects += other.objects
        self.pairs_tested += other.pairs_tested
        self.pairs_accepted += other.pairs_accepted
        self.subs_updated += other.subs_updated
        self.objects_accepted += other.objects_accepted
        return self


def accept_candidates(
    state: KnnState, objects: Objects, obj: Int64Array, rows: Int64Array
) -> tuple[Int64Array, Int64Array, Float64Array]:
    """Exact test of candidate pairs against the current state.

    Returns the accepted ``(row, object id, d²)``; pairs are not deduplicated here.
    """
    return _accept(state, objects, obj, rows)[:3]


def _accept(
    state: KnnState, objects: Objects, obj: Int64Array, rows: Int64Array
) -> tuple[Int64Array, Int64Array, Float64Array, Int64Array]:
    """:func:`accept_candidates`, also returning each accepted pair's object timestamp."""
    ot = objects.t[obj]
    live = (state.t[rows] <= ot) & (ot < state.end_t[rows])
    if not live.all():
        obj, rows, ot = obj[live], rows[live], ot[live]
    # Bit-identical to the oracle: dx = o.x - s.x, d² = dx*dx + dy*dy in float64.
    dx = objects.x[obj] - state.x[rows]
    dy = objects.y[obj] - state.y[rows]
    d2 = dx * dx + dy * dy
    oid = objects.ids[obj]
    kd2, kid = state.kth(rows)
    ok = enters(d2, oid, kd2, kid)
    return rows[ok], oid[ok], d2[ok], ot[ok]


def merge_results(
    state: KnnState, rows: Int64Array, oid: Int64Array, d2: Float64Array
) -> Int64Array:
    """Merge accepted ``(row, object id, d²)`` into the kNN matrices; returns the affected rows.

    Each row's current entries are already ordered, so no sort of the state is needed: the
    accepted pairs are sorted among themselves by ``(row, d², id)`` and each entry's final
    position is its rank within its own list plus the number of entries of the other list
    that precede it (one ``[accepted × K]`` comparison). An object already in a row's result
    (a replayed batch) is ignored, so processing the same objects twice changes nothing.
    """
    if rows.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    K = state.K
    cur_ids = state.ids[rows]
    keep = ~(cur_ids == oid[:, None]).any(axis=1)
    if not keep.all():
        rows, oid, d2, cur_ids = rows[keep], oid[keep], d2[keep], cur_ids[keep]
        if rows.shape[0] == 0:
            return np.zeros(0, dtype=np.int64)
    order = np.lexsort((oid, d2, rows))
    rows, oid, d2, cur_ids = rows[order], oid[order], d2[order], cur_ids[order]
    cur_d2 = state.d2[rows]
    n = rows.shape[0]
    starts = np.flatnonzero(np.concatenate([[True], rows[1:] != rows[:-1]]))
    touched = rows[starts]
    mark = np.zeros(n, dtype=np.int64)
    mark[starts] = 1
    group = np.cumsum(mark) - 1  # index into `touched` of each accepted entry
    valid = cur_ids >= 0
    # cur_before[a, j]: current entry j of a's row precedes accepted entry a.
    cur_before = valid & (
        (cur_d2 < d2[:, None]) | ((cur_d2 == d2[:, None]) & (cur_ids < oid[:, None]))
    )
    pos_acc = cur_before.sum(axis=1) + (np.arange(n) - starts[group])
    # Current entry j moves down by the number of accepted entries of its row before it.
    acc_before = (valid & ~cur_before).astype(np.int64)
    shift = np.add.reduceat(acc_before, starts, axis=0)
    pos_cur = np.arange(K)[None, :] + shift
    k_t = state.k[touched].astype(np.int64)
    old_ids = state.ids[touched]
    old_d2 = state.d2[touched]
    new_ids = np.full((touched.shape[0], K), -1, dtype=np.int64)
    new_d2 = np.full((touched.shape[0], K), np.inf)
    mc = (old_ids >= 0) & (pos_cur < k_t[:, None])
    ti = np.broadcast_to(np.arange(touched.shape[0])[:, None], mc.shape)[mc]
    new_ids[ti, pos_cur[mc]] = old_ids[mc]
    new_d2[ti, pos_cur[mc]] = old_d2[mc]
    ma = pos_acc < k_t[group]
    new_ids[group[ma], pos_acc[ma]] = oid[ma]
    new_d2[group[ma], pos_acc[ma]] = d2[ma]
    state.ids[touched] = new_ids
    state.d2[touched] = new_d2
    return touched


def process_batch(
    state: KnnState,
    index: WorkerIndex,
    objects: Objects,
    *,
    budget: int = DEFAULT_BUDGET,
    kernel: str | None = None,
    probe: Probe | None = None,
) -> UpdateStats:
    """Exact kNN update of one worker for a batch of objects (docs/design.md §1, §3 fact 2).

    The index is not told about shrunken balls here; :meth:`Worker.process` does that.
    ``kernel``: ``"numpy"`` (the reference) or ``"numba"`` (:mod:`dkmsks.core.kernel`, the same
    results and counters); by default :func:`~dkmsks.core.kernel.kernel_name`. ``probe``: the
    index's probe of ``objects`` when the caller computed it once for several workers.
    """
    stats = UpdateStats(objects=len(objects))
    if len(objects) == 0:
        return stats
    if kernel_name(kernel) == "numba":
        rows, oid, d2, _, tested = index.lookup_accept(state, objects, probe)
        stats.pairs_tested = int(tested.sum())
        stats.accepted_ids = _distinct(oid)
        stats.objects_accepted = int(stats.accepted_ids.shape[0])
        touched, _, stats.pairs_accepted = merge_accepted(state, rows, oid, d2)
        stats.subs_updated = int(touched.shape[0])
        stats.updated_rows = touched
        return stats
    if isinstance(probe, SortedProbe):
        probe = probe.pairs()
    acc_r: list[Int64Array] = []
    acc_o: list[Int64Array] = []
    acc_d: list[Float64Array] = []
    for obj, rows in index.candidates(state, objects, budget, probe):
        stats.pairs_tested += int(rows.shape[0])
        r, o, d = accept_candidates(state, objects, obj, rows)
        if r.shape[0]:
            acc_r.append(r)
            acc_o.append(o)
            acc_d.append(d)
    if not acc_r:
        return stats
    rows = np.concatenate(acc_r)
    oid = np.concatenate(acc_o)
    d2 = np.concatenate(acc_d)
    # A pair found through several shared keywords is accepted once.
    order = np.lexsort((oid, rows))
    rows, oid, d2 = rows[order], oid[order], d2[order]
    first = np.concatenate([[True], (rows[1:] != rows[:-1]) | (oid[1:] != oid[:-1])])
    rows, oid, d2 = rows[first], oid[first], d2[first]
    stats.pairs_accepted = int(rows.shape[0])
    stats.accepted_ids = _distinct(oid)
    stats.objects_accepted = int(stats.accepted_ids.shape[0])
    touched = merge_results(state, rows, oid, d2)
    stats.subs_updated = int(touched.shape[0])
    stats.updated_rows = touched
    return stats


def _distinct(values: Int64Array) -> Int64Array:
    """The distinct values of ``values``, ascending (by a sort: dkmsks.core.sets)."""
    ordered = np.sort(values)
    return ordered[np.concatenate([[True], ordered[1:] != ordered[:-1]])] if ordered.shape[0] else ordered


@dataclass
class StepStats:
    """What one timestamp of :meth:`Worker.process_stepwise` did: the counters of its objects
    (probe pairs and accepted pairs of the shared probe that belong to them) and the rows whose
    result changed at this timestamp."""

    t: int
    stats: UpdateStats
    probe_share: float  # this timestamp's share of the batch's candidate pairs (for timing)


def _changed(before_ids: Int64Array, before_d2: Float64Array, state: KnnState, rows: Int64Array) -> Int64Array:
    """Rows whose result differs from ``before_*`` (a merged pair may fall beyond the k-th)."""
    diff = (state.ids[rows] != before_ids).any(axis=1) | (state.d2[rows] != before_d2).any(axis=1)
    return rows[diff]


def process_stepwise(
    state: KnnState, index: WorkerIndex, objects: Objects, *, budget: int = DEFAULT_BUDGET,
    kernel: str | None = None, probe: Probe | None = None,
) -> Iterator[StepStats]:
    """Exact kNN update for objects of several timestamps, one probe for all of them.

    The index is probed once for the whole batch and every candidate tested against the
    state before the batch (exact, docs/design.md §3 fact 2: the accepted pairs hold every object
    that enters a result during the batch). The accepted pairs are then merged one timestamp
    at a time, in order, yielding after each, so the caller sees the state after every
    timestamp — per-timestamp result changes at the probe cost of one batch. ``objects`` must
    be sorted by ``t``. The index is not told about shrunken balls here. ``kernel`` and
    ``probe`` (the index's probe of ``objects``, computed once for several workers) as in
    :func:`process_batch`.
    """
    if len(objects) == 0:
        return
    ts, first_of_t = np.unique(objects.t, return_index=True)
    n_per_t = np.diff(np.append(first_of_t, len(objects)))
    if kernel_name(kernel) == "numba":
        yield from _stepwise_compiled(state, index, objects, ts, n_per_t, probe)
        return
    if isinstance(probe, SortedProbe):
        probe = probe.pairs()
    tested = np.zeros(ts.shape[0], dtype=np.int64)
    acc_r: list[Int64Array] = []
    acc_o: list[Int64Array] = []
    acc_d: list[Float64Array] = []
    acc_t: list[Int64Array] = []
    for obj, rows in index.candidates(state, objects, budget, probe):
        tested += np.bincount(np.searchsorted(ts, objects.t[obj]), minlength=ts.shape[0])
        r, o, d, ot = _accept(state, objects, obj, rows)
        if r.shape[0]:
            acc_r.append(r)
            acc_o.append(o)
            acc_d.append(d)
            acc_t.append(ot)
    total = max(int(tested.sum()), 1)
    if acc_r:
        rows, oid, d2, ot = np.concatenate(acc_r), np.concatenate(acc_o), np.concatenate(acc_d), np.concatenate(acc_t)
        # A pair found through several shared keywords is accepted once; grouped by timestamp.
        order = np.lexsort((oid, rows, ot))
        rows, oid, d2, ot = rows[order], oid[order], d2[order], ot[order]
        first = np.concatenate([[True], (rows[1:] != rows[:-1]) | (oid[1:] != oid[:-1]) | (ot[1:] != ot[:-1])])
        rows, oid, d2, ot = rows[first], oid[first], d2[first], ot[first]
        bounds = np.searchsorted(ot, np.append(ts, ts[-1] + 1)) if ts.shape[0] else np.zeros(1, np.int64)
    else:
        rows = oid = ot = np.zeros(0, dtype=np.int64)
        d2 = np.zeros(0)
        bounds = np.zeros(ts.shape[0] + 1, dtype=np.int64)
    for i, t in enumerate(ts.tolist()):
        lo, hi = int(bounds[i]), int(bounds[i + 1])
        # Accepted against the state before the batch; what counts (and can land) is inside
        # the ball as it stands after the timestamps before this one.
        kd2, kid = state.kth(rows[lo:hi])
        inside = lo + np.flatnonzero(enters(d2[lo:hi], oid[lo:hi], kd2, kid))
        step = UpdateStats(objects=int(n_per_t[i]), pairs_tested=int(tested[i]), pairs_accepted=int(inside.shape[0]))
        if inside.shape[0]:
            r = rows[inside]
            cand = np.unique(r)
            before = state.ids[cand].copy(), state.d2[cand].copy()
            merge_results(state, r, oid[inside], d2[inside])
            step.updated_rows = _changed(*before, state, cand)
            step.subs_updated = int(step.updated_rows.shape[0])
        yield StepStats(int(t), step, float(tested[i]) / total)


def _stepwise_compiled(
    state: KnnState, index: WorkerIndex, objects: Objects, ts: Int64Array, n_per_t: Int64Array,
    probe: Probe | None = None,
) -> Iterator[StepStats]:
    """:func:`process_stepwise` through the compiled kernels (same results and counters)."""
    rows, oid, d2, ot, tested_obj = index.lookup_accept(state, objects, probe)
    tested = np.bincount(np.searchsorted(ts, objects.t), weights=tested_obj, minlength=ts.shape[0]).astype(np.int64)
    total = max(int(tested.sum()), 1)
    order = np.argsort(ot, kind="stable")
    rows, oid, d2, ot = rows[order], oid[order], d2[order], ot[order]
    bounds = np.searchsorted(ot, np.append(ts, ts[-1] + 1))
    for i, t in enumerate(ts.tolist()):
        lo, hi = int(bounds[i]), int(bounds[i + 1])
        step = UpdateStats(objects=int(n_per_t[i]), pairs_tested=int(tested[i]))
        if hi > lo:
            touched, changed, step.pairs_accepted = merge_accepted(state, rows[lo:hi], oid[lo:hi], d2[lo:hi])
            step.updated_rows = touched[changed]
            step.subs_updated = int(step.updated_rows.shape[0])
        yield StepStats(int(t), step, float(tested[i]) / total)


class Worker:
    """One worker of DkM-SKS (or KOP / SOP / PS²Stream): its kNN state and its index (paper
    §3, §4).

    Parameters
    ----------
    method
        ``"kop"``, ``"sop"``, ``"dkm"`` or ``"ps2"`` — selects the index kind (docs/design.md §2,
        docs/design.md §2.5).
    space
        The data space fixed at partition time (docs/design.md §1; used by the grid).
    grid
        ``G`` of the DkM-SKS grid.
    budget
        Candidate pairs per chunk (memory bound).
    kernel
        ``"numba"`` or ``"numpy"`` (:mod:`dkmsks.core.kernel`); default
        :func:`~dkmsks.core.kernel.kernel_name`.
    index_options
        Extra keyword arguments for the index (e.g. ``max_cells``, ``shrink``).

    Notes
    -----
    Protocol per timestamp (docs/design.md §1): :meth:`remove` (deletions), :meth:`add` (insertions),
    then :meth:`process` (objects). For a batch of several timestamps, pass each deletion's
    timestamp to :meth:`remove` and register insertions with their ``t``: every object is then
    tested only against subscriptions live at ``o.t`` (docs/design.md §3 fact 2). Objects must arrive
    in non-decreasing ``t`` across calls.
    """

    def __init__(
        self,
        method: str,
        space: Rect,
        *,
        grid: int = DEFAULT_GRID,
        budget: int = DEFAULT_BUDGET,
        width: int = 1,
        kernel: str | None = None,
        **index_options: float,
    ) -> None:
        self.method = method.lower()
        self.space = space
        self.budget = int(budget)
        self.kernel = kernel_name(kernel)
        self.state = KnnState(width=width, kernel=self.kernel)
        self.index: WorkerIndex = make_index(self.method, space, grid=grid, kernel=self.kernel, **index_options)  # type: ignore[arg-type]

    def __len__(self) -> int:
        return len(self.state)

    def add(
        self,
        subs: Subscriptions,
        knn: tuple[Int64Array, Float64Array] | None = None,
        *,
        groups: npt.ArrayLike | None = None,
    ) -> Int64Array:
        """Register subscriptions (initial ones with their ``O_init`` kNN, new ones empty).

        ``groups`` (SOP and PS²Stream) are the plan's subset ids of the subscriptions (region
        subsets; PS²Stream home leaves); when omitted the SOP index picks the subset whose
        ``R`` holds each location and the PS²Stream index the overflow part.
        """
        rows = self.state.add(subs, knn)
        g = None if groups is None else np.asarray(groups, dtype=np.int64)
        self.index.add(self.state, rows, g)
        return rows

    def remove(self, sub_ids: npt.ArrayLike, t: int | npt.ArrayLike | None = None) -> int:
        """Delete subscriptions (ids not held here are ignored), as of ``t`` when given (one
        timestamp per id, or one for all; :meth:`KnnState.remove`); returns how many were held."""
        rows = self.state.remove(sub_ids, t)
        freed = rows if t is None else rows[~self.state.in_use[rows]]
        if freed.shape[0]:
            self.index.forget(freed)
        return int(rows.shape[0])

    def process(self, objects: Objects, probe: Probe | None = None) -> UpdateStats:
        """Exact kNN update for a batch of objects, then lazy index maintenance (``probe``: the
        index's probe of ``objects``, when shared with other workers built alike)."""
        stats = process_batch(self.state, self.index, objects, budget=self.budget, kernel=self.kernel, probe=probe)
        self._after_batch(stats.updated_rows, int(objects.t.max()) if len(objects) else None)
        return stats

    def _after_batch(self, updated: Int64Array, through: int | None) -> None:
        """Lazy index maintenance after a batch: re-index shrunken balls, move the watermark
        to ``through``, release the rows it retires."""
        if updated.shape[0]:
            self.index.updated(self.state, updated)
        if through is not None:
            self.state.advance(through)
        freed = self.state.release_retired()
        if freed.shape[0]:
            self.index.forget(freed)
        self.index.maintain(self.state)

    def shared_probe(self, objects: Objects) -> Probe | None:
        """The index's probe of ``objects`` in the form workers built alike can share (sorted
        once under the compiled kernel, :class:`~dkmsks.core.kernel.SortedProbe`), or ``None``
        when the index kind probes with the worker's own keys (SOP, PS²Stream)."""
        if not (len(objects) and self.index.shared_probe):
            return None
        if self.kernel == "numba":
            return self.index.sorted_probe(objects)
        return self.index.probe(objects)

    def process_stepwise(self, objects: Objects, through: int | None = None,
                         probe: Probe | None = None) -> Iterator[StepStats]:
        """:func:`process_stepwise` (one probe, the state after every timestamp), then the
        same lazy index maintenance as :meth:`process` once for the batch.

        ``through``: the batch's last timestamp when it may have no objects (the watermark
        still reaches it, so subscriptions deleted up to it are released). ``probe``: the
        index's probe of ``objects``, when shared with other workers built alike."""
        touched: list[Int64Array] = []
        for step in process_stepwise(self.state, self.index, objects, budget=self.budget, kernel=self.kernel,
                                     probe=probe):
            touched.append(step.stats.updated_rows)
            yield step
        updated = np.unique(np.concatenate(touched)) if touched else np.zeros(0, dtype=np.int64)
        # Rows retired during the batch are released below, not re-indexed.
        updated = updated[self.state.end_t[updated] == NEVER] if updated.shape[0] else updated
        ends = ([int(objects.t.max())] if len(objects) else []) + ([int(through)] if through is not None else [])
        self._after_batch(updated, max(ends) if ends else None)

    def results(self) -> Results:
        """The worker's current results, keyed by subscription id."""
        return self.state.results()

    def to_arrays(self) -> StateArrays:
        """The worker's state as arrays (index is rebuilt from it by :meth:`from_arrays`)."""
        return self.state.to_arrays()

    @classmethod
    def from_arrays(
        cls,
        method: str,
        space: Rect,
        arrays: StateArrays,
        *,
        groups: npt.ArrayLike | None = None,
        grid: int = DEFAULT_GRID,
        budget: int = DEFAULT_BUDGET,
        kernel: str | None = None,
        **index_options: float,
    ) -> Worker:
        """Rebuild a worker (state and index) from :meth:`to_arrays` output."""
        w = cls(method, space, grid=grid, budget=budget, width=max(int(arrays.ids.shape[1]), 1), kernel=kernel,
                **index_options)
        w.add(arrays.subscriptions(), (arrays.ids, arrays.d2), groups=groups)
        w.index.maintain(w.state, force=True)
        return w
