"""Compiling every kernel once, before a process's first timestamp.

It runs a tiny worker and a tiny main server, so it stands above them (:mod:`dkmsks.core.update`,
:mod:`dkmsks.core.stats`, :mod:`dkmsks.core.partition`), not in the kernel package they import."""

from __future__ import annotations

from typing import Any

import numpy as np

from dkmsks.core import stats_kernel
from dkmsks.core.jit import kernel_name
from dkmsks.core.kernel.lookup import _COLD_KEYS, lookup_accept
from dkmsks.core.kernel.probe import SortedProbe
from dkmsks.core.model import KeywordSets, Objects, Rect, Subscriptions
from dkmsks.core.partition import new_book
from dkmsks.core.stats import ObjectStatistics
from dkmsks.core.sub_map import HashSubMap
from dkmsks.core.update import Worker

__all__ = ["warm_up"]


def warm_up(requested: str | None = None) -> None:
    """Compile (or load from numba's cache) every kernel by running a tiny worker through one
    insertion, one re-index and one update, and a tiny main server's count: a process's first
    timestamp then pays no compile time (a cold compile took 48 s on the 2-core Intel VM at
    `7459cd5`; the image build runs this once, docs/deployment.md; the cache is named by the
    core's sources, :mod:`dkmsks.numba_cache`).
    Nothing to do when the kernel in use (:func:`kernel_name` of ``requested``) is numpy."""
    if kernel_name(requested) != "numba":
        return
    kws = KeywordSets.from_lists([[0], [0, 1]])
    worker = Worker("dkm", Rect(0.0, 0.0, 1.0, 1.0), kernel="numba")
    worker.add(Subscriptions(np.array([1, 2]), np.array([0.2, 0.8]), np.array([0.2, 0.8]), kws,
                             np.array([1, 1], dtype=np.int32), np.zeros(2, dtype=np.int64)))
    objects = Objects(np.array([10, 11]), np.array([0.25, 0.7]), np.array([0.25, 0.7]), kws, np.ones(2, dtype=np.int64))
    worker.process(objects)
    worker.process(objects, worker.shared_probe(objects))  # a replay: no change (the grid's sorted probe)
    SortedProbe.of(*worker.index.probe(objects))  # the general sorted form (KOP, objects outside the space)
    index: Any = worker.index  # a GridIndex: its postings and epochs
    # The postings of balls alone (GridIndex.entries; adding and re-indexing ran above).
    index.entries(worker.state, np.zeros(1, dtype=np.int64))
    # A batch-sized plain probe takes _lookup_warm (a key without postings: nothing changes).
    many = np.full(_COLD_KEYS + 1, -1, dtype=np.int64)
    lookup_accept(many, np.zeros(many.shape[0], dtype=np.int64), index.postings, index.epoch, worker.state, objects)
    list(worker.process_stepwise(Objects(np.array([12]), np.array([0.21]), np.array([0.21]),
                                         KeywordSets.from_lists([[0]]), np.full(1, 2, dtype=np.int64))))
    worker.state.balls_after(np.array([0, 1]), 0)  # what the engine reports to the cost refresh
    worker.index.maintain(worker.state, force=True)  # a rebuild of the postings: their filter's bits
    worker.remove(np.array([1, 2]))  # the state's rows cleared, the index's entries made stale
    # The state's hash map (dkmsks.core.sub_map): lookups, insertions and deletions ran above;
    # a growth and a batch's deletions, as a bulk load and the Spark tasks run them.
    ids = np.arange(64, dtype=np.int64)
    table = HashSubMap(1)
    table.insert(ids, ids, ids)
    table.rows_of(ids, ids)  # (exports of changed rows; a state's insertions check with first_mapped)
    table.pop(ids, ids)
    # The main server's compiled paths: small batches of Eq. 4 counts and their per-row sums,
    # Eq. 1 sums, the id search (dkmsks.core.stats_kernel), the refresh's pick and boxes
    # (dkmsks.core.partition.new_book).
    unit = np.array([0.0]), np.array([1.0])
    stats = ObjectStatistics.build(objects, 2, workers=1)
    stats.count_keyword_in_rects([0], unit[0], unit[0], unit[1], unit[1])
    rows = np.array([1])
    stats.keyword_sums_in_rects(kws, rows, unit[0], unit[0], unit[1], unit[1])
    stats.keyword_sums(kws, rows)
    ids = np.array([3, 5], dtype=np.int64)
    stats_kernel.bounds_in_buckets(ids, stats_kernel.axis_table(ids), ids)
    book = new_book.NewSubscriptionBook()
    book.add(ids, np.zeros(2, dtype=np.int32), np.zeros(2, dtype=np.int64), np.zeros(2), np.zeros(2), kws)
    new_book.pick_recosts(book, ids, np.ones(2), 0.5)
    new_book.ball_boxes_compiled(np.zeros(2), np.zeros(2), np.ones(2), Rect(0.0, 0.0, 1.0, 1.0))
