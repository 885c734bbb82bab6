"""`switchyard tenants`: the tenants a gateway with `--tenants-db` serves, their keys and limits.

    switchyard tenants add alice --rpm 60 --tpm 100000 --max-concurrent 4 --models chat,code --weight 2
    switchyard tenants list
    switchyard tenants rotate-key alice
    switchyard tenants set-limits alice --tpm 200000 --max-concurrent none
    switchyard tenants set-limits alice --eval-sample 0.2   # opt in: online eval logs 20% of its requests
    switchyard tenants weights > tenants.toml      # for `switchyard serve --tenants` on workers

A key is printed once, when it is made (add, rotate-key); the store keeps only its hash. A running gateway
sees every change at its next request.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from switchyard.errors import SwitchyardError
from switchyard.extras import MissingExtraError
from switchyard.fleet.errors import FleetConfigError
from switchyard.fleet.tenancy.database import default_tenants_db, open_database
from switchyard.fleet.tenancy.records import IssuedKey, KeyLimits
from switchyard.fleet.tenancy.store import UNCHANGED, TenantListing, TenantStore
from switchyard.fleet.tenancy.weights_file import weights_toml

_UNCHANGED = object()
"""A limit flag that was not given (set-limits leaves that limit as it is)."""
_LIMIT_FLAGS = (
    ("--rpm", "requests_per_minute", "requests per minute"),
    ("--tpm", "tokens_per_minute", "tokens per minute (prompt and output)"),
    ("--max-concurrent", "max_concurrent", "requests in flight at once"),
)


def _limit(value: str) -> int | None:
    if value.lower() in ("none", "unlimited"):
        return None
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number or `none`") from None
    if number < 1:
        raise argparse.ArgumentTypeError("a limit is at least 1 (`none` for no limit)")
    return number


def _sample_rate(value: str) -> float | None:
    if value.lower() in ("default", "none"):
        return None
    try:
        rate = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number in [0, 1] or `default`") from None
    if not 0 <= rate <= 1:
        raise argparse.ArgumentTypeError("a sample rate is in [0, 1] (0 opts the tenant out)")
    return rate


def _models(value: str) -> list[str]:
    return [model.strip() for model in value.split(",") if model.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="switchyard tenants",
        description="Manage the tenants of a fleet gateway run with --tenants-db: their API keys, limits, "
        "models, priority and fair-share weight.",
    )
    db = argparse.ArgumentParser(add_help=False)
    db.add_argument(
        "--db",
        default=None,
        metavar="PATH_OR_URL",
        help=f"the tenants database: a SQLite file or a postgresql:// URL (default {default_tenants_db()})",
    )
    db.add_argument("--json", action="store_true", help="print JSON instead of text")
    commands = parser.add_subparsers(dest="command", required=True)

    add = commands.add_parser(
        "add", parents=[db], help="add a tenant and print its first API key (shown once)"
    )
    add.add_argument("name", help="the tenant's name (letters, digits, '-', '_', '.'); labels metrics")
    _scheduling_flags(add, default=True)
    _limit_flags(add, default=None)
    add.add_argument(
        "--models", type=_models, default=None, help="comma-separated pools the key may use (default: all)"
    )

    commands.add_parser("list", parents=[db], help="list tenants, their keys (first characters) and limits")

    rotate = commands.add_parser(
        "rotate-key", parents=[db], help="make a new key with the same limits; the old key stops working now"
    )
    rotate.add_argument("name")

    limits = commands.add_parser(
        "set-limits",
        parents=[db],
        help="change a tenant's limits, models, priority or weight (what is not given stays)",
    )
    limits.add_argument("name")
    _scheduling_flags(limits, default=False)
    _limit_flags(limits, default=_UNCHANGED)
    chosen = limits.add_mutually_exclusive_group()
    chosen.add_argument("--models", type=_models, default=None, help="comma-separated pools the key may use")
    chosen.add_argument("--all-models", action="store_true", help="let the key use every pool")

    commands.add_parser(
        "weights",
        parents=[db],
        help="print the tenants' weights as a `switchyard serve --tenants` file, for workers not launched by "
        "the gateway",
    )
    return parser


def _scheduling_flags(parser: argparse.ArgumentParser, default: bool) -> None:
    parser.add_argument(
        "--eval-sample",
        type=_sample_rate,
        default=None if default else UNCHANGED,
        metavar="RATE",
        help="the share of the tenant's requests online evaluation logs (0 opts out; `default`: the "
        "gateway's [online_eval] rate)",
    )
    parser.add_argument(
        "--priority",
        type=int,
        default=0 if default else None,
        help="scheduler priority of every request (lower is more urgent"
        + (", default 0)" if default else ")"),
    )
    parser.add_argument(
        "--weight",
        type=float,
        default=1.0 if default else None,
        help="fair share within a priority level, relative to other tenants" + (" (1)" if default else ""),
    )


def _limit_flags(parser: argparse.ArgumentParser, default: object) -> None:
    for flag, dest, what in _LIMIT_FLAGS:
        parser.add_argument(
            flag, dest=dest, type=_limit, default=default, metavar="N", help=f"{what}; `none`: no limit"
        )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        database = open_database(args.db)
    except (SwitchyardError, MissingExtraError) as exc:
        print(f"switchyard tenants: error: {exc}", file=sys.stderr)
        return 2
    try:
        return _run(args, TenantStore(database))
    except (SwitchyardError, FleetConfigError) as exc:
        print(f"switchyard tenants: error: {exc}", file=sys.stderr)
        return 2
    finally:
        database.close()


def _run(args: argparse.Namespace, store: TenantStore) -> int:
    if args.command == "add":
        limits = KeyLimits(args.requests_per_minute, args.tokens_per_minute, args.max_concurrent)
        issued = store.add(args.name, args.priority, args.weight, limits, args.models, args.eval_sample)
        _print_issued(issued, args.json, "added")
    elif args.command == "rotate-key":
        _print_issued(store.rotate_key(args.name), args.json, "rotated")
    elif args.command == "set-limits":
        listing = store.set_limits(
            args.name,
            limits=_changed_limits(args, store.listing(args.name)),
            models=args.models,
            all_models=args.all_models,
            priority=args.priority,
            weight=args.weight,
            eval_sample=args.eval_sample,
        )
        _print_listings([listing], args.json)
    elif args.command == "list":
        _print_listings(store.list(), args.json)
    else:
        print(weights_toml(listing.tenant for listing in store.list()), end="")
    return 0


def _changed_limits(args: argparse.Namespace, listing: TenantListing) -> KeyLimits | None:
    given = {
        dest: getattr(args, dest) for _, dest, _ in _LIMIT_FLAGS if getattr(args, dest) is not _UNCHANGED
    }
    if not given:
        return None
    current = listing.active_key.limits if listing.active_key is not None else KeyLimits()
    values = {dest: given.get(dest, getattr(current, dest)) for _, dest, _ in _LIMIT_FLAGS}
    return KeyLimits(values["requests_per_minute"], values["tokens_per_minute"], values["max_concurrent"])


def _print_issued(issued: IssuedKey, as_json: bool, what: str) -> None:
    if as_json:
        print(
            json.dumps(
                {"tenant": issued.record.tenant, "key_id": issued.record.key_id, "api_key": issued.key}
            )
        )
        return
    print(f"{what} tenant {issued.record.tenant}; its API key (shown only now, store it safely):")
    print(issued.key)


def _print_listings(listings: Sequence[TenantListing], as_json: bool) -> None:
    rows = [_listing_json(listing) for listing in listings]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    if not rows:
        print("no tenants (add one with `switchyard tenants add NAME`)")
    for row in rows:
        key = row["key"]
        limits = (
            ", ".join(
                f"{name} {value if value is not None else 'unlimited'}"
                for name, value in key["limits"].items()
            )
            if key
            else "no working key"
        )
        models = ", ".join(key["models"]) if key and key["models"] else "all models"
        sample = "default" if row["eval_sample"] is None else f"{row['eval_sample']:g}"
        print(
            f"{row['tenant']}: priority {row['priority']}, weight {row['weight']:g}, eval sample {sample}; "
            f"key {key['prefix'] + '...' if key else '-'} ({limits}; {models}); "
            f"{row['rotated_keys']} rotated key(s)"
        )


def _listing_json(listing: TenantListing) -> dict[str, Any]:
    key = listing.active_key
    return {
        "tenant": listing.tenant.name,
        "priority": listing.tenant.priority,
        "weight": listing.tenant.weight,
        "eval_sample": listing.tenant.eval_sample,
        "created": datetime.fromtimestamp(listing.tenant.created, UTC).isoformat(),
        "key": None
        if key is None
        else {
            "key_id": key.key_id,
            "prefix": key.shown_prefix,
            "limits": {
                "requests_per_minute": key.limits.requests_per_minute,
                "tokens_per_minute": key.limits.tokens_per_minute,
                "max_concurrent": key.limits.max_concurrent,
            },
            "models": sorted(key.models) if key.models is not None else None,
        },
        "rotated_keys": sum(1 for record in listing.keys if record.revoked is not None),
    }
