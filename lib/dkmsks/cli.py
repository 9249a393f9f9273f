"""The ``dkm`` console script: one subcommand per module in :mod:`dkmsks.commands`.

Each command module exposes ``register(subparsers)``, which adds its parser and sets
``func`` to a callable taking the parsed arguments and returning an exit code. Modules import
their heavy dependencies (Spark, pandas) inside ``run`` so ``dkm --help`` stays instant.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.abc
import sys
from collections.abc import Sequence
from typing import Any

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
    "serve",
    "token",
    "sql",
    "spark_sql",
    "spark_connect",
    "spark_history",
    "maintain",
    "bench",
)


#: Commands that read the Delta logs through delta-rs and pyarrow alone: no Spark, no pandas.
ARROW_ONLY_COMMANDS = frozenset({"export", "results", "watch", "status"})


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
    from dkmsks.storage.objectstore import WarehouseUnreachable
    from dkmsks.storage.writer_lock import WriterBusy

    try:
        return int(args.func(args) or 0)
    except WarehouseUnreachable as err:
        # Unreachable, no such bucket, refused credentials: one line that says which.
        print(f"dkm {args.command}: error: {err}", file=sys.stderr)
        return 2
    except WriterBusy as err:
        # Another job holds the warehouse: not a bug, retry later (exit 3 tells scripts so).
        print(f"dkm {args.command}: busy: {err}", file=sys.stderr)
        return 3
    except (ValueError, OSError) as err:
        # Domain errors carry fix-it messages; a traceback would bury them.
        from dkmsks.io.rejections import InputError

        if isinstance(err, (InputError, FileNotFoundError)) or type(err) is ValueError:
            print(f"dkm {args.command}: error: {err}", file=sys.stderr)
            return 2
        raise


def console() -> int:
    """The installed ``dkm`` script (and ``python -m dkmsks.cli``): :func:`main`, with pandas
    kept out of the :data:`ARROW_ONLY_COMMANDS`.

    pyarrow imports pandas the first time it converts anything (``pa.array``), only to tell
    pandas objects apart: 0.3 s of every such command's start here (a quarter of ``dkm status``
    at |S| = 1M, and what kept ``dkm export`` above 2 s). These commands never hand it one, so
    the script marks pandas absent before they start and pyarrow takes its pandas-free path.
    Only the script does this, whose process ends with the command: a caller of :func:`main`
    in its own process (a test, a notebook) keeps its pandas."""
    argv = sys.argv[1:]
    if argv and argv[0] in ARROW_ONLY_COMMANDS and "pandas" not in sys.modules:
        # A finder, not ``sys.modules["pandas"] = None``: pyarrow 26 looks pandas up in
        # sys.modules itself and fails on a None entry; an ImportError is its "no pandas".
        sys.meta_path.insert(0, _NoPandas())
    return main(argv)


class _NoPandas(importlib.abc.MetaPathFinder):
    """An import finder under which pandas is not installed."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if fullname == "pandas" or fullname.startswith("pandas."):
            raise ModuleNotFoundError(f"pandas is kept out of this command ({__name__}.console)", name=fullname)
        return None


if __name__ == "__main__":
    sys.exit(console())
