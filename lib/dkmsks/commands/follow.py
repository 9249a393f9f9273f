"""``dkm follow``: keep one application and its workers warm; process each new timestamp as it
lands (publish with ``dkm publish`` from another shell)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from dkmsks.commands.spark_common import add_warehouse, session, warehouse_of
from dkmsks.jobs.priority import FOLLOW_NICE


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``dkm follow`` and its flags to the ``dkm`` parser."""
    p = subparsers.add_parser(
        "follow",
        help="process new timestamps as they land, with warm workers (low latency)",
        description=(
            "Starts long-running Spark tasks that build the plan's m workers once from knn_state "
            "(--processes of them, one per core by default) and a warm main server, then polls the "
            "landing tables and processes each new timestamp with the same exactly-once commit "
            "protocol as 'dkm run'. Needs at least --processes + 1 task slots: the default master "
            "is local[--slots]."
        ),
    )
    add_warehouse(p)
    p.add_argument("--slots", type=int, default=32, help="task slots of the default local master (%(default)s)")
    p.add_argument("--poll", type=float, default=0.25,
                   help="seconds between looks at the landing tables when idle (%(default)s)")
    p.add_argument("--until", type=int, default=None, help="stop after processing timestamp T")
    p.add_argument("--idle-exit", type=float, default=None, help="stop after this many idle seconds")
    p.add_argument("--max-timestamps", type=_at_least_zero, default=None,
                   help="at most this many timestamps per round (default 100, which bounds the memory of a "
                        "catch-up after an outage; 0: all pending in one round)")
    p.add_argument("--build-slots", type=_at_least_one, default=None,
                   help="worker tasks that build their state at once at start-up (default: one per core; "
                        "each build holds several times the memory the built worker keeps)")
    p.add_argument("--processes", type=_at_least_one, default=None,
                   help="long-running worker tasks (Python processes) that host the plan's m workers between them "
                        "(default: one per core, at most m; each applies its workers one after another, which on "
                        "few cores wastes less than m processes time-slicing them)")
    p.add_argument("--task-changes-from", type=_at_least_zero, default=None, metavar="OBJECTS",
                   help="rounds of at least this many objects have their result changes written into the journal "
                        "by the worker tasks, in parallel, instead of by the driver after them (default 10000: "
                        "catch-up rounds; 0: every round)")
    p.add_argument("--channel", choices=("auto", "spool", "flight"), default="auto",
                   help="how the driver hands rounds to the worker tasks: a spool folder beside the warehouse, which "
                        "driver and executors must share (local mode), or Arrow Flight to the driver over the network "
                        "(executors on any host; $DKMSKS_FOLLOW_PORT, $DKMSKS_DRIVER_HOST); auto: the spool with a "
                        "local master, Flight with any other (%(default)s)")
    p.add_argument("--broadcast", action="store_true",
                   help="hand every worker task every object (the paper's broadcast) instead of only the objects "
                        "its workers' subscriptions can reach (docs/design.md §2.6)")
    p.add_argument("--run-id", default="follow", help="recorded with every commit of this process (%(default)s)")
    p.add_argument("--nice", type=int, default=None,
                   help="CPU nice value of follow mode's processes and, when it leads its session, of the session "
                        f"(default: $DKMSKS_FOLLOW_NICE or {FOLLOW_NICE}: ahead of SQL readers and publishers on the "
                        "same machine; raising it needs CAP_SYS_NICE, else it is left as is; 0: as started)")
    p.set_defaults(func=run)


def _whole_number(minimum: int) -> Callable[[str], int]:
    """An argparse ``type``: a whole number of at least ``minimum``, else a one-line error."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


_at_least_one = _whole_number(1)
_at_least_zero = _whole_number(0)


def _nice_from_environment(text: str | None) -> int:
    """``$DKMSKS_FOLLOW_NICE`` as a nice value (the default when unset); a clear error otherwise."""
    if text is None or not text.strip():
        return FOLLOW_NICE
    try:
        return int(text)
    except ValueError:
        raise SystemExit(f"dkm follow: DKMSKS_FOLLOW_NICE must be a whole number (a nice value, -20 to 19), "
                         f"got {text!r}") from None


def run(args: argparse.Namespace) -> int:
    """Run ``dkm follow`` with the parsed ``args``; the exit status."""
    import os
    import signal
    import threading

    from dkmsks.jobs.follow import follow_forever, round_cap
    from dkmsks.jobs.priority import raise_cpu_priority

    warehouse = warehouse_of(args)
    # Before Spark's JVM starts, so that it and its Python workers inherit the priority.
    nice = args.nice if args.nice is not None else _nice_from_environment(os.environ.get("DKMSKS_FOLLOW_NICE"))
    print(raise_cpu_priority(nice), flush=True)
    stop = threading.Event()
    # A service manager (scripts/follow.sh stop, docker stop) sends SIGTERM: finish the round
    # in flight, stop the worker tasks, exit 0. Nothing is lost either way: every committed
    # timestamp is in Delta, and an interrupted round commits nothing.
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    spark = session(args, "dkmsks-follow", warehouse, master=args.master or f"local[{args.slots}]")
    try:
        return follow_forever(spark, warehouse, run_id=args.run_id, stop=stop, until=args.until,
                              max_timestamps=round_cap(args.max_timestamps), poll=args.poll, idle_exit=args.idle_exit,
                              build_slots=args.build_slots, processes=args.processes,
                              channel=args.channel, routing=not args.broadcast,
                              **({} if args.task_changes_from is None
                                 else {"change_file_objects": args.task_changes_from}),
                              log=lambda text: print(text, flush=True))
    finally:
        spark.stop()
