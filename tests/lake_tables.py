"""A warehouse's Delta tables made with delta-rs from ``sql/ddl`` (no JVM), and a partitioned
warehouse in miniature, for unit tests of the Spark-free paths (landing, client).

The schemas are read from the DDL files every Spark session runs, so these tables have the
columns and types of the real ones; only Spark's table properties are left out (the
Spark-created tables are covered by the tests in ``tests/spark``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa

from dkmsks.storage import tables
from dkmsks.storage.lake import Lake
from dkmsks.warehouse import Warehouse

DDL = Path(__file__).resolve().parents[1] / "sql" / "ddl"
_SCALARS = {"BIGINT": pa.int64(), "INT": pa.int32(), "DOUBLE": pa.float64(), "STRING": pa.string(),
            "BOOLEAN": pa.bool_()}
_COMMENT = re.compile(r"COMMENT\s+'(?:[^']|'')*'")


def _arrow(kind: str) -> pa.DataType:
    kind = kind.strip().upper()
    if kind.startswith("ARRAY<") and kind.endswith(">"):
        return pa.list_(_arrow(kind[6:-1]))
    return _SCALARS[kind]


def ddl_schema(name: str) -> tuple[pa.Schema, list[str]]:
    """The Arrow schema and partition columns of ``sql/ddl/<name>.sql``."""
    text = "\n".join(line for line in (DDL / f"{name}.sql").read_text().splitlines() if not line.startswith("--"))
    text = _COMMENT.sub("", text)
    body = text[text.index("(", text.index("IDENTIFIER(:table)") + len("IDENTIFIER(:table)")) + 1:
                text.index("USING")].rstrip().rstrip(")")
    fields = []
    for column in body.split(","):
        words = column.split()
        if not words:
            continue
        nullable = "NOT NULL" not in " ".join(words).upper()
        fields.append(pa.field(words[0], _arrow(words[1]), nullable))
    partitioned = re.search(r"PARTITIONED BY \(([^)]*)\)", text)
    return pa.schema(fields), [c.strip() for c in partitioned.group(1).split(",")] if partitioned else []


def create_tables(warehouse: Warehouse) -> Lake:
    """Every table of the project in ``warehouse`` (a folder or on object storage), empty."""
    from deltalake import DeltaTable

    from dkmsks.storage.lake import storage_options

    for name in tables.ALL_TABLES:
        schema, partitions = ddl_schema(name)
        uri = warehouse.table_uri(name)
        if warehouse.is_local:
            Path(uri).mkdir(parents=True, exist_ok=True)
        DeltaTable.create(uri, schema, partition_by=partitions or None, storage_options=storage_options(uri))
    return Lake.of(warehouse)


def partitioned_warehouse(root: Path | str, *, objects: list[tuple], subscriptions: list[tuple],
                          t0: int = 0) -> Warehouse:
    """A warehouse as the partition job leaves it, in miniature: ``objects`` (``id, x, y,
    keywords, t``) landed, the initial ``subscriptions`` (``id, x, y, keywords, k``) live in
    ``knn_state`` with empty results (no test here reads them), a plan, and the ledger
    record of ``t0``."""
    from dkmsks.storage.journal import commit_first_ledger

    warehouse = Warehouse(root)
    lake = create_tables(warehouse)
    if objects:
        lake.append(tables.OBJECTS, pa.table({
            "id": [o[0] for o in objects], "x": [float(o[1]) for o in objects], "y": [float(o[2]) for o in objects],
            "keywords": [sorted(o[3]) for o in objects], "t": [o[4] for o in objects],
            "source": ["o_init.tsv"] * len(objects), "line": list(range(2, len(objects) + 2)),
        }))
    lake.append(tables.PLANS, pa.table({
        "plan_version": [0], "method": ["kop"], "workers": [1], "params": [json.dumps({"t0": t0})], "subsets": [1],
        "subscriptions": [len(subscriptions)], "o_init": [len(objects)], "effective_t": [t0],
        "meta_json": [json.dumps({"space": [0.0, 0.0, 1.0, 1.0], "n_objects": len(objects)})],
    }))
    n = len(subscriptions)
    if n:
        lake.append(tables.STATE, pa.table({
            "plan_version": [0] * n, "worker": pa.array([0] * n, pa.int32()), "sub_id": [s[0] for s in subscriptions],
            "x": [float(s[1]) for s in subscriptions], "y": [float(s[2]) for s in subscriptions],
            "keywords": [sorted(s[3]) for s in subscriptions], "k": pa.array([s[4] for s in subscriptions], pa.int32()),
            "registered_t": [t0] * n, "weight": [1] * n, "subset": [0] * n,
            "object_ids": pa.array([[]] * n, pa.list_(pa.int64())), "d2": pa.array([[]] * n, pa.list_(pa.float64())),
            "updated_t": [t0] * n,
        }), metadata={"userMetadata": json.dumps({"through_t": t0})})
    commit_first_ledger(lake, t0=t0, plan_version=0, run_id="test", objects=len(objects), insertions=n)
    return warehouse
