"""Spark readers for objects and subscription-event files, with the same checks as the numpy
readers of :mod:`dkmsks.io.formats`.

Each reader returns ``(accepted, rejected)`` DataFrames; ``rejected`` has the
:data:`~dkmsks.spark.schemas.QUARANTINE` schema (source, line, reason, text). Validation is
written as Spark SQL expressions (no Python UDF on the hot path); only the per-id replay of
subscription events runs in Python, through ``mapInPandas``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from dkmsks.core.model import Rect
from dkmsks.io.formats import EVENT_COLUMNS, KEYWORD_PATTERN, MAX_K, OBJECT_COLUMNS, WGS84, InputError
from dkmsks.spark import schemas

_KEYWORD_REGEX = "^" + KEYWORD_PATTERN.pattern + "$"


def _lines(spark: SparkSession, path: Path, columns: tuple[str, ...]) -> tuple[DataFrame, int]:
    """``(line, fields array<string>)`` rows in expected column order, and the header width.

    Line numbers count from 1 at the header, as in the numpy readers. ``zipWithIndex`` keeps
    file order (a gzip file is one partition; plain text splits keep their order).
    """
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if path.suffix == ".parquet":
        df = spark.read.parquet(str(path))
        missing = [c for c in columns if c not in df.columns]
        if missing:
            raise InputError(f"{path}: Parquet columns {df.columns} lack {missing}")
        fields = F.array(*[F.coalesce(F.col(c).cast("string"), F.lit("")) for c in columns])
        indexed = df.select(fields.alias("fields")).rdd.zipWithIndex()
        out = indexed.map(lambda r: (r[1] + 2, r[0][0], len(columns))).toDF(
            "line long, fields array<string>, width int"
        )
        return out, len(columns)
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    delim = "," if name.endswith(".csv") else "\t"
    raw = spark.read.text(str(path)).rdd.zipWithIndex()
    header_rows = raw.filter(lambda r: r[1] == 0).map(lambda r: r[0][0]).collect()
    if not header_rows:
        raise InputError(f"{path}: the file is empty (no header line)")
    header_text = header_rows[0].lstrip("\ufeff")  # a UTF-8 byte order mark is not a column name
    if "\ufffd" in header_text or "\x00" in header_text:
        # Spark decodes text as UTF-8 and replaces what is not: the whole file is unusable.
        raise InputError(f"{path}: the header line is not UTF-8 text (a UTF-16 or Latin-1 file?); "
                         "save the file as UTF-8")
    header = [h.strip().lower() for h in header_text.split(delim)]
    missing = [c for c in columns if c not in header]
    if missing:
        raise InputError(
            f"{path}: header {header} lacks column(s) {missing}; expected {' '.join(columns)} "
            f"separated by {'tabs' if delim == chr(9) else 'commas'}"
        )
    positions = [header.index(c) for c in columns]
    width = len(header)

    def split(row: tuple) -> tuple[int, list[str], int, str]:
        text, idx = row[0][0], row[1]
        parts = text.split(delim)
        picked = [parts[p] if p < len(parts) else "" for p in positions]
        return (idx + 1, picked, len(parts), text)

    out = (
        raw.filter(lambda r: r[1] > 0 and r[0][0].strip() != "")
        .map(split)
        .toDF("line long, fields array<string>, width int, text string")
    )
    return out, width


def _coord_check(name: str, col: Column, low: float | None, high: float | None) -> list[tuple[Column, Column]]:
    checks = [
        (col.isNull(), F.format_string(f"{name} '%s' is not a number", F.col(f"raw_{name}"))),
        (F.isnan(col) | (F.abs(col) == float("inf")),
         F.format_string(f"{name} is %s, coordinates must be finite", F.col(f"raw_{name}"))),
    ]
    if low is not None and high is not None:
        checks.append(
            ((col < low) | (col > high), F.format_string(f"{name} %s is outside [{low}, {high}]", col))
        )
    return checks


def _first_failure(checks: list[tuple[Column, Column]]) -> Column:
    """The message of the first failing check, or NULL when every check passes."""
    expr = F.lit(None).cast("string")
    for cond, message in reversed(checks):
        expr = F.when(cond, message).otherwise(expr)
    return expr


def _keyword_checks(kw: Column) -> list[tuple[Column, Column]]:
    bad = F.filter(kw, lambda w: ~w.rlike(_KEYWORD_REGEX))
    return [
        ((F.size(kw) == 1) & (kw[0] == ""), F.lit("keywords are empty")),
        (F.exists(kw, lambda w: w == ""), F.lit("keywords contain an empty token (use single spaces)")),
        (F.size(bad) > 0, F.format_string(
            "keyword '%s' is not normalised (lower-case [a-z0-9] words joined by '_')", bad[0])),
    ]


def _split(df: DataFrame, width: int, source: str, columns: tuple[str, ...]) -> DataFrame:
    cols = [F.col("fields")[i].alias(f"raw_{c}") for i, c in enumerate(columns)]
    text = F.col("text") if "text" in df.columns else F.array_join("fields", "\t")
    return df.select(
        F.lit(source).alias("source"), "line", "width", text.alias("text"), *cols
    ).withColumn("expected_width", F.lit(width))


def _encoding_check() -> tuple[Column, Column]:
    """Spark's text source replaces bytes that are not UTF-8 by U+FFFD: such a line is refused
    with the numpy reader's reason (a keyword or number read through replacements is garbage)."""
    return (F.col("text").contains("\ufffd"), F.lit("line is not valid UTF-8 text"))


def _rejected(df: DataFrame) -> DataFrame:
    return df.where(F.col("reason").isNotNull()).select(
        "source", "line", "reason", F.substring("text", 1, 500).alias("text")
    )


def read_objects_df(
    spark: SparkSession, path: str | Path, *, bounds: Rect | None = WGS84,
    landed: DataFrame | None = None, processed_through: int | None = None,
) -> tuple[DataFrame, DataFrame]:
    """Objects file -> (accepted rows with the OBJECTS schema plus ``line``, quarantine rows).

    Same rules as :func:`dkmsks.io.formats.read_objects`; keyword arrays are de-duplicated
    and sorted. Against what earlier ingestions landed (``landed``: the ``objects`` table) a
    row is also refused when its id is already landed with other values (a duplicate across
    files or batches; the same values are a replay and pass, the insert-only MERGE skips
    them), and when its timestamp was already processed (``t <= processed_through``) and it is
    not a replay: a late row would never be applied.
    """
    path = Path(path)
    lines, width = _lines(spark, path, OBJECT_COLUMNS)
    df = _split(lines, width, path.name, OBJECT_COLUMNS)
    low_x, high_x, low_y, high_y = (
        (bounds.xmin, bounds.xmax, bounds.ymin, bounds.ymax) if bounds else (None,) * 4
    )
    df = df.select(
        "*",
        F.expr("try_cast(trim(raw_id) AS BIGINT)").alias("id"),
        F.expr("try_cast(raw_x AS DOUBLE)").alias("x"),
        F.expr("try_cast(raw_y AS DOUBLE)").alias("y"),
        F.split(F.trim("raw_keywords"), " ").alias("kw"),
        F.expr("try_cast(trim(raw_t) AS BIGINT)").alias("t"),
    )
    checks = [
        _encoding_check(),
        (F.col("width") != F.col("expected_width"),
         F.format_string("wrong column count: expected %d, got %d", "expected_width", "width")),
        (F.col("id").isNull(), F.format_string("id '%s' is not an integer", "raw_id")),
        *_coord_check("x", F.col("x"), low_x, high_x),
        *_coord_check("y", F.col("y"), low_y, high_y),
        *_keyword_checks(F.col("kw")),
        (F.col("t").isNull(), F.format_string("t '%s' is not an integer", "raw_t")),
    ]
    df = df.withColumn("reason", _first_failure(checks))
    # Later repeats of an id are rejected; the first occurrence in file order wins.
    from pyspark.sql.window import Window

    by_id = Window.partitionBy("id")
    valid = df.where(F.col("reason").isNull()).withColumn("first_line", F.min("line").over(by_id))
    dup_reason = F.format_string("duplicate object id %d (first seen on line %d)", "id", "first_line")
    valid = valid.withColumn(
        "reason", F.when(F.col("line") != F.col("first_line"), dup_reason)
    ).drop("first_line")
    valid = _against_landed_objects(valid, landed, processed_through)
    rejected = _rejected(df).unionByName(_rejected(valid))
    accepted = valid.where(F.col("reason").isNull()).select(
        "id", "x", "y", F.array_sort(F.array_distinct("kw")).alias("keywords"), "t", "line"
    )
    return accepted, rejected


def _late_reason(processed_through: int) -> Column:
    return F.format_string(
        f"t=%d is already processed (last processed timestamp {int(processed_through)}): "
        "a late row is never applied", "t")


def _against_landed_objects(valid: DataFrame, landed: DataFrame | None, processed_through: int | None) -> DataFrame:
    """Reasons for rows that conflict with landed objects or arrive after their timestamp."""
    is_landed = F.lit(False)
    if landed is not None:
        prior = landed.select(
            "id", F.col("x").alias("_lx"), F.col("y").alias("_ly"), F.col("t").alias("_lt"),
            F.array_sort(F.array_distinct("keywords")).alias("_lkw"),
            F.col("source").alias("_lsource"), F.col("line").alias("_lline"))
        valid = valid.join(prior, "id", "left")
        is_landed = F.col("_lt").isNotNull()
        same = ((F.col("x") == F.col("_lx")) & (F.col("y") == F.col("_ly")) & (F.col("t") == F.col("_lt"))
                & (F.array_sort(F.array_distinct("kw")) == F.col("_lkw")))
        conflict = F.format_string("duplicate object id %d (already ingested from %s line %d)",
                                   "id", "_lsource", "_lline")
        valid = valid.withColumn("reason", F.coalesce("reason", F.when(is_landed & ~same, conflict)))
    if processed_through is not None:
        late = (F.col("t") <= processed_through) & ~is_landed
        valid = valid.withColumn("reason", F.coalesce("reason", F.when(late, _late_reason(processed_through))))
    return valid


_REPLAY_SCHEMA = StructType(
    [StructField("line", LongType(), False), StructField("reason", StringType(), True)]
)


def replay_liveness(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    """Per-id replay of subscription events (the ``mapInPandas`` bridge, Spark-free).

    Input rows carry ``id, t, op, line`` sorted by ``(id, t, deletions first, line)`` within
    the partition, with all rows of an id in one partition. Outputs ``(line, reason)`` with a
    reason for a delete of a non-live id or an insert of a live id, NULL otherwise.
    """
    current_id: int | None = None
    live = False
    for pdf in batches:
        reasons: list[str | None] = []
        for sid, t, op in zip(pdf["id"].tolist(), pdf["t"].tolist(), pdf["op"].tolist(), strict=True):
            if sid != current_id:
                current_id, live = sid, False
            if op == "delete":
                reasons.append(None if live else f"delete of subscription {sid}, which is not live at t={t}")
                live = False
            else:
                reasons.append(f"insert of subscription {sid}, which is already live" if live else None)
                live = True
        yield pd.DataFrame({"line": pdf["line"].astype("int64"), "reason": reasons})


def read_events_df(
    spark: SparkSession, path: str | Path, *, bounds: Rect | None = WGS84, max_k: int = MAX_K,
    landed: DataFrame | None = None, processed_through: int | None = None,
) -> tuple[DataFrame, DataFrame]:
    """Subscription events file -> (accepted events with ``line``, quarantine rows).

    Same rules as :func:`dkmsks.io.formats.read_events`, including the replay in timestamp
    order with deletions before insertions, done per id in parallel. The replay starts from
    the events earlier ingestions landed (``landed``: ``id, t, op`` of the
    ``subscription_events`` table), so a batch file may delete a subscription registered by an
    earlier file; a row equal on ``(id, t, op)`` to a landed one is a replay and passes. A row
    for an already processed timestamp (``t <= processed_through``) that is not a replay is
    refused as late.
    """
    path = Path(path)
    lines, width = _lines(spark, path, EVENT_COLUMNS)
    df = _split(lines, width, path.name, EVENT_COLUMNS)
    low_x, high_x, low_y, high_y = (
        (bounds.xmin, bounds.xmax, bounds.ymin, bounds.ymax) if bounds else (None,) * 4
    )
    df = df.select(
        "*",
        F.lower(F.trim("raw_op")).alias("op"),
        F.expr("try_cast(trim(raw_id) AS BIGINT)").alias("id"),
        F.expr("try_cast(raw_x AS DOUBLE)").alias("x"),
        F.expr("try_cast(raw_y AS DOUBLE)").alias("y"),
        F.split(F.trim("raw_keywords"), " ").alias("kw"),
        F.expr("try_cast(trim(raw_k) AS INT)").alias("k"),
        F.expr("try_cast(trim(raw_t) AS BIGINT)").alias("t"),
    )
    is_insert = F.col("op") == "insert"
    insert_checks = [
        *_coord_check("x", F.col("x"), low_x, high_x),
        *_coord_check("y", F.col("y"), low_y, high_y),
        *_keyword_checks(F.col("kw")),
        (F.col("k").isNull(), F.format_string("k '%s' is not an integer", "raw_k")),
        (F.col("k") < 1, F.format_string("k is %d, it must be at least 1", "k")),
        (F.col("k") > max_k, F.format_string(f"k is %d, more than the limit of {max_k}", "k")),
    ]
    checks = [
        _encoding_check(),
        (F.col("width") != F.col("expected_width"),
         F.format_string("wrong column count: expected %d, got %d", "expected_width", "width")),
        (~F.col("op").isin("insert", "delete"),
         F.format_string("unknown op '%s'; valid ops: insert, delete", "raw_op")),
        (F.col("id").isNull(), F.format_string("id '%s' is not an integer", "raw_id")),
        (F.col("t").isNull(), F.format_string("t '%s' is not an integer", "raw_t")),
        *[(is_insert & cond, msg) for cond, msg in insert_checks],
    ]
    df = df.withColumn("reason", _first_failure(checks))
    valid = df.where(F.col("reason").isNull()).withColumn("_known", F.lit(False))
    if landed is not None:
        known = landed.select("id", "t", "op").distinct().withColumn("_landed", F.lit(True))
        valid = (valid.drop("_known").join(known, ["id", "t", "op"], "left")
                 .withColumn("_known", F.coalesce("_landed", F.lit(False))).drop("_landed"))
    late = _rejected(valid.where(F.lit(False)).withColumn("reason", F.lit("")))
    if processed_through is not None:
        is_late = (F.col("t") <= processed_through) & ~F.col("_known")
        late = _rejected(valid.where(is_late).withColumn("reason", _late_reason(processed_through)))
        valid = valid.where(~is_late)
    op_rank = F.when(F.col("op") == "delete", 0).otherwise(1)
    replay_src = valid.where(~F.col("_known")).select("id", "t", "op", "line")
    if landed is not None:
        # Landed events come first within a (t, op) and carry line -1: they set liveness only.
        replay_src = replay_src.unionByName(landed.select("id", "t", "op", F.lit(-1).cast("long").alias("line")))
    replayed = (
        replay_src.select("id", "t", "op", "line", op_rank.alias("op_rank"))
        .repartition("id")
        .sortWithinPartitions("id", "t", "op_rank", "line")
        .select("id", "t", "op", "line")
        .mapInPandas(replay_liveness, _REPLAY_SCHEMA)
        .where(F.col("line") >= 0)
    )
    valid = valid.drop("reason").join(replayed, "line", "left").drop("_known")
    rejected = _rejected(df).unionByName(late).unionByName(_rejected(valid))
    insert = F.col("op") == "insert"
    accepted = valid.where(F.col("reason").isNull()).select(
        "op",
        "id",
        F.when(insert, F.col("x")).alias("x"),
        F.when(insert, F.col("y")).alias("y"),
        F.when(insert, F.array_sort(F.array_distinct("kw"))).alias("keywords"),
        F.when(insert, F.col("k")).alias("k"),
        "t",
        "line",
    )
    return accepted, rejected


__all__ = ["read_events_df", "read_objects_df", "replay_liveness", "schemas"]
