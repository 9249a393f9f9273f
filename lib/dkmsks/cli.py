"""The ``dkm`` console script: one subcommand per module in :mod:`dkmsks.commands`.

Each command module exposes ``register(subparsers)``, which adds its parser and sets
``func`` to a callable taking the parsed arguments and returning an exit code. Modules import
their heavy dependencies (Spark, pandas) inside ``run`` so ``dkm --help`` stays instant.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

#: Command modules in the order ``dkm --help`` lists them.
COMMAND_MODULES = (
    "generate",
    "oracle",
    "simulate",
    "run",
    "publish",
    "subscribe",
    "unsubscribe",
    "follow",
    "repartition",
    "export",
    "results",
    "watch",
    "status",
    "sql",
    "spark_sql",
    "spark_history",
    "maintain",
    "bench",
)


def build_parser() -> argparse.ArgumentParser:
    """The ``dkm`` parser with every sub-command."""
    parser = argparse.ArgumentParser(
        prog="dkm",
        description=(
            "dkmsks: exact spatial-keyword kNN monitoring (DkM-SKS) for location-aware "
            "publish/subscribe, on PySpark and Delta Lake."
        ),
        epilog="Run 'dkm COMMAND --help' for the flags of a command.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(f"dkmsks.commands.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The ``dkm`` entry point: run the sub-command; its exit status (one-line errors, no traceback)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    from dkmsks.spark.writer_lock import WriterBusy

    try:
        return int(args.func(args) or 0)
    except WriterBusy as err:
        # Another job holds the warehouse: not a bug, retry later (exit 3 tells scripts so).
        print(f"dkm {args.command}: busy: {err}", file=sys.stderr)
        return 3
    except (ValueError, OSError) as err:
        # Domain errors carry fix-it messages; a traceback would bury them.
        from dkmsks.io.formats import InputError

        if isinstance(err, (InputError, FileNotFoundError)) or type(err) is ValueError:
            print(f"dkm {args.command}: error: {err}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
