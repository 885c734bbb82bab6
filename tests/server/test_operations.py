"""Operator-facing behaviour: health, metrics, models, API key, overload (429), timeouts, graceful shutdown."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from harness import MODEL, RunningServer, blocks_in_use, metric, start_server

USER = [{"role": "user", "content": "Tell me a long story."}]
LONG = {"max_tokens": 200, "temperature": 0, "extra_body": {"ignore_eos": True}}


def open_stream(http: httpx.Client, **body: object) -> Iterator[dict]:
    """Chunks of a raw streaming chat request, read as they come."""
    payload = {"model": MODEL, "messages": USER, "stream": True, **body}
    with http.stream("POST", "/v1/chat/completions", json=payload) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                yield json.loads(line.removeprefix("data: "))


def first_content(chunks: Iterator[dict]) -> dict:
    """Advance a stream to its first content chunk (the request is then running, not waiting)."""
    for chunk in chunks:
        if chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
            return chunk
    raise AssertionError("stream ended without content")


def test_health_version_models(server: RunningServer, client: openai.OpenAI) -> None:
    http = server.http()
    assert http.get("/health").status_code == 200
    assert http.get("/version").json()["version"]
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert models.data[0].model_extra is not None and models.data[0].model_extra["max_model_len"] == 256


def test_models_retrieve(client: openai.OpenAI) -> None:
    model = client.models.retrieve(MODEL)
    assert model.id == MODEL and model.object == "model" and model.owned_by and model.created > 0
    with pytest.raises(openai.NotFoundError) as info:
        client.models.retrieve("gpt-17")
    assert info.value.code == "model_not_found"


def test_every_response_carries_a_request_id(server: RunningServer, client: openai.OpenAI) -> None:
    """OpenAI's API sends x-request-id on every response; the openai client exposes it for bug reports."""
    answer = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=1)
    assert answer._request_id
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-17", messages=USER, max_tokens=1)  # type: ignore[arg-type]
    assert info.value.request_id and info.value.request_id != answer._request_id
    http = server.http()
    assert http.get("/health", headers={"x-request-id": "trace-42"}).headers["x-request-id"] == "trace-42"
    stream = http.post(
        "/v1/completions",
        json={"model": MODEL, "prompt": "Hi", "max_tokens": 2, "stream": True},
        headers={"x-request-id": "trace-43"},
    )
    assert stream.status_code == 200 and stream.headers["x-request-id"] == "trace-43"


def test_metrics_are_exposed_and_move(server: RunningServer, client: openai.OpenAI) -> None:
    http = server.http()
    before = http.get("/metrics").text
    client.chat.completions.create(model=MODEL, messages=USER, max_tokens=7, extra_body={"ignore_eos": True})
    after = http.get("/metrics")
    assert after.headers["content-type"].startswith("text/plain")
    text = after.text
    for name in (
        "time_to_first_token_seconds",
        "inter_token_latency_seconds",
        "e2e_request_latency_seconds",
        "request_queue_time_seconds",
        "request_prefill_time_seconds",
        "request_decode_time_seconds",
    ):
        assert metric(text, f"switchyard:{name}_count") > 0, name
    for name in (
        "num_requests_running",
        "num_requests_waiting",
        "kv_cache_usage_perc",
        "num_preemptions_total",
    ):
        assert metric(text, f"switchyard:{name}") >= 0
    assert metric(text, "switchyard:generation_tokens_total") - metric(
        before, "switchyard:generation_tokens_total"
    ) == pytest.approx(7)
    assert metric(text, "switchyard:prompt_tokens_total") > metric(before, "switchyard:prompt_tokens_total")
    assert metric(text, "switchyard:request_success_total", finished_reason="length") >= 1
    finished = metric(text, "switchyard:e2e_request_latency_seconds_count")
    assert finished == metric(before, "switchyard:e2e_request_latency_seconds_count") + 1
    assert metric(text, "switchyard:kv_cache_usage_perc") == server.llm_engine.block_manager.usage


def test_api_key(tiny_model_dir: Path) -> None:
    running = start_server(tiny_model_dir, api_key="s3cret")
    try:
        with pytest.raises(openai.AuthenticationError) as info:
            running.client(api_key="wrong").chat.completions.create(model=MODEL, messages=USER, max_tokens=2)
        assert info.value.code == "invalid_api_key"
        http = running.http()
        response = http.post(
            "/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"}
        )
        assert response.status_code == 401  # refused before the body is looked at
        refused = http.get("/v1/models")
        assert refused.status_code == 401 and refused.headers["x-request-id"]
        assert http.get("/health").status_code == 200 and http.get("/metrics").status_code == 200
        answer = running.client(api_key="s3cret").chat.completions.create(
            model=MODEL, messages=USER, max_tokens=2
        )
        assert answer.choices[0].message.content is not None
    finally:
        running.stop()


def test_full_queue_gives_429_with_retry_after(tiny_model_dir: Path) -> None:
    # One sequence runs at a time and one may wait: a third request finds the queue full.
    running = start_server(tiny_model_dir, max_waiting=1, engine_overrides={"max_num_seqs": 1})
    try:
        http = running.http()
        first = open_stream(http, **LONG)
        first_content(first)
        second = open_stream(http, **LONG)
        next(second)  # headers and the role chunk: the request is admitted and waiting
        with pytest.raises(openai.RateLimitError) as info:
            running.client().chat.completions.create(model=MODEL, messages=USER, max_tokens=5)
        retry_after = info.value.response.headers["retry-after"]
        assert retry_after.isdigit() and 1 <= int(retry_after) <= 60
        assert info.value.code == "queue_full"
        metrics = http.get("/metrics").text
        assert metric(metrics, "switchyard:request_rejected_total", reason="queue_full") == 1
        first.close()
        second.close()
        assert running.wait_for_free_blocks() == 0
    finally:
        running.stop()


def test_request_that_can_never_fit_the_kv_cache_is_400_at_once(tiny_model_dir: Path) -> None:
    block_bytes = 16 * 2 * 2 * 2 * 16 * 4  # tokens x K/V x layers x kv heads x head_dim x fp32
    running = start_server(tiny_model_dir, engine_overrides={"kv_cache_memory": 4 * block_bytes})
    try:
        assert running.llm_engine.block_manager.num_blocks == 4  # 64 tokens in all
        client = running.client()
        with pytest.raises(openai.BadRequestError, match="never fit") as info:
            client.completions.create(model=MODEL, prompt="Hello", max_tokens=100)
        assert info.value.param == "max_tokens"
        assert client.completions.create(model=MODEL, prompt="Hello", max_tokens=10).choices
    finally:
        running.stop()


def test_request_timeout(tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    running = start_server(tiny_model_dir, request_timeout=0.15)
    try:
        # Each step takes at least 5 ms, so 200 tokens cannot finish within the timeout even on a fast machine.
        engine = running.llm_engine
        real_step = engine.step

        def slow_step() -> list:
            time.sleep(0.005)
            return real_step()

        monkeypatch.setattr(engine, "step", slow_step)
        client = running.client()
        with pytest.raises(openai.APIStatusError) as info:
            client.chat.completions.create(model=MODEL, messages=USER, **LONG)
        assert info.value.status_code == 504 and info.value.code == "request_timeout"
        stream = client.chat.completions.create(model=MODEL, messages=USER, stream=True, **LONG)
        finish_reasons = []
        with pytest.raises(openai.APIError, match="did not finish within"):
            for chunk in stream:
                finish_reasons += [c.finish_reason for c in chunk.choices if c.finish_reason]
        assert finish_reasons == ["error"]  # the open choice is closed with an error finish reason first
        assert running.wait_for_free_blocks() == 0
        short = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=3)
        assert short.choices[0].finish_reason in ("stop", "length")
    finally:
        running.stop()


def test_failing_engine_fails_requests_then_reports_unhealthy(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    running = start_server(tiny_model_dir)
    try:
        engine = running.llm_engine
        real_step = engine.step
        failures = {"left": 1}

        def flaky_step() -> list:
            if failures["left"]:
                failures["left"] -= 1
                raise RuntimeError("device lost")
            return real_step()

        monkeypatch.setattr(engine, "step", flaky_step)
        client, http = running.client(), running.http()
        # One failed step fails the requests it carried; the loop carries on.
        with pytest.raises(openai.InternalServerError, match="device lost"):
            client.chat.completions.create(model=MODEL, messages=USER, max_tokens=3)
        assert http.get("/health").status_code == 200
        assert client.chat.completions.create(model=MODEL, messages=USER, max_tokens=3).choices
        # Steps that keep failing declare the engine dead: health and admission answer 503.
        failures["left"] = 1_000
        with pytest.raises(openai.InternalServerError, match="device lost"):
            client.chat.completions.create(model=MODEL, messages=USER, max_tokens=3)
        deadline = time.monotonic() + 5
        while http.get("/health").status_code != 503:  # the loop retries (draining aborts) before giving up
            assert time.monotonic() < deadline, "engine never declared dead"
            time.sleep(0.01)
        with pytest.raises(openai.APIStatusError) as info:
            client.chat.completions.create(model=MODEL, messages=USER, max_tokens=3)
        assert info.value.status_code == 503 and info.value.code == "engine_unavailable"
    finally:
        running.stop()


def test_sigterm_drains_in_flight_requests_then_exits(tiny_model_dir: Path) -> None:
    running = start_server(tiny_model_dir, shutdown_grace=20)
    http = running.http()
    in_flight = open_stream(http, max_tokens=60, temperature=0, ignore_eos=True)
    first_content(in_flight)
    running.server.handle_exit(signal.SIGTERM, None)
    assert http.get("/health").status_code == 503
    with pytest.raises(openai.APIStatusError) as info:
        running.client().chat.completions.create(model=MODEL, messages=USER, max_tokens=2)
    assert info.value.status_code == 503 and info.value.code == "shutting_down"
    finishes = [c["choices"][0]["finish_reason"] for c in in_flight if c["choices"]]
    assert finishes[-1] == "length"
    running.thread.join(timeout=15)
    assert not running.thread.is_alive()


def test_sigterm_aborts_what_outlives_the_grace_period(tiny_model_dir: Path) -> None:
    running = start_server(tiny_model_dir, shutdown_grace=0)
    stream = running.client().chat.completions.create(model=MODEL, messages=USER, stream=True, **LONG)
    next(stream)
    running.server.handle_exit(signal.SIGTERM, None)
    with pytest.raises(openai.APIError, match="shutting down"):
        for _ in stream:
            pass
    running.thread.join(timeout=15)
    assert not running.thread.is_alive()
    assert blocks_in_use(running.llm_engine) == 0
