"""Usage per tenant, model and minute in the tenants database: what `GET /v1/usage` sums.

One row per (tenant, model, minute), added to as requests finish, so the table grows with time and tenants,
not with requests; a query's `start` and `end` are therefore rounded down to the minute. Cost is recorded
when the request finishes, at the prices then in force, so a later change of prices does not rewrite history.
"""

from __future__ import annotations

from dataclasses import dataclass

from switchyard.fleet.tenancy.database import Database
from switchyard.fleet.usage import TokenUsage

SECONDS_PER_ROW = 60


@dataclass(frozen=True)
class UsageTotals:
    """Usage summed over a span, for one tenant and model."""

    tenant: str
    model: str
    requests: int
    cache_hits: int
    """Requests answered from the gateway's response cache (no tokens computed)."""
    usage: TokenUsage
    cost: float

    def as_json(self) -> dict[str, object]:
        return {
            "tenant": self.tenant,
            "model": self.model,
            "requests": self.requests,
            "cache_hits": self.cache_hits,
            "prompt_tokens": self.usage.prompt_tokens,
            "cached_tokens": self.usage.cached_tokens,
            "output_tokens": self.usage.output_tokens,
            "total_tokens": self.usage.total_tokens,
            "cost": self.cost,
        }


class UsageLog:
    def __init__(self, database: Database) -> None:
        self._db = database

    def record(
        self, tenant: str, model: str, at: float, usage: TokenUsage, cost: float, cache_hit: bool = False
    ) -> None:
        """Add one finished request (unix time `at`) to its minute's row."""
        self._db.execute(
            "INSERT INTO usage_minutes (tenant, model, minute, requests, cache_hits, prompt_tokens, "
            "cached_tokens, output_tokens, cost) VALUES (?, ?, ?, 1, ?, ?, ?, ?, ?) "
            "ON CONFLICT (tenant, model, minute) DO UPDATE SET "
            "requests = usage_minutes.requests + 1, "
            "cache_hits = usage_minutes.cache_hits + excluded.cache_hits, "
            "prompt_tokens = usage_minutes.prompt_tokens + excluded.prompt_tokens, "
            "cached_tokens = usage_minutes.cached_tokens + excluded.cached_tokens, "
            "output_tokens = usage_minutes.output_tokens + excluded.output_tokens, "
            "cost = usage_minutes.cost + excluded.cost",
            (
                tenant,
                model,
                _minute(at),
                int(cache_hit),
                usage.prompt_tokens,
                usage.cached_tokens,
                usage.output_tokens,
                cost,
            ),
        )

    def totals(
        self, tenant: str | None = None, start: float | None = None, end: float | None = None
    ) -> list[UsageTotals]:
        """Sums by tenant and model from `start` (inclusive) to `end` (exclusive), unix times rounded down to
        the minute; None: every tenant, from the beginning, to now."""
        clauses, params = [], []
        if tenant is not None:
            clauses.append("tenant = ?")
            params.append(tenant)
        if start is not None:
            clauses.append("minute >= ?")
            params.append(_minute(start))
        if end is not None:
            clauses.append("minute < ?")
            params.append(_minute(end))
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self._db.execute(
            "SELECT tenant, model, SUM(requests), SUM(cache_hits), SUM(prompt_tokens), SUM(cached_tokens), "
            f"SUM(output_tokens), SUM(cost) FROM usage_minutes {where} GROUP BY tenant, model "
            "ORDER BY tenant, model",
            params,
        )
        return [
            UsageTotals(
                tenant=row[0],
                model=row[1],
                requests=int(row[2]),
                cache_hits=int(row[3]),
                usage=TokenUsage(int(row[4]), int(row[5]), int(row[6])),
                cost=float(row[7]),
            )
            for row in rows
        ]


def _minute(at: float) -> int:
    return int(at // SECONDS_PER_ROW) * SECONDS_PER_ROW
