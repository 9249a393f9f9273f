"""Spark readers for objects and subscription-event files, with the rules of
:mod:`dkmsks.io.formats` (its patterns, limits and :class:`~dkmsks.io.formats.Bounds`; the
:class:`~dkmsks.io.rejections.Reason` texts) written as Spark SQL expressions.

Each reader returns ``(accepted, rejected)`` DataFrames; ``rejected`` has the
:data:`~dkmsks.spark.schemas.QUARANTINE` schema (source, line, reason, text). For the same
line both readers give the same reason; ``tests/spark/test_delta_ingest.py`` runs the whole
bad-input catalogue through both and compares their quarantine rows line by line. Validation
is SQL (no Python UDF on the hot path); only the per-id replay of subscription events runs in
Python, through ``mapInPandas``.

Broken gzip data is found on the driver before any Spark job
(:func:`~dkmsks.io.raw_rows.check_gzip_data`), so the user sees one line, not an executor's JVM
stack trace; a failure Spark still meets while reading a file (one that changed meanwhile, a
broken Parquet footer) becomes a one-line :class:`~dkmsks.io.rejections.InputError` through
:func:`file_read_errors`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType
from pyspark.sql.window import Window

from dkmsks.io.formats import (
    DECIMAL_PATTERN,
    EVENT_COLUMNS,
    INTEGER_PATTERN,
    KEYWORD_PATTERN,
    MAX_K,
    MAX_KEYWORD_LENGTH,
    NON_FINITE_PATTERN,
    OBJECT_COLUMNS,
    Bounds,
)
from dkmsks.io.raw_rows import check_file, check_gzip_data
from dkmsks.io.rejections import QUOTE_LIMIT, TEXT_LIMIT, InputError, Reason, corrupt_gzip_error, truncated_gzip_error
from dkmsks.spark import schemas


def _whole_value(pattern: re.Pattern[str]) -> str:
    r"""``pattern`` as a Java regex that must match a whole value. ``rlike`` searches, and
    Java's ``$`` also matches before a final line terminator (``cafe\u2028``); ``\z`` does not."""
    return "^(?:" + pattern.pattern + ")\\z"


_INTEGER = _whole_value(INTEGER_PATTERN)
_DECIMAL = _whole_value(DECIMAL_PATTERN)
_NON_FINITE = _whole_value(NON_FINITE_PATTERN)
_KEYWORD = _whole_value(KEYWORD_PATTERN)


# --------------------------------------------------------------------------- reading a file


def _java_causes(err: Exception) -> list[tuple[str, str]]:
    """``(class, message)`` of the JVM exception behind ``err`` and each of its causes."""
    java = getattr(err, "java_exception", None) or getattr(err, "_origin", None)
    chain: list[tuple[str, str]] = []
    while java is not None and len(chain) < 32:
        chain.append((str(java.getClass().getName()), str(java.getMessage())))
        java = java.getCause()
    return chain


@contextmanager
def file_read_errors(path: Path) -> Iterator[None]:
    """Turn Spark's failure to read ``path`` into one :class:`InputError` line naming the file
    and the problem, instead of a JVM stack trace: a truncated gzip stream (Hadoop's codec
    throws ``java.io.EOFException: Unexpected end of input stream``), corrupt gzip data or an
    unreadable Parquet file. Other errors pass unchanged."""
    try:
        yield
    except Exception as err:
        causes = _java_causes(err)
        if not any("FAILED_READ_FILE" in message for _, message in causes):
            raise
        if path.name.endswith(".gz"):
            truncated = any(cls == "java.io.EOFException" for cls, _ in causes)
            raise (truncated_gzip_error(path) if truncated else corrupt_gzip_error(path)) from None
        root = causes[-1][1]
        raise InputError(f"{path}: the file cannot be read ({root}); nothing was loaded") from None


def _lines(spark: SparkSession, path: Path, columns: tuple[str, ...]) -> tuple[DataFrame, int]:
    r"""``(line, fields array<string>, width, blank, text)`` rows (fields in expected column
    order) and the header width.

    Line numbers count from 1 at the header, as in the numpy readers. Lines end at ``\n``
    only, as there; trailing ``\r`` are dropped and empty lines carry no row.
    ``zipWithIndex`` keeps file order (a gzip file is one partition; plain text splits keep
    their order).
    """
    check_file(path)
    if path.suffix == ".parquet":
        with file_read_errors(path):
            df = spark.read.parquet(str(path))
        missing = [c for c in columns if c not in df.columns]
        if missing:
            raise InputError(f"{path}: Parquet columns {df.columns} lack {missing}")
        fields = F.array(*[F.coalesce(F.col(c).cast("string"), F.lit("")) for c in columns])
        indexed = df.select(fields.alias("fields")).rdd.zipWithIndex()
        out = indexed.map(lambda r: (r[1] + 2, r[0][0], len(columns), False)).toDF(
            "line long, fields array<string>, width int, blank boolean"
        )
        return out, len(columns)
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    if name != path.name:
        check_gzip_data(path)  # before any Spark job: an executor would log a JVM stack trace first
    delim = "," if name.endswith(".csv") else "\t"
    raw = spark.read.option("lineSep", "\n").text(str(path)).rdd.zipWithIndex()
    with file_read_errors(path):
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
    blank = " " + delim

    def split(row: tuple) -> tuple[int, list[str], int, bool, str]:
        text, idx = row[0][0].rstrip("\r"), row[1]
        parts = text.split(delim)
        picked = [parts[p] if p < len(parts) else "" for p in positions]
        return (idx + 1, picked, len(parts), not text.strip(blank), text)

    out = (
        raw.filter(lambda r: r[1] > 0 and r[0][0].rstrip("\r") != "")
        .map(split)
        .toDF("line long, fields array<string>, width int, blank boolean, text string")
    )
    return out, width


# --------------------------------------------------------------------------- field rules


def _shorten(value: Column) -> Column:
    """:func:`dkmsks.io.rejections.shorten` as an expression."""
    return F.when(F.length(value) > QUOTE_LIMIT, F.concat(F.substring(value, 1, QUOTE_LIMIT), F.lit("..."))
                  ).otherwise(value)


def _raw(name: str) -> Column:
    return F.col(f"raw_{name}")


def _integer(name: str) -> Column:
    """The int64 value of field ``name``; NULL when it breaks the rule (see the checks)."""
    value = F.trim(_raw(name))
    return F.when(value.rlike(_INTEGER), value.try_cast("bigint"))


def _integer_checks(name: str) -> list[tuple[Column, Column]]:
    value = F.trim(_raw(name))
    quoted = _shorten(_raw(name))
    return [
        (~value.rlike(_INTEGER), F.format_string(Reason.NOT_INTEGER, F.lit(name), quoted)),
        (F.col(name).isNull(), F.format_string(Reason.BEYOND_INT64, F.lit(name), quoted)),
    ]


def _coordinate(name: str) -> Column:
    value = F.trim(_raw(name))
    return F.when(value.rlike(_DECIMAL), value.try_cast("double"))


def _coordinate_checks(name: str, bounds: Bounds | None) -> list[tuple[Column, Column]]:
    value, number = F.trim(_raw(name)), F.col(name)
    quoted = _shorten(_raw(name))
    checks = [
        (~value.rlike(_DECIMAL) & ~value.rlike(_NON_FINITE),
         F.format_string(Reason.NOT_A_NUMBER, F.lit(name), quoted)),
        (value.rlike(_NON_FINITE) | F.isnan(number) | (F.abs(number) == float("inf")),
         F.format_string(Reason.NOT_FINITE, F.lit(name), quoted)),
    ]
    if bounds is not None:
        low, high = bounds.axis(name)
        checks.append(((number < low) | (number > high),
                       F.format_string(Reason.OUTSIDE_BOUNDS, F.lit(name), quoted, F.lit(bounds.describe(name)))))
    return checks


def _keyword_checks() -> list[tuple[Column, Column]]:
    kw = F.col("kw")
    too_long = F.filter(kw, lambda w: F.length(w) > MAX_KEYWORD_LENGTH)
    not_normalised = F.filter(kw, lambda w: ~w.rlike(_KEYWORD))
    return [
        ((F.size(kw) == 1) & (kw[0] == ""), F.lit(Reason.KEYWORDS_EMPTY)),
        (F.exists(kw, lambda w: w == ""), F.format_string(Reason.EMPTY_TOKEN, _shorten(_raw("keywords")))),
        (F.size(too_long) > 0, F.format_string(Reason.KEYWORD_TOO_LONG, _shorten(too_long[0]),
                                               F.length(too_long[0]), F.lit(MAX_KEYWORD_LENGTH))),
        (F.size(not_normalised) > 0, F.format_string(Reason.NOT_NORMALISED, _shorten(not_normalised[0]))),
    ]


def _line_checks() -> list[tuple[Column, Column]]:
    """The checks of a line as a whole, in the numpy readers' order. Spark's text source
    replaces bytes that are not UTF-8 by U+FFFD, which the rules refuse in any line."""
    return [
        (F.col("text").contains("\ufffd"), F.lit(Reason.NOT_UTF8)),
        (F.col("blank"), F.lit(Reason.ONLY_SEPARATORS)),
        (F.col("width") != F.col("expected_width"),
         F.format_string(Reason.COLUMN_COUNT, "expected_width", "width")),
    ]


def _first_failure(checks: list[tuple[Column, Column]]) -> Column:
    """The message of the first failing check, or NULL when every check passes."""
    expr = F.lit(None).cast("string")
    for cond, message in reversed(checks):
        expr = F.when(cond, message).otherwise(expr)
    return expr


def _split(df: DataFrame, width: int, source: str, columns: tuple[str, ...]) -> DataFrame:
    cols = [F.col("fields")[i].alias(f"raw_{c}") for i, c in enumerate(columns)]
    text = F.col("text") if "text" in df.columns else F.array_join("fields", "\t")
    return df.select(
        F.lit(source).alias("source"), "line", "width", "blank", text.alias("text"), *cols
    ).withColumn("expected_width", F.lit(width))


def _rejected(df: DataFrame) -> DataFrame:
    return df.where(F.col("reason").isNotNull()).select(
        "source", "line", "reason", F.substring("text", 1, TEXT_LIMIT).alias("text")
    )


# --------------------------------------------------------------------------- objects


def read_objects_df(
    spark: SparkSession, path: str | Path, *, bounds: Bounds | None = None,
    landed: DataFrame | None = None, processed_through: int | None = None,
) -> tuple[DataFrame, DataFrame]:
    """Objects file -> (accepted rows with the OBJECTS schema plus ``line``, quarantine rows).

    Same rules as :func:`dkmsks.io.formats.read_objects` (``bounds=None``: any finite
    coordinate); keyword arrays are de-duplicated and sorted. Against what earlier ingestions
    landed (``landed``: the ``objects`` table) a row is also refused when its id is already
    landed with other values (a duplicate across files or batches; the same values are a
    replay and pass, the insert-only MERGE skips them), and when its timestamp was already
    processed (``t <= processed_through``) and it is not a replay: a late row would never be
    applied. Both DataFrames are lazy: act on them inside :func:`file_read_errors`.
    """
    path = Path(path)
    lines, width = _lines(spark, path, OBJECT_COLUMNS)
    df = _split(lines, width, path.name, OBJECT_COLUMNS)
    df = df.select(
        "*",
        _integer("id").alias("id"),
        _coordinate("x").alias("x"),
        _coordinate("y").alias("y"),
        F.split(F.trim("raw_keywords"), " ").alias("kw"),
        _integer("t").alias("t"),
    )
    checks = [
        *_line_checks(),
        *_integer_checks("id"),
        *_coordinate_checks("x", bounds),
        *_coordinate_checks("y", bounds),
        *_keyword_checks(),
        *_integer_checks("t"),
    ]
    df = df.withColumn("reason", _first_failure(checks))
    # Later repeats of an id are rejected; the first occurrence in file order wins.
    valid = df.where(F.col("reason").isNull()).withColumn("first_line", F.min("line").over(Window.partitionBy("id")))
    duplicate = F.format_string(Reason.DUPLICATE_ID, "id", "first_line")
    valid = valid.withColumn("reason", F.when(F.col("line") != F.col("first_line"), duplicate)).drop("first_line")
    valid = _against_landed_objects(valid, landed, processed_through)
    rejected = _rejected(df).unionByName(_rejected(valid))
    accepted = valid.where(F.col("reason").isNull()).select(
        "id", "x", "y", F.array_sort(F.array_distinct("kw")).alias("keywords"), "t", "line"
    )
    return accepted, rejected


def _late_reason(processed_through: int) -> Column:
    return F.format_string(Reason.LATE, "t", F.lit(int(processed_through)))


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
        conflict = F.format_string(Reason.ALREADY_INGESTED, "id", "_lsource", "_lline")
        valid = valid.withColumn("reason", F.coalesce("reason", F.when(is_landed & ~same, conflict)))
    if processed_through is not None:
        late = (F.col("t") <= processed_through) & ~is_landed
        valid = valid.withColumn("reason", F.coalesce("reason", F.when(late, _late_reason(processed_through))))
    return valid


# --------------------------------------------------------------------------- events

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
                reasons.append(None if live else Reason.DELETE_NOT_LIVE % (sid, t))
                live = False
            else:
                reasons.append(Reason.INSERT_LIVE % sid if live else None)
                live = True
        yield pd.DataFrame({"line": pdf["line"].astype("int64"), "reason": reasons})


def read_events_df(
    spark: SparkSession, path: str | Path, *, bounds: Bounds | None = None, max_k: int = MAX_K,
    landed: DataFrame | None = None, processed_through: int | None = None,
) -> tuple[DataFrame, DataFrame]:
    """Subscription events file -> (accepted events with ``line``, quarantine rows).

    Same rules as :func:`dkmsks.io.formats.read_events`, including the replay in timestamp
    order with deletions before insertions, done per id in parallel. The replay starts from
    the events earlier ingestions landed (``landed``: ``id, t, op`` of the
    ``subscription_events`` table), so a batch file may delete a subscription registered by an
    earlier file; a row equal on ``(id, t, op)`` to a landed one is a replay and passes. A row
    for an already processed timestamp (``t <= processed_through``) that is not a replay is
    refused as late. Both DataFrames are lazy: act on them inside :func:`file_read_errors`.
    """
    path = Path(path)
    lines, width = _lines(spark, path, EVENT_COLUMNS)
    df = _split(lines, width, path.name, EVENT_COLUMNS)
    df = df.select(
        "*",
        F.lower(F.trim("raw_op")).alias("op"),
        _integer("id").alias("id"),
        _coordinate("x").alias("x"),
        _coordinate("y").alias("y"),
        F.split(F.trim("raw_keywords"), " ").alias("kw"),
        _integer("k").alias("k"),
        _integer("t").alias("t"),
    )
    is_insert = F.col("op") == "insert"
    insert_checks = [
        *_coordinate_checks("x", bounds),
        *_coordinate_checks("y", bounds),
        *_keyword_checks(),
        *_integer_checks("k"),
        (F.col("k") < 1, F.format_string(Reason.K_TOO_SMALL, "k")),
        (F.col("k") > max_k, F.format_string(Reason.K_TOO_LARGE, "k", F.lit(max_k))),
    ]
    checks = [
        *_line_checks(),
        (~F.col("op").isin("insert", "delete"), F.format_string(Reason.UNKNOWN_OP, _shorten(_raw("op")))),
        *_integer_checks("id"),
        *_integer_checks("t"),
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
        F.when(insert, F.col("k").cast("int")).alias("k"),
        "t",
        "line",
    )
    return accepted, rejected


__all__ = ["file_read_errors", "read_events_df", "read_objects_df", "replay_liveness", "schemas"]
