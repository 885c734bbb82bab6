"""The fields the gateway sets in a tenant's request before a replica sees it.

A Switchyard replica's scheduler orders by `priority` (lower is more urgent) and shares each priority level
between tenants by weight; it takes the tenant from the `user` field (when it checks no per-tenant keys of its
own). So the gateway writes the tenant's name into `user` and the tenant's priority into `priority`,
replacing what the client sent: a client cannot jump its tenant's queue or spend another tenant's share. The
weights reach launched replicas through the tenants file their `--tenants` flag reads (see
tenancy/weights_file.py). vLLM and SGLang take `priority` (when their scheduler is priority-based) and `user`.

For chat and completions streams, `stream_options.include_usage` is turned on so the replica reports the
exact usage at the end (the usage meter hides that chunk from a client that had not asked for it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from switchyard.fleet.tenancy.records import Tenant

USAGE_REPORTING_ENDPOINTS = frozenset({"chat", "completions"})
"""Endpoints whose streams report usage only when asked (the Responses API always reports it)."""


@dataclass(frozen=True)
class TenantBody:
    body: bytes
    """What the replica receives."""
    hide_usage_chunk: bool
    """True when the gateway, not the client, asked for the stream's usage chunk."""


def tenant_body(body: Mapping[str, Any], endpoint: str, tenant: Tenant) -> TenantBody:
    fields: dict[str, Any] = {**body, "user": tenant.name, "priority": tenant.priority}
    added_usage = False
    if body.get("stream") is True and endpoint in USAGE_REPORTING_ENDPOINTS:
        options = body.get("stream_options")
        options = dict(options) if isinstance(options, Mapping) else {}
        if options.get("include_usage") is not True:
            options["include_usage"] = True
            added_usage = True
        fields["stream_options"] = options
    return TenantBody(json.dumps(fields, ensure_ascii=False).encode(), added_usage)


def max_output_tokens(body: Mapping[str, Any]) -> int | None:
    """The request's output bound, whichever field names it."""
    for name in ("max_completion_tokens", "max_tokens", "max_output_tokens"):
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None
