"""Where the ledger lives and what the gateway charges: `[credits]` and `[prices.MODEL]` in the fleet's TOML.

[credits]                       # its presence turns the credit check on
ledger_db = "/var/lib/switchyard/ledger.db"     # default: $SWITCHYARD_HOME/ledger.db

[prices.chat]
input = 0.50
output = 1.50
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from switchyard.fleet.errors import FleetConfigError
from switchyard.fleet.prices import PriceTable, price_table_from_mapping

HOME_ENV = "SWITCHYARD_HOME"
"""Where Switchyard keeps its state (default `~/.switchyard`)."""
LEDGER_FILE = "ledger.db"


def default_ledger_path() -> Path:
    """`$SWITCHYARD_HOME/ledger.db` (`~/.switchyard/ledger.db` when the variable is unset)."""
    home = os.environ.get(HOME_ENV)
    return (Path(home).expanduser() if home else Path.home() / ".switchyard") / LEDGER_FILE


@dataclass(frozen=True)
class CreditsConfig:
    """The gateway's credit check: admit a request only if its tenant's credit covers it."""

    ledger_db: Path
    prices: PriceTable


def credits_config_from_mapping(document: Mapping[str, Any]) -> CreditsConfig | None:
    """The credit check a parsed fleet TOML asks for, or None when it has no [credits] table."""
    table = document.get("credits")
    if table is None:
        return None
    if not isinstance(table, Mapping):
        raise FleetConfigError("`credits` must be a table")
    unknown = sorted(set(table) - {"ledger_db"})
    if unknown:
        raise FleetConfigError(f"unknown setting(s) {', '.join(unknown)} in [credits]; known: ledger_db")
    prices = document.get("prices", {})
    if not isinstance(prices, Mapping):
        raise FleetConfigError("`prices` must be a table of [prices.MODEL] tables")
    ledger_db = table.get("ledger_db")
    if ledger_db is not None and not isinstance(ledger_db, str):
        raise FleetConfigError("[credits] ledger_db must be a file path")
    return CreditsConfig(
        ledger_db=Path(ledger_db).expanduser() if ledger_db else default_ledger_path(),
        prices=price_table_from_mapping(prices),
    )
