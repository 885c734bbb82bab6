"""Tenants and their API keys in the tenants database: add, list, rotate a key, change limits, resolve a key.

A tenant has one working key at a time. Rotating makes a new key with the old one's limits and models and
revokes the old one in the same transaction, so there is never a moment with two working keys or none.
The gateway resolves a key on every request, so a rotation or a change of limits made by
`switchyard tenants` in another process takes effect at the next request.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from switchyard.errors import SwitchyardError
from switchyard.fleet.tenancy.database import Database
from switchyard.fleet.tenancy.keys import key_hash, new_api_key, shown_prefix
from switchyard.fleet.tenancy.records import ApiKeyRecord, Caller, IssuedKey, KeyLimits, Tenant

_KEY_COLUMNS = (
    "key_id, tenant, key_hash, shown_prefix, requests_per_minute, tokens_per_minute, max_concurrent, models, "
    "created, revoked"
)


class _Unchanged:
    """The type of UNCHANGED: a setting not given, where None is itself a value."""


UNCHANGED = _Unchanged()


class TenantNotFoundError(SwitchyardError):
    """No tenant has that name."""


class TenantExistsError(SwitchyardError):
    """A tenant of that name already exists."""


@dataclass(frozen=True)
class TenantListing:
    """A tenant and its keys (the working one and those rotated away), for `switchyard tenants list`."""

    tenant: Tenant
    keys: tuple[ApiKeyRecord, ...]

    @property
    def active_key(self) -> ApiKeyRecord | None:
        return next((key for key in self.keys if key.revoked is None), None)


class TenantStore:
    def __init__(self, database: Database, clock: Callable[[], float] = time.time) -> None:
        self._db = database
        self._clock = clock

    def add(
        self,
        name: str,
        priority: int = 0,
        weight: float = 1.0,
        limits: KeyLimits | None = None,
        models: Iterable[str] | None = None,
        eval_sample: float | None = None,
    ) -> IssuedKey:
        """A new tenant and its first key; TenantExistsError if the name is taken."""
        now = self._clock()
        tenant = Tenant(name=name, priority=priority, weight=weight, created=now, eval_sample=eval_sample)
        with self._db.transaction():
            if self._tenant_row(name) is not None:
                raise TenantExistsError(f"tenant {name!r} already exists")
            self._db.execute(
                "INSERT INTO tenants (name, priority, weight, created, eval_sample) VALUES (?, ?, ?, ?, ?)",
                (tenant.name, tenant.priority, tenant.weight, now, tenant.eval_sample),
            )
            return self._issue(name, limits or KeyLimits(), _model_set(models), now)

    def rotate_key(self, name: str) -> IssuedKey:
        """A new key for the tenant with its current key's limits and models; the old key stops working."""
        now = self._clock()
        with self._db.transaction():
            current = self._active_key(name)
            self._db.execute(
                "UPDATE api_keys SET revoked = ? WHERE tenant = ? AND revoked IS NULL", (now, name)
            )
            return self._issue(name, current.limits, current.models, now)

    def set_limits(
        self,
        name: str,
        limits: KeyLimits | None = None,
        models: Iterable[str] | None = None,
        all_models: bool = False,
        priority: int | None = None,
        weight: float | None = None,
        eval_sample: float | _Unchanged | None = UNCHANGED,
    ) -> TenantListing:
        """Change what is given (None leaves it; for `eval_sample`, None returns the tenant to the gateway's
        rate); `all_models` lifts the key's model restriction."""
        with self._db.transaction():
            tenant = self._tenant(name)
            key = self._active_key(name)
            if limits is not None:
                self._db.execute(
                    "UPDATE api_keys SET requests_per_minute = ?, tokens_per_minute = ?, max_concurrent = ? "
                    "WHERE key_id = ?",
                    (limits.requests_per_minute, limits.tokens_per_minute, limits.max_concurrent, key.key_id),
                )
            if models is not None or all_models:
                chosen = None if all_models else _model_set(models)
                self._db.execute(
                    "UPDATE api_keys SET models = ? WHERE key_id = ?", (_models_column(chosen), key.key_id)
                )
            if priority is not None or weight is not None or not isinstance(eval_sample, _Unchanged):
                changed = replace(
                    tenant,
                    priority=tenant.priority if priority is None else priority,
                    weight=tenant.weight if weight is None else weight,
                    eval_sample=tenant.eval_sample if isinstance(eval_sample, _Unchanged) else eval_sample,
                )
                self._db.execute(
                    "UPDATE tenants SET priority = ?, weight = ?, eval_sample = ? WHERE name = ?",
                    (changed.priority, changed.weight, changed.eval_sample, name),
                )
            return self.listing(name)

    def listing(self, name: str) -> TenantListing:
        rows = self._db.execute(
            f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE tenant = ? ORDER BY created", (name,)
        )
        return TenantListing(self._tenant(name), tuple(_key_record(row) for row in rows))

    def list(self) -> list[TenantListing]:
        names = [row[0] for row in self._db.execute("SELECT name FROM tenants ORDER BY name")]
        return [self.listing(name) for name in names]

    def resolve(self, key: str) -> Caller | None:
        """The tenant and key record of a working key, or None (unknown, or rotated away)."""
        rows = self._db.execute(
            f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE key_hash = ? AND revoked IS NULL", (key_hash(key),)
        )
        if not rows:
            return None
        record = _key_record(rows[0])
        return Caller(tenant=self._tenant(record.tenant), key=record)

    def _issue(self, tenant: str, limits: KeyLimits, models: frozenset[str] | None, now: float) -> IssuedKey:
        key = new_api_key()
        record = ApiKeyRecord(
            key_id=uuid.uuid4().hex[:12],
            tenant=tenant,
            key_hash=key_hash(key),
            shown_prefix=shown_prefix(key),
            limits=limits,
            models=models,
            created=now,
        )
        self._db.execute(
            f"INSERT INTO api_keys ({_KEY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                record.key_id,
                tenant,
                record.key_hash,
                record.shown_prefix,
                limits.requests_per_minute,
                limits.tokens_per_minute,
                limits.max_concurrent,
                _models_column(models),
                now,
                None,
            ),
        )
        return IssuedKey(key=key, record=record)

    def _tenant_row(self, name: str) -> tuple[Any, ...] | None:
        rows = self._db.execute(
            "SELECT name, priority, weight, created, eval_sample FROM tenants WHERE name = ?", (name,)
        )
        return rows[0] if rows else None

    def _tenant(self, name: str) -> Tenant:
        row = self._tenant_row(name)
        if row is None:
            raise TenantNotFoundError(f"no tenant named {name!r} (see `switchyard tenants list`)")
        return Tenant(
            name=row[0],
            priority=int(row[1]),
            weight=float(row[2]),
            created=float(row[3]),
            eval_sample=None if row[4] is None else float(row[4]),
        )

    def _active_key(self, name: str) -> ApiKeyRecord:
        self._tenant(name)
        rows = self._db.execute(
            f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE tenant = ? AND revoked IS NULL", (name,)
        )
        if not rows:
            raise TenantNotFoundError(
                f"tenant {name!r} has no working key; run `switchyard tenants rotate-key`"
            )
        return _key_record(rows[0])


def _model_set(models: Iterable[str] | None) -> frozenset[str] | None:
    if models is None:
        return None
    chosen = frozenset(model.strip() for model in models if model.strip())
    return chosen or None


def _models_column(models: frozenset[str] | None) -> str | None:
    return None if models is None else json.dumps(sorted(models))


def _key_record(row: tuple[Any, ...]) -> ApiKeyRecord:
    models = row[7]
    return ApiKeyRecord(
        key_id=row[0],
        tenant=row[1],
        key_hash=row[2],
        shown_prefix=row[3],
        limits=KeyLimits(row[4], row[5], row[6]),
        models=None if models is None else frozenset(json.loads(models)),
        created=float(row[8]),
        revoked=None if row[9] is None else float(row[9]),
    )
