"""Follow-mode latency and warm catch-up: warm worker tasks process pending timestamps.

Runs against a warehouse that is already partitioned and has pending timestamps (for example
the one ``dkm bench pipeline`` leaves under its workdir, which runs this benchmark as a
subprocess). Starts a :class:`~dkmsks.jobs.follow.session.FollowSession` on ``local[m + 2]``
(``--processes`` worker tasks host its workers) and:

1. ``--timestamps`` rounds of ONE timestamp each: the per-timestamp latency of follow mode
   (median, min, max; per phase);
2. with ``--backlog N``, ``--repeats R`` more rounds that each find N pending timestamps at
   once: the warm catch-up throughput (objects/s, median of the R rounds), e.g. after a
   publisher outage, and its ratio to the one-timestamp rounds' throughput in the same run.

The machine's speed drifts by more than 10 % from one hour to the next on a shared VM
(docs/benchmarks.md), so one catch-up round says little: take several, or compare commits
on fresh warehouse copies in turn.

    dkm bench follow --warehouse W [--database DB] --timestamps 20 [--backlog 75 --repeats 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dkmsks.bench.common import Refused, Report, bench_main, provenance
from dkmsks.bench.stats import median


def main(argv: Sequence[str] | None = None) -> int:
    """``dkm bench follow``: time rounds of a follow session; the exit status."""
    p = argparse.ArgumentParser(prog="dkm bench follow", description=__doc__.splitlines()[0])
    p.add_argument("--warehouse", type=Path, required=True)
    p.add_argument("--database", default="default", help="database holding the pipeline's tables")
    p.add_argument("--timestamps", type=int, default=20, help="rounds to time (one timestamp each)")
    p.add_argument("--backlog", type=int, default=0, help="then rounds over this many pending timestamps each")
    p.add_argument("--repeats", type=int, default=1, help="how many such catch-up rounds (%(default)s)")
    p.add_argument("--slots", type=int, default=None, help="local[N] task slots (default m + 2)")
    p.add_argument("--processes", type=int, default=None,
                   help="worker tasks hosting the m workers (default: follow mode's, one per core)")
    p.add_argument("--task-changes-from", type=int, default=None, metavar="OBJECTS",
                   help="rounds of at least this many objects have their changes written by the worker tasks "
                        "(default: follow mode's)")
    p.add_argument("--json", type=Path, default=None,
                   help="write the measurements here (with the commit, the machine and the parameters)")
    return bench_main(p, argv, run)


def run(args: argparse.Namespace) -> Report:
    """Start a follow session on the warehouse and time its rounds; the report (and ``--json``)."""
    if args.timestamps < 1 or args.backlog < 0 or args.repeats < 1:
        raise Refused("--timestamps and --repeats take a number >= 1, --backlog one >= 0")
    if args.task_changes_from is not None and args.task_changes_from < 0:
        raise Refused("--task-changes-from takes a number >= 0")

    from dkmsks.jobs.follow import FollowSession
    from dkmsks.spark.session import build_session
    from dkmsks.storage.journal import last_processed, pending_timestamps
    from dkmsks.storage.lake import Lake
    from dkmsks.storage.plans import current_plan
    from dkmsks.warehouse import Warehouse

    warehouse = Warehouse(args.warehouse, args.database)
    lake = Lake.of(warehouse)
    info = current_plan(lake)
    pending = pending_timestamps(lake, last_processed(lake)) if info else []
    need = args.timestamps + args.backlog * args.repeats
    if info is None or len(pending) < need:
        raise Refused(f"need a partitioned warehouse with >= {need} pending timestamps "
                      f"(found {len(pending)}); publish more with `dkm publish`")
    slots = args.slots or info.workers + 2
    spark = build_session(warehouse, app_name="bench-follow", master=f"local[{slots}]")
    out: dict = {**provenance(spark=True), "params": {k: str(v) for k, v in vars(args).items()},
                 "plan_version": info.plan_version, "method": info.method, "workers": info.workers,
                 "master": f"local[{slots}]"}
    try:
        started = time.perf_counter()
        files = {} if args.task_changes_from is None else {"change_file_objects": args.task_changes_from}
        session = FollowSession(spark, warehouse, run_id="bench-follow", processes=args.processes, **files)
        session.start()
        out["startup_s"] = time.perf_counter() - started
        rounds: list[dict[str, Any]] = []
        catch_up: list[dict[str, Any]] = []
        try:
            for _ in range(args.timestamps):
                t0 = time.perf_counter()
                report = session.step(max_timestamps=1)
                rounds.append({"t": report.timestamps[0], "seconds": time.perf_counter() - t0,
                               "objects": report.objects,
                               "phases_s": {k: v / 1e3 for k, v in report.phases_ms.items()}})
            for _ in range(args.repeats if args.backlog else 0):
                t0 = time.perf_counter()
                report = session.step(max_timestamps=args.backlog)
                seconds = time.perf_counter() - t0
                catch_up.append({"timestamps": len(report.timestamps), "first_t": report.timestamps[0],
                                 "last_t": report.timestamps[-1], "objects": report.objects, "seconds": seconds,
                                 "objects_per_s": report.objects / seconds,
                                 "phases_s": {k: v / 1e3 for k, v in report.phases_ms.items()}})
        finally:
            session.stop()
    finally:
        spark.stop()
    totals = [r["seconds"] for r in rounds]
    phases = sorted({k for r in rounds for k in r["phases_s"]})
    out["rounds"] = rounds
    out["median_s"] = median(totals)
    out["median_phases_s"] = {k: median([r["phases_s"].get(k, 0.0) for r in rounds]) for k in phases}
    lines = [f"plan {info.plan_version} ({info.method}, m={info.workers}), local[{slots}]",
             f"start-up (main server + {info.workers} warm workers built from the state): {out['startup_s']:.1f} s",
             f"per timestamp over {len(totals)} rounds: median {out['median_s']:.2f} s "
             f"(min {min(totals):.2f}, max {max(totals):.2f})"]
    for k in phases:
        v = [r["phases_s"].get(k, 0.0) for r in rounds]
        lines.append(f"  {k:<8} median {median(v):.3f} s (min {min(v):.3f}, max {max(v):.3f})")
    if catch_up:
        # The median round stands for the run ("backlog", as the pipeline benchmark reads it).
        rates = [c["objects_per_s"] for c in catch_up]
        out["backlog"] = sorted(catch_up, key=lambda c: c["objects_per_s"])[(len(catch_up) - 1) // 2]
        out["backlog_rounds"] = catch_up
        out["backlog_median_objects_per_s"] = median(rates)
        one_at_a_time = sum(r["objects"] for r in rounds) / sum(totals) if rounds else None
        out["one_timestamp_objects_per_s"] = one_at_a_time
        b = out["backlog"]
        if len(catch_up) == 1:
            lines.append(f"warm catch-up: 1 round of {b['timestamps']} timestamps, {b['objects']:,} objects in "
                         f"{b['seconds']:.1f} s = {rates[0]:,.0f} objects/s")
        else:
            lines.append(f"warm catch-up: {len(catch_up)} rounds of {args.backlog} timestamps ({b['objects']:,} "
                         f"objects in the median one): median {median(rates):,.0f} objects/s "
                         f"(min {min(rates):,.0f}, max {max(rates):,.0f})")
        if one_at_a_time:
            lines.append(f"  {median(rates) / one_at_a_time:.1f}x the one-timestamp rounds of this run "
                         f"({one_at_a_time:,.0f} objects/s)")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return Report("dkm bench follow", "\n".join(lines))

