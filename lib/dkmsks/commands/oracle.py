"""``dkm oracle``: brute-force exact results at a timestamp (the reference for every test)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from dkmsks.commands.common import print_rejections
from dkmsks.io.formats import BOUNDS_HELP, bounds_option


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``dkm oracle`` and its flags to the ``dkm`` parser."""
    p = subparsers.add_parser(
        "oracle",
        help="brute-force exact kNN results of every live subscription at a timestamp",
        description=(
            "Replays the events up to --as-of (deletions before insertions within a timestamp), "
            "then computes each live subscription's k nearest objects sharing a keyword, "
            "published at or after its registration, by brute force. Ties break by object id. "
            "Writes the results export (JSON lines). Slow by design: use it on samples."
        ),
    )
    p.add_argument("--objects", type=Path, required=True, help="objects file")
    p.add_argument("--events", type=Path, required=True, help="subscription events file")
    p.add_argument("--as-of", type=int, default=None,
                   help="timestamp T (default: the last timestamp in the inputs)")
    p.add_argument("--t0", type=int, default=0,
                   help="initial phase ends at T0: objects/insertions with t <= T0 are O_init and S (%(default)s)")
    p.add_argument("--out", type=Path, required=True, help="results export (.jsonl)")
    p.add_argument("--bounds", type=bounds_option, default=None, metavar="BOUNDS", help=BOUNDS_HELP)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``dkm oracle`` with the parsed ``args``; the exit status."""
    from dkmsks.core.model import Vocabulary
    from dkmsks.core.oracle import oracle_results
    from dkmsks.io.formats import read_events, read_objects
    from dkmsks.io.writers import write_results

    started = time.perf_counter()
    vocab = Vocabulary()
    objects = read_objects(args.objects, vocab, bounds=args.bounds)
    events = read_events(args.events, vocab, bounds=args.bounds)
    print_rejections(objects.rejections, "object")
    print_rejections(events.rejections, "event")
    as_of = args.as_of
    if as_of is None:
        ts = [int(a.max()) for a in (objects.objects.t, events.events.t) if a.size]
        as_of = max(ts) if ts else 0
    results = oracle_results(objects.objects, events.events, as_of, t0=args.t0)
    n = write_results(args.out, results, as_of)
    print(f"wrote {n:,} results at t={as_of} to {args.out} in {time.perf_counter() - started:.1f} s")
    return 0
