"""The Spark catalog, measured: why every session registers the tables by path.

Two ways for many processes to see one warehouse's tables by name were on the table
(issue: "a live service on one warehouse"): a shared Hive metastore (embedded Derby admits one
JVM at a time; a network server or PostgreSQL would be one more service to run) and what the
project does, an in-memory catalog filled at session start from the warehouse's folders
(:mod:`dkmsks.spark.catalog`). This benchmark starts a fresh JVM per run for each and times
what a user waits for: the session, then a first query through the user views
(``SELECT count(*) FROM knn_results``), medians of ``--runs`` runs each, side by side.

    dkm bench catalog --warehouse W [--runs 3] [--doc docs/benchmarks.md]

``W`` must hold a partitioned pipeline (e.g. after ``make demo``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from dkmsks.bench.common import load_average, provenance, say, write_doc_section
from dkmsks.bench.prose import Prose
from dkmsks.bench.stats import median
from dkmsks.spark.sql_files import statement

prose = Prose.load("catalog")

QUERY_FILE = "bench/catalog_count_results.sql"


def _one_run(mode: str, warehouse: str, metastore: str) -> dict[str, float]:
    """In a fresh process: session start and first query, in seconds (run as a child)."""
    started = time.perf_counter()
    from pyspark.sql import SparkSession

    from dkmsks.spark.catalog import register
    from dkmsks.spark.session import session_conf
    from dkmsks.spark.sql_files import run_sql
    from dkmsks.warehouse import Warehouse

    wh = Warehouse(Path(warehouse))
    conf = session_conf(wh)
    builder = SparkSession.builder.appName(f"bench-catalog-{mode}")
    if mode == "derby":
        # The earlier design: a persistent embedded Derby metastore holding the tables and views.
        conf["spark.sql.catalogImplementation"] = "hive"
        conf["spark.hadoop.javax.jdo.option.ConnectionURL"] = f"jdbc:derby:;databaseName={metastore};create=true"
        builder = builder.enableHiveSupport()
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if mode == "registered" or not spark.catalog.tableExists("knn_results"):
        register(spark, wh)  # derby: only on its first run, after which the metastore keeps them
    session_s = time.perf_counter() - started
    q0 = time.perf_counter()
    rows = run_sql(spark, QUERY_FILE).collect()[0].n
    query_s = time.perf_counter() - q0
    spark.stop()
    return {"session_s": session_s, "query_s": query_s, "rows": int(rows)}


def main(argv: Sequence[str] | None = None) -> int:
    """``dkm bench catalog``: run the benchmark (or, with ``--child``, one measured run); the exit status."""
    p = argparse.ArgumentParser(prog="dkm bench catalog", description=__doc__.splitlines()[0])
    p.add_argument("--warehouse", type=Path, required=True, help="a warehouse with a partitioned pipeline")
    p.add_argument("--runs", type=int, default=3, help="fresh JVMs per mode (%(default)s)")
    p.add_argument("--doc", type=Path, default=None, help="write the result section into this Markdown file")
    p.add_argument("--child", nargs=3, metavar=("MODE", "WAREHOUSE", "METASTORE"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(_one_run(*args.child)))
        return 0

    warehouse = str(args.warehouse.resolve())
    results: dict[str, list[dict[str, float]]] = {"derby": [], "registered": []}
    with tempfile.TemporaryDirectory() as tmp:
        metastore = str(Path(tmp) / "metastore_db")
        # The Derby metastore's first run creates its schema and registers the tables: not timed.
        subprocess.run([sys.executable, "-m", "dkmsks.cli", "bench", "catalog", "--warehouse", warehouse,
                        "--child", "derby", warehouse, metastore], check=True, capture_output=True)
        for run in range(args.runs):
            for mode in ("derby", "registered"):  # alternating, so load changes hit both alike
                out = subprocess.run([sys.executable, "-m", "dkmsks.cli", "bench", "catalog", "--warehouse",
                                      warehouse, "--child", mode, warehouse, metastore],
                                     check=True, capture_output=True, text=True)
                rec = json.loads(out.stdout.strip().splitlines()[-1])
                results[mode].append(rec)
                say(f"run {run + 1} {mode}: session {rec['session_s']:.1f} s, first query {rec['query_s']:.1f} s")
    summary = {mode: {k: median([r[k] for r in runs]) for k in ("session_s", "query_s")}
               for mode, runs in results.items()}
    total = {mode: s["session_s"] + s["query_s"] for mode, s in summary.items()}
    meta = provenance(spark=True)
    text = prose("head", commit=meta["commit"], date=meta["date"], machine=meta["machine"].get("cpu", ""),
                 load=f"{load_average():.1f}", runs=args.runs, query=statement(QUERY_FILE).strip().splitlines()[-1],
                 rows=f"{results['registered'][0]['rows']:,}",
                 derby_session=f"{summary['derby']['session_s']:.1f}", derby_query=f"{summary['derby']['query_s']:.1f}",
                 derby_total=f"{total['derby']:.1f}", reg_session=f"{summary['registered']['session_s']:.1f}",
                 reg_query=f"{summary['registered']['query_s']:.1f}", reg_total=f"{total['registered']:.1f}",
                 ratio=f"{total['registered'] / total['derby']:.2f}")
    print(text)
    if args.doc:
        write_doc_section(args.doc, "catalog", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
