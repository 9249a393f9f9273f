"""Spark schemas of the landing tables and of quarantined rows (one module, one truth)."""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

OBJECTS = StructType(
    [
        StructField("id", LongType(), False),
        StructField("x", DoubleType(), False),
        StructField("y", DoubleType(), False),
        StructField("keywords", ArrayType(StringType(), False), False),
        StructField("t", LongType(), False),
    ]
)

SUBSCRIPTION_EVENTS = StructType(
    [
        StructField("op", StringType(), False),
        StructField("id", LongType(), False),
        StructField("x", DoubleType(), True),
        StructField("y", DoubleType(), True),
        StructField("keywords", ArrayType(StringType(), False), True),
        StructField("k", IntegerType(), True),
        StructField("t", LongType(), False),
        StructField("line", LongType(), False),
    ]
)

QUARANTINE = StructType(
    [
        StructField("source", StringType(), False),
        StructField("line", LongType(), False),
        StructField("reason", StringType(), False),
        StructField("text", StringType(), True),
    ]
)
