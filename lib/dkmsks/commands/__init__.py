"""Subcommands of the ``dkm`` console script, one module each with ``register(subparsers)``."""
