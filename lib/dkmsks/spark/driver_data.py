"""Moving table data between Delta and the core on the driver (the main server's side).

Arrow is the bridge: list columns convert to CSR keyword sets and kNN matrices without a
Python loop per row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from dkmsks.core.knn_state import StateArrays
from dkmsks.core.model import KeywordSets, Objects, Op, SubscriptionEvents, Vocabulary
from dkmsks.spark import tables


def _keywords(col: pa.ChunkedArray | pa.Array, vocab: Vocabulary) -> KeywordSets:
    """An Arrow list<string> column -> CSR keyword ids (each row sorted, distinct)."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    offsets = np.asarray(arr.offsets, dtype=np.int64)
    offsets = offsets - offsets[0]
    values = arr.flatten().to_numpy(zero_copy_only=False)
    if values.shape[0]:
        uniq, codes = np.unique(values.astype(str), return_inverse=True)
        mapping = np.fromiter((vocab.id_of(w) for w in uniq.tolist()), dtype=np.int32, count=uniq.shape[0])
        ids = mapping[codes]
    else:
        ids = np.zeros(0, dtype=np.int32)
    # Sort ids within each row (vocabulary ids need not follow string order).
    owner = np.repeat(np.arange(offsets.shape[0] - 1), np.diff(offsets))
    order = np.lexsort((ids, owner))
    return KeywordSets(offsets, ids[order].astype(np.int32))


def _col(table: pa.Table, name: str, dtype: type) -> np.ndarray:
    return np.asarray(table.column(name).to_numpy(), dtype=dtype)


def to_objects(table: pa.Table, vocab: Vocabulary) -> Objects:
    return Objects(
        _col(table, "id", np.int64), _col(table, "x", np.float64), _col(table, "y", np.float64),
        _keywords(table.column("keywords"), vocab), _col(table, "t", np.int64),
    )


def read_objects_between(
    spark: SparkSession, vocab: Vocabulary, *, after: int | None, upto: int | None
) -> Objects:
    """Objects with ``after < t <= upto`` (either bound optional), in stream order."""
    df = spark.table(tables.OBJECTS)
    if after is not None:
        df = df.where(F.col("t") > after)
    if upto is not None:
        df = df.where(F.col("t") <= upto)
    table = df.select("id", "x", "y", "keywords", "t", "line").orderBy("t", "source", "line").toArrow()
    return to_objects(table, vocab)


def read_events_between(
    spark: SparkSession, vocab: Vocabulary, *, after: int | None, upto: int | None
) -> SubscriptionEvents:
    """Subscription events with ``after < t <= upto`` in replay order (t, deletions first)."""
    df = spark.table(tables.EVENTS)
    if after is not None:
        df = df.where(F.col("t") > after)
    if upto is not None:
        df = df.where(F.col("t") <= upto)
    op_rank = F.when(F.col("op") == "delete", 0).otherwise(1)
    table = (
        df.select("op", "id", "x", "y", F.coalesce("keywords", F.array().cast("array<string>")).alias("keywords"),
                  F.coalesce("k", F.lit(0)).alias("k"), "t", op_rank.alias("op_rank"), "source", "line")
        .orderBy("t", "op_rank", "source", "line")
        .toArrow()
    )
    ops = np.where(np.asarray(table.column("op").to_pylist()) == "delete", Op.DELETE, Op.INSERT)
    x = pc.fill_null(table.column("x"), np.nan)
    y = pc.fill_null(table.column("y"), np.nan)
    return SubscriptionEvents(
        ops.astype(np.int8), _col(table, "id", np.int64),
        np.asarray(x.to_numpy(), dtype=np.float64), np.asarray(y.to_numpy(), dtype=np.float64),
        _keywords(table.column("keywords"), vocab), _col(table, "k", np.int32), _col(table, "t", np.int64),
    )


@dataclass(frozen=True)
class StateColumns:
    """The driver's view of ``knn_state``: who holds what, at which cost."""

    sub_ids: np.ndarray
    worker: np.ndarray
    weight: np.ndarray
    subset: np.ndarray
    plan_version: int | None


def read_state_columns(spark: SparkSession, version: int | None = None) -> StateColumns:
    """``sub_id, worker, weight, subset`` of every live subscription (optionally time-travelled)."""
    df = state_frame(spark, version)
    table = df.select("sub_id", "worker", "weight", "subset", "plan_version").orderBy("sub_id").toArrow()
    pv = table.column("plan_version")
    return StateColumns(
        _col(table, "sub_id", np.int64), _col(table, "worker", np.int32), _col(table, "weight", np.int64),
        _col(table, "subset", np.int64), int(pv[0].as_py()) if len(pv) else None,
    )


def state_frame(spark: SparkSession, version: int | None = None) -> DataFrame:
    """``knn_state`` as of a Delta version (latest when ``None``)."""
    if version is None:
        return spark.table(tables.STATE)
    return spark.read.option("versionAsOf", int(version)).table(tables.STATE)


def read_state_arrays(spark: SparkSession, vocab: Vocabulary, version: int | None = None) -> tuple[StateArrays, np.ndarray]:
    """Every live subscription with its kNN matrices (for repartitioning); also the workers."""
    table = state_frame(spark, version).orderBy("sub_id").toArrow()
    n = table.num_rows
    k = _col(table, "k", np.int32)
    width = max(int(k.max()) if n else 1, 1)
    ids = np.full((n, width), -1, dtype=np.int64)
    d2 = np.full((n, width), np.inf, dtype=np.float64)
    oid_col = table.column("object_ids").combine_chunks()
    d2_col = table.column("d2").combine_chunks()
    offsets = np.asarray(oid_col.offsets, dtype=np.int64)
    lengths = np.diff(offsets)
    rows = np.repeat(np.arange(n), lengths)
    pos = np.arange(offsets[-1] - offsets[0]) - np.repeat(offsets[:-1] - offsets[0], lengths)
    ids[rows, pos] = oid_col.flatten().to_numpy()
    d2[rows, pos] = d2_col.flatten().to_numpy()
    arrays = StateArrays(
        _col(table, "sub_id", np.int64), _col(table, "x", np.float64), _col(table, "y", np.float64),
        _keywords(table.column("keywords"), vocab), k, _col(table, "registered_t", np.int64), ids, d2,
    )
    return arrays, _col(table, "worker", np.int32)


def list_column(matrix: np.ndarray, lengths: np.ndarray, dtype: pa.DataType) -> pa.ListArray:
    """The first ``lengths[i]`` entries of each row of ``matrix`` as an Arrow list column."""
    offsets = np.zeros(matrix.shape[0] + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    mask = np.arange(matrix.shape[1])[None, :] < lengths[:, None]
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(matrix[mask], type=dtype))


def keyword_list_column(keywords: KeywordSets, vocab: Vocabulary) -> pa.ListArray:
    words = np.asarray(vocab.words, dtype=object)
    offsets = keywords.ptr.astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(words[keywords.ids].tolist(), type=pa.string()))
