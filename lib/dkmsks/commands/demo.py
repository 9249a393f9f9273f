"""``dkm demo``: generate a real-data workload, ingest it into Delta, summarise it.

The README's main job until the full pipeline (``dkm run``) lands: it exercises the real
stack end to end — the generator on ``../shared/data``, Spark readers with validation, Delta
MERGE into the landing tables, Spark SQL — and prints exact kNN results for a few
subscriptions from the oracle.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from dkmsks.commands.common import default_source


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "demo",
        help="generate a real-data workload, ingest it into Delta and print a summary",
        description=(
            "Generates a workload from the real objects file (paper protocol, small sizes), "
            "ingests objects and subscription events into Delta landing tables under "
            "--warehouse (idempotent: a second run changes nothing), then prints table counts, "
            "the top keywords via Spark SQL and exact results of a few subscriptions."
        ),
    )
    p.add_argument("--warehouse", type=Path, default=Path(".cache/demo/warehouse"),
                   help="Delta warehouse and metastore folder (%(default)s)")
    p.add_argument("--source", type=Path, default=default_source(), help="real objects file (%(default)s)")
    p.add_argument("--o-init", type=int, default=50_000, help="|O_init| (%(default)s)")
    p.add_argument("--subscriptions", type=int, default=5_000, help="|S| (%(default)s)")
    p.add_argument("--timestamps", type=int, default=10, help="stream timestamps (%(default)s)")
    p.add_argument("--master", default=None, help="Spark master (default local[2])")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dkmsks.core.model import Vocabulary
    from dkmsks.core.workload import WorkloadSpec, generate_workload
    from dkmsks.io.formats import read_events, read_objects, write_events, write_objects

    if not args.source.exists():
        print(
            f"dkm demo: the real data file {args.source} is absent. Put the shared data folder "
            "beside the repository (../shared/data) or set DKMSKS_DATA_DIR.",
            file=sys.stderr,
        )
        return 2
    started = time.perf_counter()
    spec = WorkloadSpec(o_init=args.o_init, subscriptions=args.subscriptions, timestamps=args.timestamps)
    workdir = args.warehouse.parent / "workload"
    vocab = Vocabulary()
    source = read_objects(args.source, vocab, limit=spec.objects_needed).objects
    objects, events = generate_workload(source, spec)
    write_objects(workdir / "objects.tsv.gz", objects, vocab)
    write_events(workdir / "events.tsv.gz", events, vocab)
    print(f"[{time.perf_counter() - started:5.1f}s] workload: {len(objects):,} objects, "
          f"{len(events):,} subscription events from {args.source.name} -> {workdir}")

    from dkmsks.spark.ingest import ensure_landing_tables, ingest_events, ingest_objects
    from dkmsks.spark.session import build_session
    from dkmsks.spark.sql_files import run_sql

    spark = build_session(args.warehouse, app_name="dkmsks-demo", master=args.master)
    try:
        ensure_landing_tables(spark)
        run_id = f"demo-seed{spec.seed}"
        for report in (
            ingest_objects(spark, workdir / "objects.tsv.gz", run_id=run_id),
            ingest_events(spark, workdir / "events.tsv.gz", run_id=run_id),
        ):
            print(f"[{time.perf_counter() - started:5.1f}s] ingested {report.accepted:,} rows into "
                  f"{report.table}, quarantined {report.rejected:,}")
        print("\nLanding tables (Delta, Spark SQL):")
        for row in run_sql(spark, "queries/landing_summary.sql", objects="objects",
                           events="subscription_events", quarantine="quarantine", t0=0).collect():
            print(f"  {row.what:<26} {row.n:>10,}")
        print("\nTop keywords of O_init:")
        for row in run_sql(spark, "queries/keyword_summary.sql", table="objects", as_of=0, top=5).collect():
            print(f"  {row.keyword:<26} {row.objects:>10,}")
    finally:
        spark.stop()

    # Exact results (brute-force oracle) of a few subscriptions at the last timestamp.
    back = Vocabulary()
    objs = read_objects(workdir / "objects.tsv.gz", back).objects
    evs = read_events(workdir / "events.tsv.gz", back).events
    sample_ids = set(evs.ids[: 3].tolist())
    from dkmsks.core.oracle import live_subscriptions, brute_force_knn

    live = live_subscriptions(evs, spec.timestamps)
    rows = [i for i in range(len(live)) if int(live.ids[i]) in sample_ids]
    results = brute_force_knn(objs, live.take(rows), spec.timestamps) if rows else {}
    print(f"\nExact kNN at t={spec.timestamps} (oracle) for {len(results)} subscriptions:")
    for i in rows:
        sid = int(live.ids[i])
        words = " ".join(back.word(k) for k in live.keywords.row(i))
        r = results[sid]
        print(f"  sub {sid} at ({live.x[i]:.4f}, {live.y[i]:.4f}) k={live.k[i]} [{words}]: "
              + ", ".join(f"{o}@{d:.4f}" for o, d in zip(r.object_ids.tolist(), r.distances.tolist(), strict=True)))
    print(f"\ndone in {time.perf_counter() - started:.1f} s; warehouse: {args.warehouse}")
    return 0
