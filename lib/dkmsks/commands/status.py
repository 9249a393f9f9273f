"""``dkm status``: plan version, last processed timestamp, pending work, worker loads, quarantine."""

from __future__ import annotations

import argparse

from dkmsks.commands.spark_common import add_warehouse, session


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "status",
        help="show the plan, the last processed timestamp, worker loads and quarantined rows",
        description="A one-screen summary of a warehouse's pipeline state.",
    )
    add_warehouse(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dkmsks.spark import tables
    from dkmsks.spark.microbatch_job import current_plan, last_processed, pending_timestamps
    from dkmsks.spark.sql_files import run_sql

    spark = session(args, "dkmsks-status")
    try:
        tables.ensure_tables(spark)
        info = current_plan(spark)
        if info is None:
            print("no partition plan yet (ingest O_init, then run the partition job)")
        else:
            print(f"plan {info.plan_version}: method {info.method}, m={info.workers}, T0={info.t0}, grid {info.grid}")
        s = run_sql(spark, "queries/status.sql").collect()[0]
        last = last_processed(spark)
        pending = pending_timestamps(spark, last) if last is not None else []
        print(f"last processed timestamp: {s.last_t} ({s.processed_timestamps} processed), pending: {len(pending)}")
        print(f"live subscriptions: {s.live_subscriptions:,}; result rows: {s.result_rows:,}")
        if info is not None:
            print("worker loads:")
            for r in spark.table("worker_loads").orderBy("worker").collect():
                print(f"  worker {r.worker:>3}: {r.subscriptions:>9,} subscriptions, C(w) = {r.load:.6g}")
        kinds = run_sql(spark, "queries/quarantine_kinds.sql").collect()
        print(f"quarantined input rows: {s.quarantined:,}" + (f" ({len(kinds)} kinds of reason)" if kinds else ""))
        for r in kinds:  # every kind: a user must see each problem, not the top few
            print(f"  {r.n:>8,}  {r.target}: {r.kind}")
    finally:
        spark.stop()
    return 0
