"""``dkm simulate``: the whole protocol in one process with ``M`` simulated workers.

Reads an objects file and a subscription events file, runs the initial phase (exact kNN of the
initial subscriptions within ``O_init``, ``O_init`` statistics, the partition plan of
``--method``) and then every timestamp up to ``--as-of`` with the in-memory engine
(:mod:`dkmsks.core.engine`), printing a per-timestamp summary (update time split into kNN
update / insertion / deletion, load balance, work) and optionally writing the results export.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from dkmsks.commands.common import print_rejections
from dkmsks.flags import add_partition_flags, config_from_args
from dkmsks.io.formats import BOUNDS_HELP, bounds_option


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``dkm simulate`` and its flags to the ``dkm`` parser."""
    p = subparsers.add_parser(
        "simulate",
        help="run KOP / SOP / DkM-SKS in one process with M simulated workers",
        description=(
            "Objects and insertions with t <= T0 form O_init and the initial subscriptions; "
            "they are partitioned over M workers with --method. Every later timestamp applies "
            "deletions, then insertions (placed by the main server's cost model), then hands "
            "the new objects to every worker, which updates its subscriptions' exact kNN. "
            "Prints per-timestamp update time (kNN update = slowest worker; insertion; "
            "deletion), load balance (max - min worker time) and work (object-subscription "
            "pairs tested; max/mean over workers; the minimum possible work)."
        ),
    )
    p.add_argument("--objects", type=Path, required=True, help="objects file (.tsv[.gz], .csv, .parquet)")
    p.add_argument("--events", type=Path, required=True, help="subscription events file")
    p.add_argument("--export", type=Path, default=None,
                   help="write the results at --as-of as JSON lines (.jsonl[.gz])")
    p.add_argument("--as-of", type=int, default=None,
                   help="process timestamps up to T (default: the last timestamp in the inputs)")
    p.add_argument("--bounds", type=bounds_option, default=None, metavar="BOUNDS", help=BOUNDS_HELP)
    p.add_argument("--quiet", action="store_true", help="no progress bar and no per-timestamp table")
    add_partition_flags(p, required=("method", "workers"))
    p.set_defaults(func=run)


def format_table(rows: list[dict[str, float | int]]) -> str:
    """A plain-text per-timestamp table (times in milliseconds)."""
    head = (
        f"{'t':>8} {'objects':>8} {'ins':>5} {'del':>5} {'update ms':>10} {'knn ms':>9} "
        f"{'ins ms':>8} {'del ms':>8} {'balance ms':>10} {'work':>12} {'max/mean':>8} {'min work':>9}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['t']:>8} {r['objects']:>8} {r['inserted']:>5} {r['deleted']:>5} "
            f"{1e3 * r['update_time']:>10.1f} {1e3 * r['time_knn']:>9.1f} {1e3 * r['time_insert']:>8.1f} "
            f"{1e3 * r['time_delete']:>8.1f} {1e3 * r['load_balance']:>10.1f} {r['work']:>12,} "
            f"{r['work_imbalance']:>8.2f} {r['min_work']:>9,}"
        )
    return "\n".join(lines)


def summary(rows: list[dict[str, float | int]]) -> str:
    """Averages over the processed timestamps (the paper reports averages)."""
    if not rows:
        return "no timestamp after T0 to process"
    n = len(rows)

    def avg(key: str) -> float:
        return sum(float(r[key]) for r in rows) / n

    return (
        f"{n} timestamp(s): mean update {1e3 * avg('update_time'):.1f} ms "
        f"(kNN {1e3 * avg('time_knn'):.1f}, insertion {1e3 * avg('time_insert'):.1f}, "
        f"deletion {1e3 * avg('time_delete'):.1f}, cost refresh {1e3 * avg('time_refresh'):.1f}); "
        f"mean load balance {1e3 * avg('load_balance'):.1f} ms; "
        f"mean work {avg('work'):,.0f} pairs (max/mean {avg('work_imbalance'):.2f}, "
        f"minimum {avg('min_work'):,.0f})"
    )


def run(args: argparse.Namespace) -> int:
    """Run ``dkm simulate`` with the parsed ``args``; the exit status."""
    import numpy as np
    from tqdm import tqdm

    from dkmsks.core.engine import build_engine
    from dkmsks.core.model import Vocabulary
    from dkmsks.cores import usable_cores
    from dkmsks.io.formats import read_events, read_objects
    from dkmsks.io.writers import write_results

    config = config_from_args(args)
    started = time.perf_counter()
    vocab = Vocabulary()
    objects_load = read_objects(args.objects, vocab, bounds=args.bounds)
    events_load = read_events(args.events, vocab, bounds=args.bounds)
    print_rejections(objects_load.rejections, "object")
    print_rejections(events_load.rejections, "event")
    objects, events = objects_load.objects, events_load.events
    if len(objects) == 0:
        raise ValueError(f"{args.objects} holds no valid object")
    last = max(int(a.max()) for a in (objects.t, events.t) if a.size)
    as_of = last if args.as_of is None else int(args.as_of)
    if as_of < config.t0:
        raise ValueError(f"--as-of {as_of} is before the end of the initial phase --t0 {config.t0}")

    engine, setup = build_engine(config, objects, events, threads=usable_cores(), clock=time.perf_counter)
    loaded = time.perf_counter()
    print(
        f"initial phase: |O_init| = {setup.n_objects:,}, |S| = {setup.n_subscriptions:,}; "
        f"kNN in O_init {setup.time_knn_init:.1f} s, "
        f"partition ({config.method.value}, M={config.workers}, new-cost {config.new_cost.value}) "
        f"{setup.time_partition:.1f} s, worker indexes {setup.time_load:.1f} s "
        f"(inputs read in {loaded - started - setup.time_knn_init - setup.time_partition - setup.time_load:.1f} s)",
        file=sys.stderr,
    )
    stream = np.union1d(objects.t[(objects.t > config.t0) & (objects.t <= as_of)],
                        events.t[(events.t > config.t0) & (events.t <= as_of)])
    rows: list[dict[str, float | int]] = []
    with tqdm(total=int(stream.shape[0]), unit="ts", disable=args.quiet, file=sys.stderr) as bar:
        for metrics in engine.run(objects, events, until=as_of):
            rows.append(metrics.as_dict())
            bar.set_postfix(t=metrics.t, ms=f"{1e3 * metrics.update_time:.0f}", refresh=False)
            bar.update(1)
    if not args.quiet and rows:
        print(format_table(rows))
    print(summary(rows))
    if args.export is not None:
        n = write_results(args.export, engine.results(), as_of)
        print(f"wrote {n:,} results at t={as_of} to {args.export}")
    print(f"done in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0
