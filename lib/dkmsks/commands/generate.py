"""``dkm generate``: the paper's workload (docs/design.md §5) from a real objects file."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from dkmsks.commands.common import default_source, print_rejections
from dkmsks.io.formats import BOUNDS_HELP, bounds_option


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``dkm generate`` and its flags to the ``dkm`` parser."""
    p = subparsers.add_parser(
        "generate",
        help="generate objects.tsv.gz and events.tsv.gz following the paper's protocol",
        description=(
            "Take the first --o-init objects of SOURCE as O_init (t=0) and the next "
            "--objects-per-ts objects for each of --timestamps timestamps (t=1..T). Initial "
            "subscriptions (t=0) and insertions copy a random published object's location and "
            "1..5 of its keywords, with k uniform in [1, --k-max]; deletions pick live ids "
            "uniformly. Writes DIR/objects.tsv.gz and DIR/events.tsv.gz."
        ),
    )
    p.add_argument("--source", type=Path, default=default_source(),
                   help="real objects file in stream order (default: %(default)s)")
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.add_argument("--o-init", type=int, required=True, help="|O_init|, objects at t=0")
    p.add_argument("--subscriptions", type=int, required=True, help="|S|, initial subscriptions")
    p.add_argument("--timestamps", type=int, required=True, help="number of stream timestamps")
    p.add_argument("--objects-per-ts", type=int, default=1000, help="objects per timestamp (%(default)s)")
    p.add_argument("--inserts-per-ts", type=int, default=100, help="insertions per timestamp (%(default)s)")
    p.add_argument("--deletes-per-ts", type=int, default=100, help="deletions per timestamp (%(default)s)")
    p.add_argument("--k-max", type=int, default=10, help="k is uniform in [1, k_max] (%(default)s)")
    p.add_argument("--seed", type=int, default=0, help="random seed (%(default)s)")
    p.add_argument("--bounds", type=bounds_option, default=None, metavar="BOUNDS",
                   help="check the source rows: " + BOUNDS_HELP)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``dkm generate`` with the parsed ``args``; the exit status."""
    from dkmsks.core.model import Vocabulary
    from dkmsks.core.workload import WorkloadSpec, generate_workload
    from dkmsks.io.formats import read_objects
    from dkmsks.io.writers import write_events, write_objects

    spec = WorkloadSpec(
        o_init=args.o_init, subscriptions=args.subscriptions, timestamps=args.timestamps,
        objects_per_ts=args.objects_per_ts, inserts_per_ts=args.inserts_per_ts,
        deletes_per_ts=args.deletes_per_ts, k_max=args.k_max, seed=args.seed,
    )
    started = time.perf_counter()
    vocab = Vocabulary()
    load = read_objects(args.source, vocab, bounds=args.bounds, limit=spec.objects_needed)
    print_rejections(load.rejections, "source")
    objects, events = generate_workload(load.objects, spec)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    write_objects(out / "objects.tsv.gz", objects, vocab)
    write_events(out / "events.tsv.gz", events, vocab)
    print(
        f"wrote {out / 'objects.tsv.gz'} ({len(objects):,} objects) and {out / 'events.tsv.gz'} "
        f"({len(events):,} events) in {time.perf_counter() - started:.1f} s"
    )
    return 0
