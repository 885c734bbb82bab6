"""The online-eval settings: which share of requests is logged, per tenant, and where the log lives."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from switchyard.fleet.errors import FleetConfigError
from switchyard.home import switchyard_home

DEFAULT_MAX_BYTES = 1 << 20
"""A logged answer larger than this is not logged (the request still is answered)."""


def default_eval_log() -> Path:
    return switchyard_home() / "online-eval.db"


@dataclass(frozen=True)
class OnlineEvalConfig:
    """TOML `[online_eval]`, or `--eval-sample RATE` / `--eval-log PATH`."""

    sample: float = 0.0
    """The share of requests logged (0..1): the gateway-wide rate, and the rate of tenants not in `tenants`."""
    tenants: Mapping[str, float] = field(default_factory=dict)
    """Per-tenant opt-in rates (`[online_eval.tenants] acme = 0.2`), overriding `sample`."""
    log: str | None = None
    """The SQLite log (default $SWITCHYARD_HOME/online-eval.db)."""
    max_bytes: int = DEFAULT_MAX_BYTES
    queue: int = 1024
    """Records waiting for the writer; beyond it a record is dropped, never the caller delayed."""

    def __post_init__(self) -> None:
        for name, rate in [("sample", self.sample), *self.tenants.items()]:
            if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
                raise FleetConfigError(
                    f"online_eval: the sample rate of {name} must be in [0, 1], got {rate!r}"
                )
        if self.max_bytes < 1 or self.queue < 1:
            raise FleetConfigError("online_eval: max_bytes and queue must be at least 1")

    def rate(self, tenant: str) -> float:
        return float(self.tenants.get(tenant, self.sample))

    @property
    def log_path(self) -> Path:
        return Path(self.log).expanduser() if self.log else default_eval_log()


def online_eval_from_mapping(table: Any) -> OnlineEvalConfig:
    if not isinstance(table, Mapping):
        raise FleetConfigError("online_eval must be a table")
    known = {"sample", "tenants", "log", "max_bytes", "queue"}
    unknown = sorted(set(table) - known)
    if unknown:
        raise FleetConfigError(f"unknown setting(s) {', '.join(unknown)} in [online_eval]")
    tenants = table.get("tenants", {})
    if not isinstance(tenants, Mapping):
        raise FleetConfigError("[online_eval] tenants must be a table of tenant = rate")
    return OnlineEvalConfig(**{**table, "tenants": dict(tenants)})
