"""``dkm token create|list|revoke``: the bearer tokens of ``dkm serve`` (no Spark).

A token is printed once, at its creation; the tokens file keeps its SHA-256 only
(:mod:`dkmsks.service.auth`). A running service re-reads the file when it changes, so a revoked
token is refused from its next request on.
"""

from __future__ import annotations

import argparse

from dkmsks.commands.spark_common import add_warehouse


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``dkm token`` and its sub-commands to the ``dkm`` parser."""
    p = subparsers.add_parser(
        "token",
        help="create, list and revoke the bearer tokens of dkm serve",
        description=("Bearer tokens for dkm serve. Each has a name (the principal that owns the subscriptions "
                     "it makes; several tokens may share one, which is how a token is rotated) and scopes: "
                     "publish (POST /v1/objects), subscribe (its own subscriptions, results and events), admin "
                     "(everything). The file holds only each token's SHA-256 (mode 600): "
                     "<warehouse>/run/tokens.json unless --tokens names another."),
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = actions.add_parser("create", help="make a token and print it (once)")
    create.add_argument("--name", required=True, help="the principal it speaks for, e.g. app-1 or alice@example")
    create.add_argument("--scope", action="append", required=True, metavar="SCOPE",
                        help="publish, subscribe or admin (repeat, or comma-separated)")
    listing = actions.add_parser("list", help="list the tokens (never the tokens themselves)")
    revoke = actions.add_parser("revoke", help="remove a token by its id, or every token of a name")
    revoke.add_argument("which", metavar="ID_OR_NAME")
    for sub in (create, listing, revoke):
        add_tokens(sub)
        add_warehouse(sub, spark=False)
        sub.set_defaults(func=run)


def add_tokens(p: argparse.ArgumentParser) -> None:
    """The ``--tokens`` flag (also ``dkm serve``'s)."""
    p.add_argument("--tokens", default=None, metavar="FILE",
                   help="the tokens file (default: <warehouse>/run/tokens.json, this host's local home)")


def run(args: argparse.Namespace) -> int:
    """Run ``dkm token ACTION`` with the parsed ``args``; the exit status."""
    from dkmsks.service.auth import Scope, TokenStore, tokens_path
    from dkmsks.warehouse import Warehouse

    store = TokenStore(tokens_path(Warehouse.at(args.warehouse, args.database).run_dir, args.tokens))
    if args.action == "create":
        scopes = [Scope.parse(s) for text in args.scope for s in text.split(",") if s.strip()]
        record, token = store.create(args.name, scopes)
        print(token)
        print(f"token {record.id} for {record.name} ({', '.join(s.value for s in record.scopes)}) in {store.path}; "
              "it is shown only now: keep it secret, send it as 'Authorization: Bearer <token>'")
    elif args.action == "list":
        records = sorted(store.records().values(), key=lambda r: (r.name, r.created))
        if not records:
            print(f"no tokens in {store.path} (dkm token create --name NAME --scope SCOPE)")
        for r in records:
            print(f"{r.id}  {r.name:<24} {','.join(s.value for s in r.scopes):<26} created {r.created}")
    else:
        for r in store.revoke(args.which):
            print(f"revoked token {r.id} of {r.name}")
    return 0
