"""Counting an answer's tokens as it passes: per event while streaming, the replica's report when it comes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from switchyard.fleet.prices import ModelPrice, PriceTable
from switchyard.fleet.usage import TokenUsage
from switchyard.fleet.usage_meter import UsageMeter


def event(payload: Any) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()


def chat_chunk(text: str) -> bytes:
    return event({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": text}}]})


USAGE_CHUNK = event(
    {
        "object": "chat.completion.chunk",
        "choices": [],
        "usage": {"prompt_tokens": 9, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 4}},
    }
)


def test_a_stream_is_counted_per_event_and_the_report_replaces_the_count() -> None:
    heard: list[int] = []
    meter = UsageMeter(on_output_tokens=heard.append)
    passed = meter.observe_events(chat_chunk("a") + chat_chunk("b"))
    assert passed == chat_chunk("a") + chat_chunk("b")
    assert meter.usage(prompt_estimate=7) == TokenUsage(prompt_tokens=7, output_tokens=2)
    meter.observe_events(chat_chunk("c") + USAGE_CHUNK + b"data: [DONE]\n\n")
    assert heard == [2, 1]
    assert meter.usage(prompt_estimate=7) == TokenUsage(prompt_tokens=9, cached_tokens=4, output_tokens=3)


def test_the_usage_chunk_the_gateway_asked_for_is_hidden_from_the_client() -> None:
    meter = UsageMeter(drop_usage_chunk=True, record_up_to=1 << 20)
    passed = meter.observe_events(chat_chunk("a") + USAGE_CHUNK + b"data: [DONE]\n\n")
    assert passed == chat_chunk("a") + b"data: [DONE]\n\n"
    assert meter.reported == TokenUsage(9, 4, 3)
    assert meter.recorded == passed


def test_completions_and_responses_events_count_too() -> None:
    meter = UsageMeter()
    meter.observe_events(
        event({"choices": [{"text": "x"}, {"text": "y"}]}) + event({"choices": [{"text": ""}]})
    )
    responses = b"event: response.output_text.delta\n" + event(
        {"type": "response.output_text.delta", "delta": "z"}
    )
    meter.observe_events(responses + b"event: response.created\n" + event({"type": "response.created"}))
    assert meter.counted_output_tokens == 3


def test_a_body_reports_its_usage_and_recording_stops_past_its_bound() -> None:
    meter = UsageMeter(record_up_to=10)
    body = json.dumps({"usage": {"input_tokens": 5, "output_tokens": 2}}).encode()
    meter.observe_body(body)
    assert meter.usage(1) == TokenUsage(5, 0, 2)
    assert meter.recorded is None  # the body is longer than 10 bytes


def test_prices_per_million_tokens() -> None:
    price = ModelPrice(input=2.0, cached_input=0.5, output=8.0)
    usage = TokenUsage(prompt_tokens=1_000_000, cached_tokens=400_000, output_tokens=250_000)
    assert float(price.cost(usage)) == pytest.approx(
        600_000 * 2.0 / 1e6 + 400_000 * 0.5 / 1e6 + 250_000 * 8.0 / 1e6
    )
    assert float(ModelPrice(input=2.0).cost(TokenUsage(10, 10, 0))) == pytest.approx(
        20 / 1e6
    )  # cached at the input price
    assert PriceTable({"chat": price}).cost("unpriced", usage) == 0.0
