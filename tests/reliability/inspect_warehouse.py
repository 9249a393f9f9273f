"""Inspect a warehouse in one process (a subprocess of the reliability tests).

Writes ``dkm export --as-of T`` for each requested ``T`` through the real command line entry
point (``dkmsks.cli.main``, what the ``dkm`` script runs), then reads the user-facing
bookkeeping tables and views (``ledger``, ``timestamp_metrics``, ``worker_metrics``,
``result_changes``, ``quarantine``) and writes a JSON summary. One JVM serves every export:
a cold ``dkm`` process per timestamp would cost ~15 s each.

    python tests/reliability/inspect_warehouse.py WAREHOUSE OUT_DIR T [T ...]

``WAREHOUSE`` is a folder or ``s3://bucket/prefix`` (the store's settings in the environment).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    from dkmsks.cli import main as dkm

    warehouse, out = argv[0], Path(argv[1])  # a folder or s3://bucket/prefix
    out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    exports: dict[int, int] = {}
    for t in (int(a) for a in argv[2:]):
        started = time.perf_counter()
        exports[t] = dkm(["export", "--warehouse", warehouse, "--as-of", str(t),
                          "--out", str(out / f"export-{t}.jsonl")])
        timings[f"export-{t}"] = time.perf_counter() - started

    from dkmsks.spark.session import build_session
    from dkmsks.warehouse import Warehouse

    spark = build_session(Warehouse(warehouse), app_name="dkmsks-inspect")
    try:
        def rows(sql: str) -> list[list]:
            return [list(r) for r in spark.sql(sql).collect()]

        tables = {r[1] for r in rows("SHOW TABLES")}
        summary = {
            "exports": exports,
            "timings": timings,
            "tables": sorted(tables),
            "ledger": rows("SELECT t, count(*) FROM ledger GROUP BY t ORDER BY t"),
            "timestamp_metrics": rows("SELECT t, count(*) FROM timestamp_metrics GROUP BY t ORDER BY t"),
            "worker_metrics": rows(
                "SELECT t, count(*), count(DISTINCT worker) FROM worker_metrics GROUP BY t ORDER BY t"),
            "result_change_duplicates": rows(
                "SELECT t, sub_id, change, count(*) AS n FROM result_changes GROUP BY 1, 2, 3 HAVING n > 1 LIMIT 20"),
            "quarantine": rows("SELECT target, reason, count(*) FROM quarantine GROUP BY 1, 2 ORDER BY 1, 2"),
            "quarantine_rows": rows("SELECT target, source, line, reason FROM quarantine ORDER BY 1, 2, 3"),
        }
    finally:
        spark.stop()
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
