"""``dkm bench NAME [FLAGS]``: one command per benchmark of :mod:`dkmsks.bench`.

Each benchmark is a module of that package with ``main(argv)``; this module only lists them
and hands the flags over (``dkm bench NAME --help`` shows the benchmark's own flags). The
measurements behind decisions already made that are worth re-running (the kernels against the
numpy reference, memory per subscription, numba against Rust) are scripts in ``bench/``, not
subcommands.
"""

from __future__ import annotations

import argparse
import importlib

#: ``dkm bench NAME``: its module in :mod:`dkmsks.bench` and one line of help.
BENCHMARKS = {
    "paper": ("paper", "the paper's Tables 2-3 and Figures 7-10, all four methods -> docs/paper-reproduction.md"),
    "core": ("core", "the in-memory engine at the issue's protocol -> docs/benchmarks.md"),
    "pipeline": ("pipeline", "the Spark + Delta pipeline against its targets and naive Spark -> docs/benchmarks.md"),
    "follow": ("follow", "follow-mode latency and warm catch-up on a partitioned warehouse"),
    "backlog": ("backlog", "a backlog of timestamps in one micro-batch run (peak memory, exactness)"),
    "freshness": ("freshness", "a live warehouse: publish latency, freshness, SQL reader, burst catch-up"),
    "storage": ("storage", "the warehouse on a folder and on object storage, side by side -> docs/benchmarks.md"),
    "serve": ("serve", "delivery through dkm serve: 1,000 streams, publishers, follow mode, all over HTTP"),
    "connect": ("connect", "SQL through Spark Connect (dkm sql --remote) beside dkm sql, per query"),
    "spot-check": ("spot_check", "a large warehouse's results for random subscriptions against the oracle"),
}


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``dkm bench`` and its flags to the ``dkm`` parser."""
    p = subparsers.add_parser("bench", help="benchmarks (dkm bench paper: the paper's experiments)",
                              description="Benchmarks of dkmsks; 'dkm bench NAME --help' for a benchmark's flags. "
                                          "The records of decisions made, worth re-running, are scripts in "
                                          "bench/ (kernel.py, memory.py, rust.py).")
    sub = p.add_subparsers(dest="bench", metavar="NAME", required=True)
    for name, (_, summary) in BENCHMARKS.items():
        # No option prefix: every flag after NAME, --help included, belongs to the benchmark.
        b = sub.add_parser(name, help=summary, add_help=False, prefix_chars="\0")
        b.add_argument("argv", nargs="*")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``dkm bench NAME``: the benchmark's own ``main`` with the rest of the arguments; its exit status."""
    module = importlib.import_module(f"dkmsks.bench.{BENCHMARKS[args.bench][0]}")
    return int(module.main(args.argv))
