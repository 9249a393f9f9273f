"""Command-line flags derived from the one declaration of the tuning parameters.

``dkm simulate``, ``dkm run`` and ``spark_apps/partition.py`` all add their ``--method``,
``--workers``, ``--theta``, ... flags here, from :data:`dkmsks.core.config.PARAMETERS`, and
turn the parsed arguments into a :class:`~dkmsks.core.config.PartitionConfig` (which validates
them). Only the standard library and the config module are imported, so ``--help`` stays
instant.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable

from dkmsks.core.config import PARAMETERS, PartitionConfig


def add_partition_flags(parser: argparse.ArgumentParser, *, required: Iterable[str] = ()) -> None:
    """One flag per tuning parameter; those named in ``required`` have no default."""
    must = set(required)
    group = parser.add_argument_group("partitioning (tuning parameters)")
    for p in PARAMETERS:
        kind = str if p.choices is not None else p.kind
        if p.name in must:
            group.add_argument(p.flag, dest=p.name, type=kind, choices=p.choices, required=True, help=p.help)
        else:
            default = p.default.value if p.choices is not None else p.default
            group.add_argument(p.flag, dest=p.name, type=kind, choices=p.choices, default=default,
                               help=f"{p.help} (%(default)s)")


def config_from_args(args: argparse.Namespace) -> PartitionConfig:
    """The validated configuration of parsed flags (a bad value raises :class:`ValueError`
    whose message names the parameter)."""
    return PartitionConfig(**{p.name: getattr(args, p.name) for p in PARAMETERS})
