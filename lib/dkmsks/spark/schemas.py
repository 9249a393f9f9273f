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

#: Records yielded by :func:`dkmsks.spark.bridge.run_worker` (field order = OUTPUT_FIELDS).
WORKER_OUTPUT = StructType(
    [
        StructField("record", StringType(), False),
        StructField("t", LongType(), True),
        StructField("seq", LongType(), True),
        StructField("worker", IntegerType(), True),
        StructField("sub_id", LongType(), True),
        StructField("change", StringType(), True),
        StructField("object_ids", ArrayType(LongType(), False), True),
        StructField("d2", ArrayType(DoubleType(), False), True),
        StructField("x", DoubleType(), True),
        StructField("y", DoubleType(), True),
        StructField("keywords", ArrayType(StringType(), False), True),
        StructField("k", IntegerType(), True),
        StructField("registered_t", LongType(), True),
        StructField("weight", LongType(), True),
        StructField("subset", LongType(), True),
        StructField("subscriptions", LongType(), True),
        StructField("pairs_tested", LongType(), True),
        StructField("pairs_in_ball", LongType(), True),
        StructField("results_changed", LongType(), True),
        StructField("knn_ms", DoubleType(), True),
        StructField("insert_ms", DoubleType(), True),
        StructField("delete_ms", DoubleType(), True),
    ]
)
