"""`switchyard credits`: grant credit to a tenant, and read balances and history, now or at a past time.

    switchyard credits grant acme 100 --expires-in 30d
    switchyard credits grant acme 25 --at 2025-01-01T00:00:00Z --id invoice-1042
    switchyard credits balance                      # every tenant, now
    switchyard credits balance acme --at 2025-02-01
    switchyard credits history acme

It works on the ledger file a running gateway uses (SQLite in WAL mode: both may write at once), and the
gateway sees a grant on its next request.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from switchyard.fleet.ledger.book import HistoryEntry
from switchyard.fleet.ledger.config import default_ledger_path
from switchyard.fleet.ledger.errors import LedgerConflictError, LedgerError
from switchyard.fleet.ledger.events import Grant, LedgerEvent, Spend
from switchyard.fleet.ledger.ledger import Ledger
from switchyard.fleet.prices import credits_text, micros_from_credits

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhdw]?)$")
_SECONDS_PER_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_time(text: str) -> float:
    """Seconds since the epoch from epoch seconds or ISO 8601 (UTC unless it gives an offset)."""
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds):
            raise argparse.ArgumentTypeError(f"{text!r} is not a time")
        return seconds
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a time: give ISO 8601 (2025-01-31T12:00:00Z) or seconds since the epoch"
        ) from exc
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def parse_duration(text: str) -> float:
    """Seconds from `90`, `90s`, `15m`, `12h`, `30d` or `2w`."""
    match = _DURATION.match(text.strip())
    if match is None or float(match.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration: give e.g. 3600, 90m, 12h, 30d or 2w")
    return float(match.group(1)) * _SECONDS_PER_UNIT[match.group(2)]


def format_time(at: float) -> str:
    if math.isinf(at):
        return "never"
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="switchyard credits",
        description="The credits ledger the gateway charges requests to. Amounts are in credits (prices in "
        "[prices.MODEL] are credits per 1M tokens); times are ISO 8601 (UTC unless an offset is given) or "
        "seconds since the epoch.",
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--ledger-db",
        type=Path,
        default=None,
        help=f"the ledger file (default {default_ledger_path()}, under $SWITCHYARD_HOME)",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    grant = commands.add_parser(
        "grant",
        parents=[common],
        help="give a tenant credit",
        description="Give TENANT AMOUNT credits. Spends take from the grant that expires first. A grant "
        "back-dated with --at is placed where it belongs, and the balances after it are corrected.",
    )
    grant.add_argument("tenant")
    grant.add_argument("amount", help="credits, up to 6 decimals (e.g. 100 or 12.5)")
    expiry = grant.add_mutually_exclusive_group()
    expiry.add_argument(
        "--expires-in", type=parse_duration, default=None, help="e.g. 30d, 12h (default: never)"
    )
    expiry.add_argument("--expires-at", type=parse_time, default=None, help="the time the credit lapses")
    grant.add_argument(
        "--at", type=parse_time, default=None, help="when the grant takes effect (default: now)"
    )
    grant.add_argument(
        "--id",
        default=None,
        help="the grant's id (e.g. an invoice number): granting again with the same id records it once",
    )
    grant.add_argument("--note", default="", help="a note kept with the grant")
    grant.set_defaults(func=cmd_grant)

    balance = commands.add_parser(
        "balance",
        parents=[common],
        help="tenants' balances, now or at a past time",
        description="Balances in credits: unexpired grants less spends. A request not settled yet counts at "
        "its reservation.",
    )
    balance.add_argument("tenants", nargs="*", metavar="TENANT", help="default: every tenant in the ledger")
    balance.add_argument(
        "--at", type=parse_time, default=None, help="the balance at this time (default: now)"
    )
    balance.set_defaults(func=cmd_balance)

    history = commands.add_parser(
        "history",
        parents=[common],
        help="a tenant's grants and spends with the balance after each",
        description="A tenant's events in time order (their time, not the order they were recorded).",
    )
    history.add_argument("tenant")
    history.add_argument("--at", type=parse_time, default=None, help="only events up to this time")
    history.set_defaults(func=cmd_history)
    return parser


def cmd_grant(args: argparse.Namespace, ledger: Ledger) -> int:
    try:
        amount = micros_from_credits(args.amount)
    except ValueError as exc:
        raise LedgerError(str(exc)) from exc
    if args.id is not None:
        logged = ledger.event(args.id)
        if logged is not None:
            return _already_granted(args, amount, logged)
    at = args.at if args.at is not None else time.time()
    expires_at = args.expires_at if args.expires_at is not None else math.inf
    if args.expires_in is not None:
        expires_at = at + args.expires_in
    grant = Grant(
        event_id=args.id or f"grant-{uuid.uuid4().hex}",
        tenant=args.tenant,
        amount=amount,
        at=at,
        expires_at=expires_at,
        note=args.note,
    )
    ledger.record(grant)
    balance = credits_text(ledger.balance(args.tenant, time.time()))
    print(
        f"granted {credits_text(amount)} credits to {args.tenant} at {format_time(at)}, expiring "
        f"{format_time(expires_at)} (id {grant.event_id}); balance now {balance}"
    )
    return 0


def _already_granted(args: argparse.Namespace, amount: int, logged: LedgerEvent) -> int:
    """A grant re-sent under its id (a retry, perhaps with a later default --at): recorded once, and only
    if it is the same tenant and amount."""
    if not isinstance(logged, Grant) or (logged.tenant, logged.amount) != (args.tenant, amount):
        raise LedgerConflictError(f"the id {args.id!r} is already the ledger's {logged!r}; choose another id")
    print(f"already recorded: grant {args.id} of {credits_text(logged.amount)} credits to {logged.tenant}")
    return 0


def cmd_balance(args: argparse.Namespace, ledger: Ledger) -> int:
    at = args.at if args.at is not None else time.time()
    tenants = args.tenants or ledger.tenants()
    print(f"balances at {format_time(at)} (credits)")
    width = max((len(tenant) for tenant in tenants), default=0)
    for tenant in tenants:
        print(f"{tenant:<{width}}  {credits_text(ledger.balance(tenant, at))}")
    return 0


def cmd_history(args: argparse.Namespace, ledger: Ledger) -> int:
    until = args.at if args.at is not None else math.inf
    entries = ledger.history(args.tenant, until)
    if not entries:
        print(f"no events for {args.tenant}")
        return 0
    for entry in entries:
        print(_history_line(entry))
    return 0


def _history_line(entry: HistoryEntry) -> str:
    event = entry.event
    if isinstance(event, Spend):
        settled = f"reserved {credits_text(event.amount)}" if entry.settled else "reserved, not settled yet"
        change = f"-{credits_text(entry.amount)} ({settled})"
        kind = "spend"
    else:
        change = f"+{credits_text(entry.amount)} (expires {format_time(event.expires_at)})"
        kind = "grant"
    note = f"  {event.note}" if event.note else ""
    return (
        f"{format_time(event.at)}  {kind:<5}  {change}  balance {credits_text(entry.balance_after)}  "
        f"[{event.event_id}]{note}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        ledger = Ledger.open(args.ledger_db or default_ledger_path())
        try:
            return int(args.func(args, ledger))
        finally:
            ledger.close()
    except LedgerError as exc:
        print(f"switchyard credits: error: {exc}", file=sys.stderr)
        return 1
