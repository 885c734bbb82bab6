"""Tracing of agent runs through OpenTelemetry: run, turn, model call, tool call, approval and handoff spans.

Exporters are chosen explicitly: the console, a JSON-lines file, or OTLP only when an endpoint is configured,
so nothing leaves the machine unless asked. Each tracer gets its own TracerProvider (no global provider is
installed), so two runners in one process can trace to different places.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from switchyard.extras import require_extra

with require_extra("agents"):
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        ConsoleSpanExporter,
        SimpleSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )


@dataclass(frozen=True)
class TraceConfig:
    console: bool = False
    jsonl_path: Path | None = None
    otlp_endpoint: str | None = None
    """e.g. http://localhost:4318/v1/traces; needs opentelemetry-exporter-otlp-proto-http installed."""
    service_name: str = "switchyard-agents"


class JsonLinesSpanExporter(SpanExporter):
    """One finished span per line, as compact JSON (name, ids, times, attributes, status)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = [json.dumps(span_record(span), ensure_ascii=False) for span in spans]
        with self._lock, self.path.open("a", encoding="utf-8") as out:
            out.writelines(line + "\n" for line in lines)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


def span_record(span: ReadableSpan) -> dict[str, Any]:
    context = span.context
    return {
        "name": span.name,
        "trace_id": f"{context.trace_id:032x}" if context else None,
        "span_id": f"{context.span_id:016x}" if context else None,
        "parent_id": f"{span.parent.span_id:016x}" if span.parent else None,
        "start_ns": span.start_time,
        "end_ns": span.end_time,
        "status": span.status.status_code.name,
        "attributes": dict(span.attributes or {}),
    }


def build_provider(config: TraceConfig, extra: Sequence[SpanExporter] = ()) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": config.service_name}))
    exporters: list[SpanExporter] = list(extra)
    if config.console:
        exporters.append(ConsoleSpanExporter())
    if config.jsonl_path is not None:
        exporters.append(JsonLinesSpanExporter(config.jsonl_path))
    if config.otlp_endpoint is not None:
        with require_extra("agents"):
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporters.append(OTLPSpanExporter(endpoint=config.otlp_endpoint))
    for exporter in exporters:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


class AgentTracer:
    """Spans named `agent.<kind>` with `switchyard.*` and `gen_ai.*` attributes and a latency in ms."""

    def __init__(self, provider: trace.TracerProvider | None = None) -> None:
        self.provider = provider
        self._tracer = provider.get_tracer("switchyard.agents") if provider else trace.NoOpTracer()

    @classmethod
    def from_config(cls, config: TraceConfig | None, extra: Sequence[SpanExporter] = ()) -> AgentTracer:
        if config is None and not extra:
            return cls()
        return cls(build_provider(config or TraceConfig(), extra))

    @contextmanager
    def span(self, kind: str, **attributes: Any) -> Iterator[trace.Span]:
        start = time.perf_counter()
        with self._tracer.start_as_current_span(f"agent.{kind}") as span:
            for key, value in attributes.items():
                set_attribute(span, key, value)
            try:
                yield span
            finally:
                span.set_attribute("switchyard.latency_ms", round((time.perf_counter() - start) * 1000, 3))

    def shutdown(self) -> None:
        if isinstance(self.provider, TracerProvider):
            self.provider.shutdown()


def set_attribute(span: trace.Span, key: str, value: Any) -> None:
    if value is None:
        return
    name = key if "." in key else f"switchyard.{key}"
    span.set_attribute(name, value if isinstance(value, str | bool | int | float) else json.dumps(value))
