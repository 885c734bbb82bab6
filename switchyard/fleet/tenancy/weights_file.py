"""The tenants' fair-share weights as the file a Switchyard replica's `--tenants` flag reads.

The gateway writes it when it starts and gives it to the replicas it launches, so their schedulers share
each priority level by the store's weights (the tenant reaches them as the `user` field). A running worker
started elsewhere reads the same file: `switchyard tenants weights > tenants.toml`, then
`switchyard serve ... --tenants tenants.toml`. A weight changed later takes effect when replicas restart.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from switchyard.fleet.tenancy.records import Tenant

TENANTS_FLAG = "--tenants"


def weights_toml(tenants: Iterable[Tenant]) -> str:
    """`[tenants."NAME"]` tables with each tenant's weight (no keys: the gateway checks those)."""
    tables = [f"[tenants.{json.dumps(tenant.name)}]\nweight = {tenant.weight!r}\n" for tenant in tenants]
    return "\n".join(tables)


def with_weights_file(serve_args: Sequence[str], path: Path) -> tuple[str, ...]:
    """Serve arguments that read the weights from `path`, unless they already name a tenants file."""
    if any(arg == TENANTS_FLAG or arg.startswith(f"{TENANTS_FLAG}=") for arg in serve_args):
        return tuple(serve_args)
    return (*serve_args, TENANTS_FLAG, str(path))
