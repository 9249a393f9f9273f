"""``dkm run``: files in -> ingest -> partition -> every timestamp -> summary (the main job)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from dkmsks.commands.spark_common import add_warehouse, session, warehouse_of
from dkmsks.flags import add_partition_flags, config_from_args
from dkmsks.io.formats import BOUNDS_HELP, bounds_option


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``dkm run`` and its flags to the ``dkm`` parser."""
    p = subparsers.add_parser(
        "run",
        help="ingest files, partition, process every timestamp on Spark, print a summary",
        description=(
            "The whole pipeline on Spark + Delta in one application: validate and ingest the "
            "objects and events files into the landing tables (bad rows quarantined), partition "
            "the initial subscriptions after O_init with --method (skipped when the warehouse "
            "already has a plan), process every pending timestamp exactly once with one Spark "
            "task per worker, and print a summary. Safe to re-run: nothing is applied twice."
        ),
    )
    p.add_argument("--objects", type=Path, required=True, help="objects file")
    p.add_argument("--events", type=Path, required=True, help="subscription events file")
    add_warehouse(p)
    add_partition_flags(p)
    p.add_argument("--until", type=int, default=None, help="ingest and process timestamps up to T only")
    p.add_argument("--bounds", type=bounds_option, default=None, metavar="BOUNDS", help=BOUNDS_HELP)
    p.add_argument("--timestamps-per-run", type=int, default=None,
                   help="commit every N timestamps (default: all pending in one run)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``dkm run`` with the parsed ``args``; the exit status."""
    from tqdm import tqdm

    from dkmsks.jobs.microbatch import run_microbatch
    from dkmsks.jobs.partition import run_partition
    from dkmsks.spark.ingest import ingest_files
    from dkmsks.storage.journal import last_processed, pending_timestamps
    from dkmsks.storage.lake import Lake
    from dkmsks.storage.plans import current_plan

    config = config_from_args(args)
    warehouse = warehouse_of(args)
    started = time.perf_counter()
    spark = session(args, "dkmsks-run", warehouse)

    def say(text: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {text}", flush=True)

    try:
        reports = ingest_files(spark, warehouse, objects=args.objects, events=args.events, run_id="run",
                               bounds=args.bounds, upto=args.until)
        for path, r in zip((args.objects, args.events), reports, strict=True):
            say(f"ingested {path.name}: {r.accepted:,} rows into {r.table}, {r.rejected:,} quarantined")
        lake = Lake.of(warehouse)
        info = current_plan(lake)
        if info is None:
            rep = run_partition(spark, warehouse, config, run_id="run")
            say(f"partitioned {rep.subscriptions:,} subscriptions with {rep.method} over m={rep.workers} "
                f"({rep.subsets:,} subsets): " + ", ".join(f"{k} {v / 1e3:.1f} s" for k, v in rep.phases_ms.items()))
        elif (info.config.method, info.workers) != (config.method, config.workers):
            say(f"note: the warehouse already has plan {info.plan_version} ({info.method}, m={info.workers}); "
                "continuing with it (use a fresh --warehouse for another method)")
        else:
            say(f"plan {info.plan_version} exists ({info.method}, m={info.workers})")
        pending = pending_timestamps(lake, last_processed(lake), args.until)
        with tqdm(total=len(pending), unit="ts", desc="timestamps", disable=not pending) as bar:
            while True:
                batch = run_microbatch(spark, warehouse, run_id="run", until=args.until,
                                       max_timestamps=args.timestamps_per_run)
                if not batch.timestamps:
                    break
                bar.update(len(batch.timestamps))
                bar.set_postfix_str(", ".join(f"{k} {v / 1e3:.1f}s" for k, v in batch.phases_ms.items()))
        print_summary(spark, say)
    finally:
        spark.stop()
    return 0


def print_summary(spark, say) -> None:
    """Print the pipeline's state after a run (``queries/status.sql``) through ``say``."""
    from dkmsks.spark.sql_files import run_sql

    s = run_sql(spark, "queries/status.sql").collect()[0]
    say(f"done: last processed t={s.last_t}, {s.live_subscriptions:,} live subscriptions, "
        f"{s.result_rows:,} result rows, {s.quarantined:,} quarantined input rows")
    m = run_sql(spark, "queries/metrics_summary.sql").collect()[0]
    if m.timestamps:
        say(f"per timestamp (median over {m.timestamps}): slowest worker kNN {m.knn_ms:.1f} ms, "
            f"pairs tested {m.pairs_tested:,.0f} (in ball {m.pairs_in_ball:,.0f}), "
            f"max/mean worker work {m.work_max_over_mean:.2f}")
