"""The summary of one run: latency distributions, throughput, goodput under an SLO, errors by type."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from switchyard.bench.client import RequestResult
from switchyard.bench.slo import Slo, request_meets, run_meets, run_values


@dataclass(frozen=True)
class Distribution:
    """Seconds."""

    count: int
    mean: float
    median: float
    p90: float
    p99: float
    max: float

    @classmethod
    def of(cls, values: list[float]) -> Distribution | None:
        if not values:
            return None
        array = np.asarray(values, dtype=float)
        p50, p90, p99 = np.percentile(array, [50, 90, 99])
        return cls(len(array), float(array.mean()), float(p50), float(p90), float(p99), float(array.max()))


@dataclass(frozen=True)
class Summary:
    num_requests: int
    completed: int
    failed: int
    errors: dict[str, int]
    """Failed requests by error type (http_429, timeout, connection, stream_error, ...)."""
    duration: float
    request_throughput: float
    """Completed requests per second."""
    input_token_throughput: float
    output_token_throughput: float
    total_input_tokens: int
    total_output_tokens: int
    cached_tokens: int
    ttft: Distribution | None
    tpot: Distribution | None
    itl: Distribution | None
    e2e: Distribution | None
    request_rate: float
    """Offered arrival rate (inf = all at once)."""
    max_concurrency: int | None
    slo: str | None = None
    slo_values: dict[str, float] | None = None
    slo_met: bool | None = None
    goodput: float | None = None
    """Requests per second that individually met every SLO term."""
    error_examples: dict[str, str] = field(default_factory=dict)
    """The first message of each error type: a count alone does not say that the model name was wrong."""
    output_tokens_by_chunk: int = 0
    """Completed requests whose output tokens were counted one per chunk (no usage from the server and no
    tokenizer): their token counts, throughput and TPOT are only estimates."""

    def to_json(self) -> dict[str, Any]:
        """Plain JSON (no Infinity or NaN literal): an infinite rate or SLO value is written as the string "inf",
        an SLO value without samples as null."""
        return _finite(asdict(self))


def _finite(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None  # strict JSON has no NaN
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    return value


def summarize(
    results: list[RequestResult],
    duration: float,
    *,
    request_rate: float,
    max_concurrency: int | None = None,
    slo: Slo | None = None,
) -> Summary:
    done = [r for r in results if r.ok]
    errors = Counter(r.error for r in results if r.error is not None)
    output_tokens = sum(r.output_tokens for r in done)
    input_tokens = sum(r.prompt_tokens or 0 for r in done)
    per_second = 1.0 / duration if duration > 0 else 0.0
    slo_fields: dict[str, Any] = {}
    if slo is not None:
        slo_fields = dict(
            slo=slo.describe(),
            slo_values=run_values(results, slo),
            slo_met=run_meets(results, slo),
            goodput=sum(request_meets(r, slo) for r in results) * per_second,
        )
    return Summary(
        num_requests=len(results),
        completed=len(done),
        failed=len(results) - len(done),
        errors=dict(sorted(errors.items())),
        duration=duration,
        request_throughput=len(done) * per_second,
        input_token_throughput=input_tokens * per_second,
        output_token_throughput=output_tokens * per_second,
        total_input_tokens=input_tokens,
        total_output_tokens=output_tokens,
        cached_tokens=sum(r.cached_tokens or 0 for r in done),
        ttft=Distribution.of([r.ttft for r in done if r.ttft is not None]),
        tpot=Distribution.of([t for r in done if (t := r.tpot) is not None]),
        itl=Distribution.of([gap for r in done for gap in r.itl]),
        e2e=Distribution.of([r.e2e for r in done if r.e2e is not None]),
        request_rate=request_rate,
        max_concurrency=max_concurrency,
        error_examples={
            kind: next(r.error_message or "" for r in results if r.error == kind) for kind in sorted(errors)
        },
        output_tokens_by_chunk=sum(r.output_token_source == "chunks" for r in done),
        **slo_fields,
    )


def format_summary(summary: Summary) -> str:
    """The human-readable block printed after a run."""
    rate = "all at once" if summary.request_rate == float("inf") else f"{summary.request_rate:g} req/s"
    lines = [
        f"requests: {summary.completed} completed, {summary.failed} failed of {summary.num_requests} "
        f"in {summary.duration:.2f} s (offered {rate}"
        + (f", max concurrency {summary.max_concurrency})" if summary.max_concurrency else ")"),
        f"throughput: {summary.request_throughput:.2f} req/s, {summary.output_token_throughput:.1f} output tok/s, "
        f"{summary.input_token_throughput:.1f} input tok/s"
        + (f" ({summary.cached_tokens} prompt tokens cached)" if summary.cached_tokens else ""),
    ]
    if summary.output_tokens_by_chunk:
        lines.append(
            f"note: {summary.output_tokens_by_chunk} requests got no token usage from the server; their output "
            "tokens were counted one per chunk (pass --tokenizer to count them from the text)"
        )
    if summary.errors:
        lines.append("errors: " + ", ".join(f"{kind} × {count}" for kind, count in summary.errors.items()))
        lines += [f"  {kind}: {message}" for kind, message in summary.error_examples.items() if message]
    lines.append(f"{'ms':<6}{'mean':>10}{'median':>10}{'p90':>10}{'p99':>10}{'max':>10}")
    for name in ("ttft", "tpot", "itl", "e2e"):
        dist: Distribution | None = getattr(summary, name)
        if dist is not None:
            cells = (dist.mean, dist.median, dist.p90, dist.p99, dist.max)
            lines.append(f"{name.upper():<6}" + "".join(f"{v * 1e3:>10.1f}" for v in cells))
    if summary.slo is not None:
        values = ", ".join(
            f"{k} = {'no samples' if math.isnan(v) else f'{v * 1e3:.1f} ms'}"
            for k, v in (summary.slo_values or {}).items()
        )
        verdict = "MET" if summary.slo_met else "NOT MET"
        lines.append(f"SLO {summary.slo}: {verdict} ({values}); goodput {summary.goodput:.2f} req/s")
    return "\n".join(lines)
