"""Run the SQL statements kept in ``sql/`` (one statement per file, parameter markers only).

Identifiers are bound with ``IDENTIFIER(:name)`` and values with ``:name`` markers through
``spark.sql(text, args=...)``: no statement is ever built by string formatting.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_REPO = Path(__file__).resolve().parents[3]


def sql_dir() -> Path:
    """The ``sql/`` folder (``$DKMSKS_SQL_DIR`` overrides, e.g. on a cluster image)."""
    return Path(os.environ.get("DKMSKS_SQL_DIR", _REPO / "sql"))


@cache
def statement(name: str) -> str:
    """The text of ``sql/<name>`` (e.g. ``"ddl/objects.sql"``) without comment lines."""
    path = sql_dir() / name
    if not path.exists():
        raise FileNotFoundError(f"SQL file {path} is missing (is DKMSKS_SQL_DIR right?)")
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if not ln.lstrip().startswith("--")]
    return "\n".join(lines).strip().rstrip(";")


def run_sql(spark: SparkSession, name: str, **args: Any) -> DataFrame:
    """Execute ``sql/<name>`` with named parameter markers bound to ``args``."""
    return spark.sql(statement(name), args=args or None)
