"""Where the ledger lives: the `[credits]` table of the fleet's TOML, or `--credits-db`.

[credits]                       # its presence turns the credit check on
ledger_db = "/var/lib/switchyard/ledger.db"     # default: $SWITCHYARD_HOME/ledger.db

What the gateway charges comes from the same file's `[prices.MODEL]` tables (prices.py); with credits on,
every pool needs a price.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from switchyard.fleet.errors import FleetConfigError
from switchyard.home import switchyard_home

LEDGER_FILE = "ledger.db"


def default_ledger_path() -> Path:
    """`$SWITCHYARD_HOME/ledger.db` (`~/.switchyard/ledger.db` when the variable is unset)."""
    return switchyard_home() / LEDGER_FILE


def ledger_db_from_mapping(document: Mapping[str, Any]) -> str | None:
    """The ledger file a parsed fleet TOML asks for, or None when it has no [credits] table (credits off)."""
    table = document.get("credits")
    if table is None:
        return None
    if not isinstance(table, Mapping):
        raise FleetConfigError("`credits` must be a table")
    unknown = sorted(set(table) - {"ledger_db"})
    if unknown:
        raise FleetConfigError(f"unknown setting(s) {', '.join(unknown)} in [credits]; known: ledger_db")
    ledger_db = table.get("ledger_db")
    if ledger_db is not None and not isinstance(ledger_db, str):
        raise FleetConfigError("[credits] ledger_db must be a file path")
    return str(Path(ledger_db).expanduser()) if ledger_db else str(default_ledger_path())
