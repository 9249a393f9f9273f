"""Follow-mode latency: warm worker tasks process one timestamp per round.

Runs against a warehouse that is already partitioned and has pending timestamps (for example
the one ``bench/bench_pipeline.py`` leaves in /tmp/bench_pipeline/warehouse, extended with
``dkm publish``). Starts a :class:`~dkmsks.spark.follow.FollowSession` on ``local[m + 2]``,
processes ``--timestamps`` rounds of one timestamp each and prints the start-up time and the
median (and min/max) per-phase latency per timestamp.

    .venv/bin/python bench/bench_follow.py --warehouse /tmp/bench_pipeline/warehouse --timestamps 20
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--warehouse", type=Path, required=True)
    p.add_argument("--timestamps", type=int, default=20, help="rounds to time (one timestamp each)")
    p.add_argument("--slots", type=int, default=None, help="local[N] task slots (default m + 2)")
    args = p.parse_args(argv)

    from dkmsks.spark.follow import FollowSession
    from dkmsks.spark.microbatch_job import current_plan, last_processed, pending_timestamps
    from dkmsks.spark.session import build_session

    probe = build_session(args.warehouse, app_name="bench-follow-probe")
    info = current_plan(probe)
    pending = pending_timestamps(probe, last_processed(probe)) if info else []
    probe.stop()
    if info is None or len(pending) < args.timestamps:
        print(f"need a partitioned warehouse with >= {args.timestamps} pending timestamps "
              f"(found {len(pending)}); publish more with `dkm publish`", file=sys.stderr)
        return 2
    slots = args.slots or info.workers + 2
    spark = build_session(args.warehouse, app_name="bench-follow", master=f"local[{slots}]")
    try:
        started = time.perf_counter()
        session = FollowSession(spark, spool_root=args.warehouse / "_spool", run_id="bench-follow")
        session.start()
        startup = time.perf_counter() - started
        totals, phases = [], {}
        try:
            for _ in range(args.timestamps):
                t0 = time.perf_counter()
                report = session.step(max_timestamps=1)
                totals.append(time.perf_counter() - t0)
                for k, v in report.phases_ms.items():
                    phases.setdefault(k, []).append(v / 1e3)
        finally:
            session.stop()
    finally:
        spark.stop()
    print(f"plan {info.plan_version} ({info.method}, m={info.workers}), local[{slots}]")
    print(f"start-up (main server + {info.workers} warm workers built from knn_state): {startup:.1f} s")
    print(f"per timestamp over {len(totals)} rounds: median {statistics.median(totals):.2f} s "
          f"(min {min(totals):.2f}, max {max(totals):.2f})")
    for k, v in phases.items():
        print(f"  {k:<8} median {statistics.median(v):.3f} s (min {min(v):.3f}, max {max(v):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
