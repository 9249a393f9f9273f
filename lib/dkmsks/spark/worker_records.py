"""A worker's output records (:mod:`dkmsks.spark.bridge`): result changes, metrics and finals,
kept as numpy pieces per column while a batch is applied and made into Arrow tables once.

A batch of 100 timestamps makes hundreds of groups of records per worker; the columns are
assembled once from their pieces (:class:`WorkerRecords`), each as one chunk.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from dkmsks.core.model import Vocabulary

#: Arrow schema of the output records.
OUTPUT_SCHEMA = pa.schema([
    ("record", pa.string()), ("t", pa.int64()), ("seq", pa.int64()), ("worker", pa.int32()),
    ("sub_id", pa.int64()), ("change", pa.string()), ("object_ids", pa.list_(pa.int64())),
    ("d2", pa.list_(pa.float64())), ("x", pa.float64()), ("y", pa.float64()),
    ("keywords", pa.list_(pa.string())), ("k", pa.int32()), ("registered_t", pa.int64()),
    ("weight", pa.int64()), ("subset", pa.int64()), ("subscriptions", pa.int64()),
    ("pairs_tested", pa.int64()), ("pairs_in_ball", pa.int64()), ("results_changed", pa.int64()),
    ("knn_ms", pa.float64()), ("insert_ms", pa.float64()), ("delete_ms", pa.float64()),
])


def sort_rows(ptr: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Each CSR row's keys (``keys[ptr[i]:ptr[i+1]]``, non-negative, below 2^31) sorted, by one
    sort of ``row << 32 | key``: twice as fast as a lexsort of the two (100k objects' ~300k
    keyword ids: 16 against 36 ms, in every worker of a burst)."""
    owner = np.repeat(np.arange(ptr.shape[0] - 1, dtype=np.int64), np.diff(ptr))
    return np.sort((owner << 32) | keys) & 0xFFFFFFFF


#: The metric columns of a timestamp's metric record, in the order
#: :meth:`dkmsks.spark.bridge.WorkerSession._apply` gives them.
METRIC_COLUMNS = ("subscriptions", "pairs_tested", "pairs_in_ball", "results_changed", "knn_ms", "insert_ms",
                  "delete_ms")


@dataclass(frozen=True)
class _ListPiece:
    """Rows of a list column before they become Arrow: each row's length and the values;
    ``valid`` False where a row's list is null (none: every row has one)."""

    counts: np.ndarray
    values: np.ndarray
    valid: np.ndarray | None = None


def _keep(k: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Which entries of a kNN matrix (padded with id -1) are a row's first ``k`` present ones."""
    if ids.shape[0] == 0:
        return np.zeros((0, 1), dtype=bool)
    return (ids >= 0) & (np.arange(ids.shape[1])[None, :] < k[:, None])


def _lists(k: np.ndarray, ids: np.ndarray, values: np.ndarray) -> _ListPiece:
    """Rows of a kNN matrix (``values`` beside ``ids``, padded with id -1): each row's first
    ``k`` present entries."""
    keep = _keep(k, ids)
    return _ListPiece(keep.sum(axis=1), values[keep])


def _padded(matrix: np.ndarray, width: int, fill: float) -> np.ndarray:
    """``matrix`` with columns of ``fill`` added up to ``width``."""
    if matrix.shape[1] == width:
        return matrix
    out = np.full((matrix.shape[0], width), fill, dtype=matrix.dtype)
    out[:, :matrix.shape[1]] = matrix
    return out


def _column(arrow_type: pa.DataType, n: int, pieces: list[tuple[int, int, Any]]) -> pa.Array:
    """One output column of ``n`` rows from its pieces ``(first row, rows, value)``, null where
    no piece is: a value is a scalar for all its rows, an array, or a :class:`_ListPiece`."""
    present = np.zeros(n, dtype=bool)
    if pa.types.is_list(arrow_type):
        counts = np.zeros(n, dtype=np.int32)
        for first, rows, piece in pieces:
            present[first:first + rows] = True if piece.valid is None else piece.valid
            counts[first:first + rows] = piece.counts
        offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(counts, out=offsets[1:])
        flat = [piece.values for _, _, piece in pieces]
        values = pa.array(np.concatenate(flat) if flat else [], type=arrow_type.value_type)
        return pa.ListArray.from_arrays(pa.array(offsets), values, type=arrow_type,
                                        mask=None if present.all() else pa.array(~present))
    data = np.empty(n, dtype=object) if pa.types.is_string(arrow_type) else np.zeros(n, arrow_type.to_pandas_dtype())
    for first, rows, piece in pieces:
        present[first:first + rows] = True
        data[first:first + rows] = piece
    return pa.array(data, type=arrow_type, mask=None if present.all() else ~present)


class _Section:
    """Records of one section (:class:`WorkerRecords`) as numpy pieces per column."""

    def __init__(self) -> None:
        self.rows = 0
        self.pieces: dict[str, list[tuple[int, int, Any]]] = {f.name: [] for f in OUTPUT_SCHEMA}

    def part(self, n: int, columns: dict[str, Any]) -> None:
        for name, value in columns.items():
            if value is not None:
                self.pieces[name].append((self.rows, n, value))
        self.rows += n

    def table(self) -> pa.Table:
        if self.rows == 0:
            return OUTPUT_SCHEMA.empty_table()
        return pa.Table.from_arrays([_column(f.type, self.rows, self.pieces[f.name]) for f in OUTPUT_SCHEMA],
                                    schema=OUTPUT_SCHEMA)


class WorkerRecords:
    """Output records of one worker and batch, kept as numpy pieces per column and made into
    Arrow once, by :meth:`tables`. A batch of 100 timestamps makes ~400 groups of records per
    worker; an Arrow table per group (22 arrays, most of them all null) took 15 % of a worker's
    apply in one process (335 against 285 ms at |S| = 1M, m = 20). In follow's burst round it
    made no measurable difference: there page faults set the cost (jobs/follow/heap.py,
    keep_freed_memory).

    The result changes are kept apart from the other records (metrics, finals): a follow task
    writes a large round's changes into the journal itself and sends the rest to the driver
    (jobs/follow/worker_loop.py, ChangeFiles), and splitting one table by kind copied every list column."""

    def __init__(self, worker_id: int) -> None:
        self.worker_id = worker_id
        self.seq = 0
        self._changes = _Section()
        self._others = _Section()
        self._sub: list[np.ndarray] = []  # every change: sub id, t, seq, is a delete
        self._t: list[np.ndarray] = []
        self._seq: list[np.ndarray] = []
        self._del: list[np.ndarray] = []

    def changes_of(self, calls: Sequence[tuple[int, str, np.ndarray,
                                              tuple[np.ndarray, np.ndarray, np.ndarray] | None]]) -> None:
        """For each of ``calls`` (``(t, change, sub_ids, results)``) in turn, one ``change``
        record per id of ``sub_ids`` at ``t``, numbered on from the last ``seq``; ``results``
        (``(k, ids, d2)``, kNN matrices) their results, ``None`` for a deletion. Made in one go
        (a probe group's changes, three calls per timestamp, as one piece per column): the rows
        and ``seq`` of the calls made one at a time."""
        calls = [c for c in calls if c[2].shape[0]]
        if not calls:
            return
        counts = np.array([c[2].shape[0] for c in calls], dtype=np.int64)
        n = int(counts.sum())
        sub = np.concatenate([np.asarray(c[2], dtype=np.int64) for c in calls])
        t = np.repeat(np.array([c[0] for c in calls], dtype=np.int64), counts)
        change = np.repeat(np.array([c[1] for c in calls], dtype=object), counts)
        seq = self.seq + 1 + np.arange(n, dtype=np.int64)
        self.seq += n
        columns: dict[str, Any] = {"record": "change", "t": t, "seq": seq, "worker": self.worker_id,
                                   "sub_id": sub, "change": change}
        with_results = [c[3] for c in calls if c[3] is not None]
        if with_results:
            width = max(r[1].shape[1] for r in with_results)
            k = np.concatenate([r[0] for r in with_results])
            ids = np.concatenate([_padded(r[1], width, -1) for r in with_results])
            d2 = np.concatenate([_padded(r[2], width, np.inf) for r in with_results])
            keep = _keep(k, ids)
            valid = np.repeat(np.array([c[3] is not None for c in calls]), counts)
            lengths = np.zeros(n, dtype=np.int64)
            lengths[valid] = keep.sum(axis=1)
            columns["object_ids"] = _ListPiece(lengths, ids[keep], valid)
            columns["d2"] = _ListPiece(lengths, d2[keep], valid)
        self._changes.part(n, columns)
        self._sub.append(sub)
        self._t.append(t)
        self._seq.append(seq)
        self._del.append(change == "delete")

    def metrics(self, t: np.ndarray, **values: np.ndarray) -> None:
        """One metric record per entry of ``t``, each with its entry of ``values``' arrays (the
        :data:`METRIC_COLUMNS`)."""
        self._others.part(int(t.shape[0]), {"record": "metric", "t": t, "worker": self.worker_id, **values})

    def last_changes(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per subscription id (ascending): ``t``, ``seq`` and delete-ness of its last change."""
        if not self._sub:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty, np.zeros(0, dtype=bool)
        sub, t, seq, dele = (np.concatenate(a) for a in (self._sub, self._t, self._seq, self._del))
        order = np.lexsort((seq, sub))
        last = np.ones(order.shape[0], dtype=bool)
        last[:-1] = sub[order][1:] != sub[order][:-1]
        pick = order[last]
        return sub[pick], t[pick], seq[pick], dele[pick]

    def finals_upsert(self, final: Any, t: np.ndarray, seq: np.ndarray, weight: np.ndarray, subset: np.ndarray,
                      vocab: Vocabulary) -> None:
        """A ``final`` upsert per row of ``final`` (the subscriptions' state arrays, ascending
        ids) with the ``t`` and ``seq`` of its last change, its weight and plan subset;
        keyword ids are written as ``vocab``'s words, each row's in text order."""
        n = len(final)
        kw = final.keywords
        ptr = np.asarray(kw.ptr, dtype=np.int64)
        # Each row's words in text order: its ids' ranks among the words these rows use, sorted,
        # read back (only those are ranked: a task's vocabulary can hold 100k+ words).
        used, local = np.unique(np.asarray(kw.ids, dtype=np.int64), return_inverse=True)
        word_array = np.asarray([vocab.word(k) for k in used.tolist()], dtype=str)
        in_text_order = np.argsort(word_array, kind="stable")
        rank = np.empty(in_text_order.shape[0], dtype=np.int64)
        rank[in_text_order] = np.arange(in_text_order.shape[0])
        keywords = _ListPiece(np.diff(ptr), word_array[in_text_order[sort_rows(ptr, rank[local.reshape(-1)])]])
        self._others.part(n, {
            "record": "final", "t": t, "seq": seq, "worker": self.worker_id, "sub_id": final.sub_ids,
            "change": "upsert", "object_ids": _lists(final.k, final.ids, final.ids),
            "d2": _lists(final.k, final.ids, final.d2), "x": final.x, "y": final.y,
            "keywords": keywords, "k": final.k, "registered_t": final.t, "weight": weight, "subset": subset,
        })

    def finals_delete(self, sub_ids: np.ndarray, t: np.ndarray, seq: np.ndarray) -> None:
        """A ``final`` delete per id of ``sub_ids``, with the ``t`` and ``seq`` of its deletion."""
        if sub_ids.shape[0]:
            self._others.part(int(sub_ids.shape[0]), {"record": "final", "t": t, "seq": seq, "worker": self.worker_id,
                                               "sub_id": sub_ids, "change": "delete"})

    def tables(self) -> tuple[pa.Table, pa.Table]:
        """The result changes and the other records, each in the order made, as tables of one
        chunk per column (thousands of small chunks made the IPC transfer and the journal
        append several times slower)."""
        return self._changes.table(), self._others.table()

    def table(self) -> pa.Table:
        """Every record: the changes, then the other records, each in the order made."""
        return pa.concat_tables(self.tables())


def no_results(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(k, ids, d2)`` of ``n`` empty results (a new subscription starts empty, docs/design.md §1)."""
    return np.zeros(n, np.int32), np.full((n, 1), -1, np.int64), np.full((n, 1), np.inf)
