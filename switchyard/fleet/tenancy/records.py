"""The tenant store's records: tenants, their API keys, and each key's limits."""

from __future__ import annotations

from dataclasses import dataclass

from switchyard.fleet.errors import FleetConfigError


@dataclass(frozen=True)
class KeyLimits:
    """What one key may use; None is no limit."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    """Prompt tokens (counted at admission) plus output tokens (counted as they stream)."""
    max_concurrent: int | None = None
    """Requests the key may have in flight at once."""

    def __post_init__(self) -> None:
        for name, value in (
            ("requests_per_minute", self.requests_per_minute),
            ("tokens_per_minute", self.tokens_per_minute),
            ("max_concurrent", self.max_concurrent),
        ):
            if value is not None and value < 1:
                raise FleetConfigError(f"{name} must be at least 1 (or unset: no limit)")

    @property
    def unlimited(self) -> bool:
        return (
            self.requests_per_minute is None
            and self.tokens_per_minute is None
            and self.max_concurrent is None
        )


@dataclass(frozen=True)
class Tenant:
    """A team or customer the gateway serves; its requests reach the replicas' scheduler under its name."""

    name: str
    priority: int = 0
    """The scheduler's priority for every request of the tenant (lower is more urgent, as the server's)."""
    weight: float = 1.0
    """The tenant's fair share within a priority level, relative to the other tenants' weights."""
    created: float = 0.0
    """Unix time."""
    eval_sample: float | None = None
    """The share of the tenant's requests online evaluation logs (its opt-in); None: the gateway's rate."""

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise FleetConfigError(
                f"tenant name {self.name!r}: use letters, digits, '-', '_' and '.' (it labels metrics)"
            )
        if self.weight <= 0:
            raise FleetConfigError(f"tenant {self.name!r}: weight must be > 0")
        if self.eval_sample is not None and not 0 <= self.eval_sample <= 1:
            raise FleetConfigError(f"tenant {self.name!r}: eval_sample must be in [0, 1]")


@dataclass(frozen=True)
class ApiKeyRecord:
    """One key as the store keeps it: never the key itself, only its hash and first characters."""

    key_id: str
    tenant: str
    key_hash: str
    shown_prefix: str
    limits: KeyLimits
    models: frozenset[str] | None
    """The models (pool names) the key may use; None: all of them."""
    created: float
    revoked: float | None = None
    """Unix time the key stopped working (rotated away), or None while it works."""

    def may_use(self, model: str) -> bool:
        return self.models is None or model in self.models


@dataclass(frozen=True)
class IssuedKey:
    """A key just made: the only time its plain text exists outside the client."""

    key: str
    record: ApiKeyRecord


@dataclass(frozen=True)
class Caller:
    """Who a request comes from, as the gateway resolved its API key."""

    tenant: Tenant
    key: ApiKeyRecord
