"""The bridge between Spark rows and the numpy core: what one worker task runs.

Everything here is testable without a JVM: :func:`run_worker` reads the worker's current
state rows (an Arrow table with the ``knn_state`` columns, through
:class:`~dkmsks.storage.state_io.StateView`) and takes a :class:`BatchPayload` (the pending
timestamps, already routed by the main server), rebuilds the core
:class:`~dkmsks.core.update.Worker`, applies each timestamp in order (deletions, insertions,
objects — docs/design.md §1) and returns its output records as one Arrow table: one ``change`` per
result change, one ``metric`` per timestamp, and one ``final`` row per subscription the run
touched (the state to journal). Keyword strings are encoded with a task-local vocabulary: ids
only have to agree within one task.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from dkmsks.core import kernel
from dkmsks.core.model import KeywordSets, Objects, Rect, Subscriptions, Vocabulary
from dkmsks.core.protocol import RoutedDeletions, RoutedInsertions, add_insertions, remove_deletions
from dkmsks.core.sets import has_duplicates
from dkmsks.core.update import Worker
from dkmsks.core.warm import warm_up
from dkmsks.spark.worker_records import (
    METRIC_COLUMNS,
    WorkerRecords,
    no_results,
    sort_rows,
)


def warm_kernels() -> None:
    """Compile the worker kernels, or load them from numba's cache, unless ``DKMSKS_KERNEL=numpy``.

    A Spark driver calls it before it starts worker tasks: after a change of the kernels' source
    every worker process would otherwise compile them at once in its first round (measured: the
    first round of follow mode at |S| = 1M, m = 20 took 185 s on 2 cores, the next 59
    timestamps 7.9 s); compiled once here, each worker process loads the cache (~0.5 s).
    """
    warm_up(os.environ.get("DKMSKS_KERNEL") or None)


def warm_arrow() -> None:
    """Make pyarrow load its pandas shim now rather than in a round.

    pyarrow imports pandas the first time it converts a numpy array (``pa.array``), which a
    worker's records are built with: measured in follow mode at |S| = 1M, m = 20, 80 ms of CPU
    per worker process, i.e. 1.6 s of the two cores in the first round after a start.
    """
    pa.array(np.zeros(1, dtype=np.int64))


@dataclass(frozen=True)
class KeywordColumn:
    """Keyword sets as CSR over ids of a word list (``words[ids[ptr[i]:ptr[i+1]]]``):
    picklable and compact; a worker maps the few distinct words to its own vocabulary once
    instead of looking up every occurrence."""

    ptr: np.ndarray
    ids: np.ndarray
    words: list[str]

    @staticmethod
    def from_sets(sets: KeywordSets, words: Sequence[str]) -> KeywordColumn:
        """Keyword id sets of one vocabulary (``words[id]``); only the words used travel (a
        worker maps each of them once per batch, and a vocabulary can hold 100k+ words)."""
        ptr = np.asarray(sets.ptr, dtype=np.int64)
        used, local = np.unique(np.asarray(sets.ids[ptr[0]:ptr[-1]]), return_inverse=True)
        return KeywordColumn(ptr - ptr[0], local.astype(np.int32), [words[k] for k in used.tolist()])

    def take(self, rows: np.ndarray) -> KeywordColumn:
        """The sets of ``rows``, in that order, with only the words they use."""
        sets = KeywordSets(np.asarray(self.ptr, dtype=np.int64), np.asarray(self.ids, dtype=np.int32)).take(rows)
        return KeywordColumn.from_sets(sets, self.words)

    def encode(self, vocab: Vocabulary, rows: np.ndarray | None = None) -> KeywordSets:
        """The same sets in ``vocab``'s ids, each row sorted (vectorised: a catch-up payload
        holds 100k objects)."""
        mapping = np.fromiter((vocab.id_of(w) for w in self.words), dtype=np.int64, count=len(self.words))
        ids = mapping[self.ids] if self.ids.shape[0] else np.zeros(0, dtype=np.int64)
        # A mapping of distinct words keeps each row's ids distinct.
        full = KeywordSets(self.ptr, sort_rows(self.ptr, ids).astype(np.int32))
        return full if rows is None else full.take(rows)


@dataclass(frozen=True)
class BatchPayload:
    """Pending timestamps routed by the main server; broadcast to every worker task.

    Objects go to every worker; deletions and insertions carry the worker the main server
    chose. Arrays are parallel columns sorted by ``t``.
    """

    method: str
    space: tuple[float, float, float, float]
    timestamps: list[int]
    obj_ids: np.ndarray
    obj_x: np.ndarray
    obj_y: np.ndarray
    obj_t: np.ndarray
    obj_keywords: KeywordColumn
    del_t: np.ndarray
    del_ids: np.ndarray
    del_worker: np.ndarray
    ins_t: np.ndarray
    ins_ids: np.ndarray
    ins_worker: np.ndarray
    ins_x: np.ndarray
    ins_y: np.ndarray
    ins_k: np.ndarray
    ins_weight: np.ndarray
    ins_keywords: KeywordColumn
    grid: int = 16384
    index_options: dict[str, float] = field(default_factory=dict)
    #: Timestamps that share one index probe (:meth:`WorkerSession.apply`).
    probe_timestamps: int = 10


@dataclass(frozen=True)
class GroupEvents:
    """The deletions and insertions of several timestamps, each with its worker
    (:meth:`RoundInputs.group_events`); the insertions' ``t`` are ``subs.t``."""

    del_t: np.ndarray
    del_ids: np.ndarray
    del_worker: np.ndarray
    subs: Subscriptions
    ins_worker: np.ndarray
    ins_weight: np.ndarray


class RoundInputs:
    """A payload's inputs in one vocabulary, made once for every worker that shares it.

    A follow-mode task hosts several workers (jobs/follow/worker_loop.py) and applies each
    round's payload to them one after another. Built alike and over one vocabulary, they agree
    on the payload's keyword ids, on each timestamp's routed deletions and insertions, on each
    probe group's objects and, where the index's probe does not depend on the worker's subscriptions (the
    DkM-SKS grid, KOP: ``shared_probe``), on the probe itself and its sorted form, as the
    in-memory engine's workers share them (dkmsks.core.engine). Each part is made by the first
    worker that asks for it; groups are kept for the next workers up to ``keep_bytes`` (a 1M/1M
    round holds ~0.26 MiB of them per timestamp), later ones are made again by each worker.
    """

    #: The probe groups a round keeps for the next workers, at most (bytes).
    KEEP_BYTES = 256 << 20

    def __init__(self, payload: BatchPayload, vocab: Vocabulary, keep_bytes: int = KEEP_BYTES) -> None:
        self.payload = payload
        self.vocab = vocab
        self.keep_bytes = keep_bytes
        self.kept_bytes = 0
        self.objects = Objects(payload.obj_ids, payload.obj_x, payload.obj_y, payload.obj_keywords.encode(vocab),
                               payload.obj_t)
        self._ins_keywords = payload.ins_keywords.encode(vocab)
        self._events: dict[int, tuple[RoutedDeletions, RoutedInsertions]] = {}
        self._group_events: dict[tuple[int, ...], GroupEvents] = {}
        self._groups: dict[tuple[int, int], tuple[Objects, kernel.Probe | None]] = {}

    def events(self, t: int) -> tuple[RoutedDeletions, RoutedInsertions]:
        """The deletions and insertions of timestamp ``t`` for every worker (each takes its own)."""
        if t not in self._events:
            p = self.payload
            at = np.flatnonzero(p.del_t == t)
            deletions = RoutedDeletions(t, p.del_ids[at], p.del_worker[at])
            at = np.flatnonzero(p.ins_t == t)
            insertions = RoutedInsertions(
                t, Subscriptions(p.ins_ids[at], p.ins_x[at], p.ins_y[at], self._ins_keywords.take(at), p.ins_k[at],
                                 p.ins_t[at]),
                p.ins_worker[at], p.ins_weight[at])
            self._events[t] = deletions, insertions
        return self._events[t]

    def group_events(self, group: Sequence[int]) -> GroupEvents:
        """The deletions and insertions of the timestamps ``group`` for every worker, in the
        payload's order (by ``t``)."""
        key = tuple(group)
        if key not in self._group_events:
            p = self.payload
            dels = np.flatnonzero(np.isin(p.del_t, key))
            ins = np.flatnonzero(np.isin(p.ins_t, key))
            subs = Subscriptions(p.ins_ids[ins], p.ins_x[ins], p.ins_y[ins], self._ins_keywords.take(ins),
                                 p.ins_k[ins], p.ins_t[ins])
            self._group_events[key] = GroupEvents(p.del_t[dels], p.del_ids[dels], p.del_worker[dels], subs,
                                                  p.ins_worker[ins], p.ins_weight[ins])
        return self._group_events[key]

    def group(self, first: int, last: int, worker: Worker) -> tuple[Objects, kernel.Probe | None]:
        """The objects of timestamps ``first..last`` and, when ``worker``'s index kind shares
        it, their probe (sorted under the compiled kernel, as the engine's)."""
        key = (first, last)
        if key in self._groups:
            return self._groups[key]
        lo, hi = np.searchsorted(self.payload.obj_t, [first, last + 1])
        objects = self.objects.take(np.arange(lo, hi))
        # Sorted once, the probe serves every hosted worker's lookups in one forward pass each:
        # 10 workers' applies of a 105-timestamp round at 1M/1M took 1.57 s of CPU this way
        # against 2.15 s with the plain probe shared (docs/benchmarks.md).
        probe = worker.shared_probe(objects)
        arrays: list[np.ndarray] = [objects.ids, objects.x, objects.y, objects.t, objects.keywords.ptr,
                                    objects.keywords.ids]
        if isinstance(probe, kernel.SortedProbe):
            arrays += [probe.keys, probe.ptr, probe.owners]
        elif probe is not None:
            arrays += [probe[0], probe[1]]
        size = sum(int(a.nbytes) for a in arrays)
        if self.kept_bytes + size <= self.keep_bytes:
            self.kept_bytes += size
            self._groups[key] = objects, probe
        return objects, probe


class WorkerSession:
    """One worker's warm state: built once from its ``knn_state`` rows, then fed batches.

    :meth:`apply` processes a :class:`BatchPayload` (pending timestamps in order) and yields
    output records; the worker stays in memory between calls, so a long-running task (follow
    mode) pays the index build once (docs/design.md §3 fact 6). Sessions given one ``vocab``
    (the workers of one task) can share each payload's inputs (:class:`RoundInputs`).
    """

    #: Whether a probe group's deletions and insertions may be applied in one call each
    #: (:meth:`_events_at_once`); tests compare it with one timestamp at a time.
    events_at_once = True

    def __init__(self, worker_id: int, state: pa.Table, *, method: str,
                 space: tuple[float, float, float, float], grid: int,
                 index_options: dict[str, float] | None = None, vocab: Vocabulary | None = None) -> None:
        from dkmsks.storage.state_io import state_arrays

        self.worker_id = worker_id
        self.method = method
        self.vocab = Vocabulary() if vocab is None else vocab
        arrays = state_arrays(state, self.vocab)
        # Cost and plan subset are not part of the core state; the finals need them back.
        order = np.argsort(arrays.sub_ids, kind="stable")
        self._ids = arrays.sub_ids[order]
        self._weight = np.asarray(state.column("weight").to_numpy(), dtype=np.int64)[order]
        self._subset = np.asarray(state.column("subset").to_numpy(), dtype=np.int64)[order]
        self._registered: dict[int, int] = {}  # weights of subscriptions inserted since
        # SOP's region subsets and ps2's home leaves are index parts; a new subscription has
        # subset -1, SOP's and ps2's overflow part.
        parts = method in ("sop", "ps2")
        subset = np.asarray(state.column("subset").to_numpy(), dtype=np.int64)
        # DKMSKS_KERNEL=numpy runs the workers on the numpy reference path (docs/design.md §11).
        self.worker = Worker.from_arrays(method, Rect(*space), arrays, groups=subset if parts else None,
                                         grid=grid, kernel=os.environ.get("DKMSKS_KERNEL") or None,
                                         **(index_options or {}))  # type: ignore[arg-type]

    def _events_one_by_one(self, inputs: RoundInputs, group: list[int]) -> _Events:
        """Apply the deletions and insertions of ``group``'s timestamps one timestamp at a time
        (deletions first, docs/design.md §1), each row live for its interval only."""
        worker_id, worker = self.worker_id, self.worker
        events = _Events()
        for t in group:
            started = time.perf_counter()
            routed_del, routed_ins = inputs.events(t)
            events.deleted[t] = self._deleted_here(routed_del.ids, routed_del.workers)
            if remove_deletions(worker, worker_id, routed_del, at_t=True):
                for sid in events.deleted[t].tolist():
                    self._registered.pop(sid, None)
            delete_ms = (time.perf_counter() - started) * 1e3

            started = time.perf_counter()
            rows = add_insertions(worker, worker_id, routed_ins)
            events.inserted[t] = routed_ins.subs.ids[rows]
            for sid, weight in zip(events.inserted[t].tolist(), routed_ins.weights[rows].tolist(), strict=True):
                self._registered[sid] = weight
            events.live[t] = len(worker)
            events.times[t] = (delete_ms, (time.perf_counter() - started) * 1e3)
        return events

    def _events_at_once(self, inputs: RoundInputs, group: list[int]) -> _Events | None:
        """Apply the deletions and insertions of ``group``'s timestamps in one removal and one
        registration, each row with its own timestamp (the state keeps every row live for its
        interval only, so the objects see what one timestamp at a time gives); ``None``, having
        changed nothing, when a subscription id occurs twice among them (deleted and registered
        again, say), where the order inside the group matters.

        A 75-timestamp catch-up made 150 such calls per worker (a registration took 0.19 ms
        at 1M/1M, mostly fixed costs of numpy calls on a few rows); the records and metrics are
        those of :meth:`_events_one_by_one` (its times are split over the timestamps by their rows)."""
        worker_id, worker = self.worker_id, self.worker
        ev = inputs.group_events(group)
        mine_del = np.flatnonzero((ev.del_worker == worker_id) | (ev.del_worker < 0))
        mine_ins = np.flatnonzero(ev.ins_worker == worker_id)
        del_ids, del_t = ev.del_ids[mine_del], ev.del_t[mine_del]
        ins_ids, ins_t = ev.subs.ids[mine_ins], ev.subs.t[mine_ins]
        if has_duplicates(np.concatenate([del_ids, ins_ids])):
            return None
        events = _Events()
        at = np.asarray(group, dtype=np.int64)
        before = len(worker)

        started = time.perf_counter()
        # No id is registered in the group (checked above): each deletion finds what it would
        # have found at its own timestamp.
        held = worker.state.contains(del_ids) if del_ids.shape[0] else np.zeros(0, dtype=bool)
        if del_ids.shape[0]:
            worker.remove(del_ids, t=del_t)
        exact = (ev.del_worker[mine_del] == worker_id) | held  # asked of every worker: held here
        for sid in del_ids[exact].tolist():
            self._registered.pop(sid, None)
        delete_ms = (time.perf_counter() - started) * 1e3

        started = time.perf_counter()
        if mine_ins.shape[0]:
            worker.add(ev.subs.take(mine_ins), None)
        for sid, weight in zip(ins_ids.tolist(), ev.ins_weight[mine_ins].tolist(), strict=True):
            self._registered[sid] = weight
        insert_ms = (time.perf_counter() - started) * 1e3

        held_at = np.bincount(np.searchsorted(at, del_t[held]), minlength=at.shape[0])
        ins_at = np.bincount(np.searchsorted(at, ins_t), minlength=at.shape[0])
        live = before + np.cumsum(ins_at) - np.cumsum(held_at)
        del_at = np.bincount(np.searchsorted(at, del_t), minlength=at.shape[0])
        for i, t in enumerate(group):
            events.deleted[t] = del_ids[exact & (del_t == t)]
            events.inserted[t] = ins_ids[ins_t == t]
            events.live[t] = int(live[i])
            events.times[t] = (delete_ms * _share(del_at, i), insert_ms * _share(ins_at, i))
        return events

    def _deleted_here(self, ids: np.ndarray, workers: np.ndarray) -> np.ndarray:
        """The deletions of one timestamp that this worker records: those routed to it, and
        those asked of every worker (``-1``, core/protocol.py) that it holds (before they apply)."""
        mine = workers == self.worker_id
        asked_of_all = np.flatnonzero(workers < 0)
        if asked_of_all.shape[0]:
            mine[asked_of_all] = self.worker.state.contains(ids[asked_of_all])
        return ids[mine]

    def _weights_of(self, sub_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        weight = np.zeros(sub_ids.shape[0], dtype=np.int64)
        subset = np.full(sub_ids.shape[0], -1, dtype=np.int64)
        if self._ids.shape[0]:
            pos = np.minimum(np.searchsorted(self._ids, sub_ids), self._ids.shape[0] - 1)
            known = self._ids[pos] == sub_ids
            weight[known] = self._weight[pos[known]]
            subset[known] = self._subset[pos[known]]
        for i, sid in enumerate(sub_ids.tolist()):
            if sid in self._registered:
                weight[i], subset[i] = self._registered[sid], -1
        return weight, subset

    def apply(self, payload: BatchPayload | RoundInputs) -> pa.Table:
        """Apply every timestamp of ``payload``; its records (:meth:`apply_parts`, the changes
        first)."""
        return self._apply(payload).table()

    def apply_parts(self, payload: BatchPayload | RoundInputs) -> tuple[pa.Table, pa.Table]:
        """Apply every timestamp of ``payload``; its result changes and its other records
        (metrics, finals), each in the order made (:meth:`_apply`)."""
        return self._apply(payload).tables()

    def _apply(self, payload: BatchPayload | RoundInputs) -> WorkerRecords:
        """Apply every timestamp of ``payload`` (deletions, insertions, objects); its records.

        Timestamps go in groups of ``payload.probe_timestamps``: a group's deletions and
        insertions are applied first (each row stays live for the objects of its interval
        only), its objects are probed once and merged timestamp by timestamp
        (:meth:`Worker.process_stepwise`, docs/design.md §3 fact 2), and the records are those of
        applying one timestamp at a time: per timestamp its deletions, insertions and result
        updates (``seq`` in that order), and one metric. A follow-mode batch is one timestamp,
        a catch-up shares each probe over several. Records are built column-wise (tens of
        thousands per worker and batch). ``payload`` may come as :class:`RoundInputs` over this
        session's vocabulary, shared with the other workers of a task: the same records.
        """
        # A payload of this worker alone keeps no groups: no other worker would read them.
        inputs = payload if isinstance(payload, RoundInputs) else RoundInputs(payload, self.vocab, keep_bytes=0)
        if inputs.vocab is not self.vocab:
            raise ValueError(f"worker {self.worker_id}: the round's inputs use another vocabulary than the worker")
        payload = inputs.payload
        worker_id, worker, vocab = self.worker_id, self.worker, self.vocab
        state = worker.state
        out = WorkerRecords(worker_id)
        width = max(1, int(payload.probe_timestamps))
        timestamps = list(payload.timestamps)

        for g in range(0, len(timestamps), width):
            group = timestamps[g:g + width]
            events = (self._events_at_once(inputs, group) if len(group) > 1 and self.events_at_once else None) \
                or self._events_one_by_one(inputs, group)
            deleted, inserted, live, times = events.deleted, events.inserted, events.live, events.times

            # One probe for the group's objects; the results that changed at each timestamp
            # are read right after its merge (later merges change the same rows).
            started = time.perf_counter()
            objects, probe = inputs.group(group[0], group[-1], worker)
            steps: dict[int, tuple[Any, tuple[np.ndarray, ...]]] = {}
            for step in worker.process_stepwise(objects, through=group[-1], probe=probe):
                rows = step.stats.updated_rows
                rows = rows[np.argsort(state.sub_id[rows], kind="stable")]
                steps[step.t] = (step, (state.sub_id[rows].copy(), state.k[rows].copy(),
                                        state.ids[rows].copy(), state.d2[rows].copy()))
            knn_ms = (time.perf_counter() - started) * 1e3

            # The group's records in one go (a call per timestamp and kind took ~10 % of a
            # catch-up's apply under cProfile): per timestamp its deletions, insertions and
            # updates, then its metric.
            parts: list[tuple[int, str, np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray] | None]] = []
            metrics: dict[str, list[float]] = {name: [] for name in METRIC_COLUMNS}
            for t in group:
                step, (sids, ks, ids, d2) = steps.get(t, (None, _NO_CHANGES))
                parts += [(t, "delete", deleted[t], None),
                          (t, "insert", inserted[t], no_results(inserted[t].shape[0])),
                          (t, "update", sids, (ks, ids, d2))]
                delete_ms, insert_ms = times[t]
                for name, value in zip(METRIC_COLUMNS, (
                        live[t], step.stats.pairs_tested if step else 0, step.stats.pairs_accepted if step else 0,
                        sids.shape[0],
                        # A shared probe's time is split by each timestamp's share of its pairs.
                        knn_ms * step.probe_share if step else 0.0, insert_ms, delete_ms), strict=True):
                    metrics[name].append(value)
            out.changes_of(parts)
            out.metrics(np.asarray(group, dtype=np.int64), **{name: np.asarray(v) for name, v in metrics.items()})

        # The final state of every subscription the batch touched (its last change decides).
        sub, t_last, seq_last, was_delete = out.last_changes()
        upserts = np.flatnonzero(~was_delete)
        if upserts.shape[0]:
            final = state.to_arrays(state.rows_of(sub[upserts]))  # ascending ids, as `sub`
            weight, subset = self._weights_of(final.sub_ids)
            out.finals_upsert(final, t_last[upserts], seq_last[upserts], weight, subset, vocab)
        gone = np.flatnonzero(was_delete)
        out.finals_delete(sub[gone], t_last[gone], seq_last[gone])
        return out


@dataclass
class _Events:
    """Per timestamp of a probe group, as :meth:`WorkerSession._apply` records them: the ids
    deleted from this worker and registered on it, its live subscriptions after them, and the
    milliseconds the deletions and insertions took."""

    deleted: dict[int, np.ndarray] = field(default_factory=dict)
    inserted: dict[int, np.ndarray] = field(default_factory=dict)
    live: dict[int, int] = field(default_factory=dict)
    times: dict[int, tuple[float, float]] = field(default_factory=dict)


def _share(counts: np.ndarray, i: int) -> float:
    """Entry ``i``'s share of ``counts``' total (an even share when the total is 0)."""
    total = int(counts.sum())
    return float(counts[i]) / total if total else 1.0 / counts.shape[0]


_NO_CHANGES = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32), np.zeros((0, 1), dtype=np.int64),
               np.zeros((0, 1)))


def run_worker(worker_id: int, view: Any, payload: BatchPayload) -> pa.Table:
    """Read one worker's current state (a :class:`~dkmsks.storage.state_io.StateView`, pinned
    to table versions), apply ``payload`` and return its records (a one-shot task).

    Deterministic for given inputs, so a retried Spark task yields the same records.
    """
    session = WorkerSession(worker_id, view.read(worker=worker_id), method=payload.method, space=payload.space,
                            grid=payload.grid, index_options=payload.index_options)
    return session.apply(payload)
