"""``dkm watch``: print each result change as its timestamp commits (no Spark)."""

from __future__ import annotations

import argparse
import json
import sys

from dkmsks.commands.spark_common import add_warehouse, warehouse_of


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``dkm watch`` and its flags to the ``dkm`` parser."""
    p = subparsers.add_parser(
        "watch",
        help="print result changes as the pipeline commits them",
        description=("Prints one line per result change — timestamp, subscription, insert / update / "
                     "delete, and the result after it (object ids with distances) — read from the "
                     "journal as each run commits. Resumable: --from T prints the changes of the "
                     "timestamps after T, so the last t printed resumes without gaps or repeats. "
                     "Ctrl-C stops it."),
    )
    p.add_argument("--sub", type=int, action="append", default=None, metavar="ID",
                   help="only this subscription (repeat for several; default: all)")
    p.add_argument("--from", dest="from_t", type=int, default=None, metavar="T",
                   help="print the changes of timestamps after T (default: the last processed one, so "
                        "only changes committed from now on)")
    p.add_argument("--until", type=int, default=None, metavar="T", help="stop once timestamp T is processed")
    p.add_argument("--follow", action=argparse.BooleanOptionalAction, default=True,
                   help="wait for new commits (default); --no-follow prints what is committed and exits")
    p.add_argument("--poll", type=float, default=1.0, help="seconds between looks at the journal (%(default)s)")
    p.add_argument("--json", action="store_true",
                   help="JSON lines {t, sub_id, change, object_ids, distances} with exact distances")
    add_warehouse(p, spark=False)
    p.set_defaults(func=run)


def describe(change) -> str:
    """One human-readable line for a :class:`~dkmsks.client.Change`."""
    head = f"t={change.t} sub={change.sub_id} {change.change}"
    if change.change == "delete":
        return head
    if not change.object_ids:
        return f"{head}: no result yet"
    return f"{head}: " + ", ".join(f"{o} ({d:.6g})" for o, d in zip(change.object_ids, change.distances, strict=True))


def run(args: argparse.Namespace) -> int:
    """Run ``dkm watch`` with the parsed ``args``; the exit status."""
    from dkmsks.client import Client

    if args.poll <= 0:
        raise ValueError(f"--poll is {args.poll}: give a positive number of seconds")
    client = Client(warehouse_of(args))
    changes = client.watch(args.sub, args.from_t, poll=args.poll, until=args.until, follow=args.follow)
    try:
        for c in changes:
            if args.json:
                line = json.dumps({"t": c.t, "sub_id": c.sub_id, "change": c.change,
                                   "object_ids": list(c.object_ids), "distances": list(c.distances)})
            else:
                line = describe(c)
            print(line, flush=True)
    except KeyboardInterrupt:
        print(file=sys.stderr)  # end the ^C line; stopping is the normal way out of a watch
    except BrokenPipeError:
        sys.stderr.close()  # a closed reader (| head) ends the watch quietly
    return 0
