"""Moving table data between Delta and the core on the driver (the main server's side).

Reads go through delta-rs (:mod:`dkmsks.storage.lake`), not a Spark job: the rows a
micro-batch needs are few. Arrow is the bridge: list columns convert to CSR keyword sets
and kNN matrices without a Python loop per row.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dkmsks.core.model import KeywordSets, Objects, Op, SubscriptionEvents, Vocabulary
from dkmsks.storage import tables
from dkmsks.storage.lake import Lake, where


def keyword_sets(col: pa.ChunkedArray | pa.Array, vocab: Vocabulary) -> KeywordSets:
    """An Arrow list<string> column -> CSR keyword ids (each row sorted, distinct)."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    offsets = np.asarray(arr.offsets, dtype=np.int64)
    offsets = offsets - offsets[0]
    values = arr.flatten()
    if len(values):
        # Arrow's hash-based dictionary encoding: one Python call per distinct word, not per
        # word (np.unique over 3M strings took 4 s of a 1M-object read).
        encoded = pc.dictionary_encode(values)
        if isinstance(encoded, pa.ChunkedArray):
            encoded = encoded.combine_chunks()
        words = encoded.dictionary.to_pylist()
        mapping = np.fromiter((vocab.id_of(w) for w in words), dtype=np.int32, count=len(words))
        ids = mapping[np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)]
    else:
        ids = np.zeros(0, dtype=np.int32)
    # Sort ids within each row (vocabulary ids need not follow string order).
    owner = np.repeat(np.arange(offsets.shape[0] - 1), np.diff(offsets))
    order = np.lexsort((ids, owner))
    return KeywordSets(offsets, ids[order].astype(np.int32))


def _col(table: pa.Table, name: str, dtype: type) -> np.ndarray:
    return np.asarray(table.column(name).to_numpy(), dtype=dtype)


def to_objects(table: pa.Table, vocab: Vocabulary) -> Objects:
    """The core's objects of an Arrow table (keywords mapped through ``vocab``)."""
    return Objects(
        _col(table, "id", np.int64), _col(table, "x", np.float64), _col(table, "y", np.float64),
        keyword_sets(table.column("keywords"), vocab), _col(table, "t", np.int64),
    )


def read_objects_between(lake: Lake, vocab: Vocabulary, *, after: int | None, upto: int | None) -> Objects:
    """Objects with ``after < t <= upto`` (either bound optional), in stream order."""
    table = lake.read(tables.OBJECTS, columns=["id", "x", "y", "keywords", "t", "source", "line"],
                      predicate=where(t__gt=after, t__le=upto))
    table = table.sort_by([("t", "ascending"), ("source", "ascending"), ("line", "ascending")])
    return to_objects(table, vocab)


def read_events_between(lake: Lake, vocab: Vocabulary, *, after: int | None, upto: int | None) -> SubscriptionEvents:
    """Subscription events with ``after < t <= upto`` in replay order (t, deletions first)."""
    table = lake.read(tables.EVENTS, columns=["op", "id", "x", "y", "keywords", "k", "t", "source", "line"],
                      predicate=where(t__gt=after, t__le=upto))
    is_insert = pc.equal(table.column("op"), "insert")
    table = table.append_column("op_rank", pc.cast(is_insert, pa.int8()))
    table = table.sort_by([("t", "ascending"), ("op_rank", "ascending"), ("source", "ascending"),
                           ("line", "ascending")])
    keywords = table.column("keywords").combine_chunks()
    if keywords.null_count:  # deletions carry no keywords
        keywords = pc.if_else(pc.is_null(keywords), pa.scalar([], type=keywords.type), keywords)
    ops = np.where(np.asarray(table.column("op_rank").to_numpy()) == 0, Op.DELETE, Op.INSERT)
    return SubscriptionEvents(
        ops.astype(np.int8), _col(table, "id", np.int64),
        np.asarray(pc.fill_null(table.column("x"), np.nan).to_numpy(), dtype=np.float64),
        np.asarray(pc.fill_null(table.column("y"), np.nan).to_numpy(), dtype=np.float64),
        keyword_sets(keywords, vocab),
        np.asarray(pc.fill_null(table.column("k"), 0).to_numpy(), dtype=np.int32), _col(table, "t", np.int64),
    )


def pending_timestamps(lake: Lake, after: int | None, until: int | None = None) -> list[int]:
    """Distinct timestamps after ``after`` (and up to ``until``; ``None``: no bound) with objects or events."""
    found: set[int] = set()
    for name in (tables.OBJECTS, tables.EVENTS):
        t = lake.read(name, columns=["t"], predicate=where(t__gt=after, t__le=until)).column("t")
        found.update(pc.unique(t).to_pylist())
    return sorted(int(v) for v in found)


def list_column(matrix: np.ndarray, lengths: np.ndarray, dtype: pa.DataType) -> pa.ListArray:
    """The first ``lengths[i]`` entries of each row of ``matrix`` as an Arrow list column."""
    offsets = np.zeros(matrix.shape[0] + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    mask = np.arange(matrix.shape[1])[None, :] < lengths[:, None]
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(matrix[mask], type=dtype))


def keyword_list_column(keywords: KeywordSets, vocab: Vocabulary) -> pa.ListArray:
    """Keyword sets as an Arrow list-of-strings column."""
    words = np.asarray(vocab.words, dtype=object)
    offsets = keywords.ptr.astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(words[keywords.ids].tolist(), type=pa.string()))
