"""Tenants for weighted fair share: a TOML file naming each tenant's weight and, optionally, its API key.

    [tenants.alice]
    weight = 3.0
    api_key = "sk-alice"

    [tenants.bob]
    weight = 1.0

With keys on, a request's tenant is its key's tenant; with keys off, it is the request's `user` field.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class TenantsConfig:
    weights: dict[str, float] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)
    """API key -> tenant name."""


def load_tenants(path: str | Path) -> TenantsConfig:
    """Parse and validate a tenants file; raises ValueError naming the file and the problem."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{path}: cannot read tenants file: {exc}") from None
    tenants = raw.get("tenants")
    if not isinstance(tenants, dict) or not tenants:
        raise ValueError(f"{path}: expected a [tenants.NAME] table per tenant")
    weights: dict[str, float] = {}
    keys: dict[str, str] = {}
    for name, entry in tenants.items():
        if not isinstance(entry, dict):
            raise ValueError(f"{path}: tenants.{name} must be a table")
        unknown = set(entry) - {"weight", "api_key"}
        if unknown:
            raise ValueError(f"{path}: tenants.{name} has unknown keys {sorted(unknown)}")
        weight = entry.get("weight", 1.0)
        if not isinstance(weight, int | float) or weight <= 0:
            raise ValueError(f"{path}: tenants.{name}.weight must be a number > 0")
        weights[name] = float(weight)
        key = entry.get("api_key")
        if key is not None:
            if not isinstance(key, str) or not key:
                raise ValueError(f"{path}: tenants.{name}.api_key must be a non-empty string")
            if key in keys:
                raise ValueError(f"{path}: tenants {keys[key]!r} and {name!r} share an api_key")
            keys[key] = name
    return TenantsConfig(weights=weights, keys=keys)
