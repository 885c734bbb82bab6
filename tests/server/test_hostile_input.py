"""What an attacker or an overloaded operator found (issue 55), as regression tests on a real server.

Each bad input gets a clean 400 in the OpenAI error format and hurts no later request: text that cannot be
encoded, non-finite numbers, out-of-range token ids, prompts too large for the context, oversized or
slow-to-compile schemas. Metrics labels stay bounded, an unexpected 500 keeps its connection usable, a burst
that fits the batch is not shed, and a server shutting down says when to come back.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from harness import MODEL, RunningServer, start_server
from transformers import AutoTokenizer

from switchyard.engine.grammar_limits import GrammarLimits
from switchyard.engine.text_worker import LARGE_TEXT_CHARS, TextLimit, TextWorker

SURROGATE = "\ud800"

# (route, body with a lone surrogate somewhere, the param the 400 names)
UNENCODABLE = [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": SURROGATE}]}, "messages.0.content"),
    ("/v1/completions", {"prompt": SURROGATE}, "prompt"),
    ("/v1/completions", {"prompt": ["ok", f"a{SURROGATE}b"]}, "prompt.1"),
    ("/v1/responses", {"input": SURROGATE}, "input"),
    ("/tokenize", {"prompt": SURROGATE}, "prompt"),
    ("/v1/completions", {"prompt": "hi", "bad_words": [SURROGATE]}, "bad_words.0"),
    ("/v1/completions", {"prompt": "hi", "guided_choice": [SURROGATE, "a"]}, "guided_choice.0"),
    ("/v1/completions", {"prompt": "hi", "model": SURROGATE}, "model"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "user": SURROGATE}, "user"),
    (
        "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {SURROGATE: 1}}}],
        },
        "tools.0.function.parameters",
    ),
]


def post_raw(http: httpx.Client, path: str, body: dict[str, Any]) -> httpx.Response:
    """`body` as JSON exactly as a hostile client writes it (json.dumps escapes a lone surrogate as \\ud800)."""
    return http.post(path, content=json.dumps(body), headers={"content-type": "application/json"})


def assert_400(response: httpx.Response, param: str | None = None, says: str = "") -> dict[str, Any]:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    if param is not None:
        assert error["param"] == param, error
    assert says in error["message"], error
    return error


@pytest.fixture(scope="module")
def hostile(tiny_model_dir: Path) -> Iterator[RunningServer]:
    """A server of its own (its metrics and rejections are read here): a small queue, small grammar limits."""
    running = start_server(
        tiny_model_dir,
        max_waiting=8,
        grammar_limits=GrammarLimits(max_bytes=20_000, compile_timeout=30),
        max_tenant_labels=4,
    )
    yield running
    running.stop()


@pytest.fixture
def http(hostile: RunningServer) -> Iterator[httpx.Client]:
    """One connection: a request that broke it would fail the next one."""
    with httpx.Client(
        base_url=hostile.base_url, timeout=60, limits=httpx.Limits(max_connections=1)
    ) as client:
        yield client


@pytest.mark.parametrize(("path", "body", "param"), UNENCODABLE, ids=[p for _, _, p in UNENCODABLE])
def test_lone_surrogates_are_400_naming_the_field(
    http: httpx.Client, path: str, body: dict[str, Any], param: str
) -> None:
    assert_400(post_raw(http, path, {"max_tokens": 2, **body}), param, "lone UTF-16 surrogate")
    assert http.get("/metrics").status_code == 200
    ok = post_raw(http, "/v1/completions", {"prompt": "hi", "max_tokens": 2})  # same connection, still fine
    assert ok.status_code == 200, ok.text


def test_a_valid_surrogate_pair_is_text(http: httpx.Client) -> None:
    response = post_raw(http, "/tokenize", {"prompt": "smile \ud83d\ude00"})
    assert response.status_code == 200, response.text


def test_user_values_never_become_metric_labels(hostile: RunningServer, http: httpx.Client) -> None:
    client = hostile.client()
    for index in range(30):
        client.completions.create(model=MODEL, prompt="hi", max_tokens=1, user=f"user-{index}")
    text = http.get("/metrics").text
    labelled = set(re.findall(r'tenant="(user-\d+)"', text))
    assert len(labelled) <= 4  # the first few by name (a fleet gateway's tenants), then "other"
    assert 'tenant="other"' in text


@pytest.mark.parametrize("value", ["Infinity", "-Infinity", "NaN"])
@pytest.mark.parametrize("field", ["temperature", "top_p", "presence_penalty", "repetition_penalty"])
def test_non_finite_numbers_are_400(http: httpx.Client, field: str, value: str) -> None:
    raw = f'{{"prompt": "hi", "max_tokens": 2, "{field}": {value}}}'
    response = http.post("/v1/completions", content=raw, headers={"content-type": "application/json"})
    assert_400(response, field)


@pytest.mark.parametrize("prompt", [[-5], [2**40], [[3, -1]]])
def test_echo_of_bad_token_ids_is_400(http: httpx.Client, prompt: list[Any]) -> None:
    body = {"prompt": prompt, "echo": True, "max_tokens": 0, "logprobs": 1}
    assert_400(post_raw(http, "/v1/completions", body), "prompt", "outside the vocabulary")


def test_detokenize_and_completions_agree_on_the_largest_token_id(
    hostile: RunningServer, http: httpx.Client
) -> None:
    vocab = hostile.engine.vocab_size
    assert post_raw(http, "/detokenize", {"tokens": [vocab - 1]}).status_code == 200
    assert post_raw(http, "/v1/completions", {"prompt": [vocab - 1], "max_tokens": 1}).status_code == 200
    detok = assert_400(post_raw(http, "/detokenize", {"tokens": [vocab]}), "tokens")
    completion = assert_400(post_raw(http, "/v1/completions", {"prompt": [vocab], "max_tokens": 1}), "prompt")
    assert f"[0, {vocab})" in detok["message"] and f"[0, {vocab})" in completion["message"]


def test_a_huge_prompt_is_refused_before_tokenizing_and_starves_no_one(hostile: RunningServer) -> None:
    huge = "word " * 2_000_000  # 10 MB, under the 16 MiB body limit: far more than 256 tokens can hold

    async def scenario() -> None:
        client = hostile.async_client()
        big = [
            asyncio.create_task(client.completions.create(model=MODEL, prompt=huge, max_tokens=1)),
            asyncio.create_task(
                client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": huge}])
            ),
        ]
        small = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
        assert small.choices[0].finish_reason in ("length", "stop")
        for task in big:
            with pytest.raises(openai.BadRequestError) as refused:
                await task
            assert "maximum context length of 256 tokens" in refused.value.message
            assert "refused before tokenizing" in refused.value.message

    asyncio.run(scenario())


def test_truncation_still_takes_a_long_prompt(hostile: RunningServer) -> None:
    reply = hostile.client().completions.create(
        model=MODEL, prompt="word " * 5_000, max_tokens=2, extra_body={"truncate_prompt_tokens": 50}
    )
    assert reply.usage is not None and reply.usage.prompt_tokens == 50


def test_a_burst_that_fits_the_batch_is_not_shed(hostile: RunningServer) -> None:
    """--max-waiting 8 and 100 simultaneous requests, with room in the batch for all: no 429."""

    async def scenario() -> list[Any]:
        client = hostile.async_client()
        calls = [
            client.completions.create(model=MODEL, prompt=f"request {i}", max_tokens=2) for i in range(100)
        ]
        return await asyncio.gather(*calls, return_exceptions=True)

    results = asyncio.run(scenario())
    failures = [r for r in results if isinstance(r, BaseException)]
    assert not failures, failures[:3]
    assert hostile.wait_for_free_blocks() == 0


def test_a_backlog_past_max_waiting_is_still_shed(tiny_model_dir: Path) -> None:
    """With room for two sequences, requests beyond them and the 8 allowed to wait get 429."""
    server = start_server(tiny_model_dir, max_waiting=8, engine_overrides={"max_num_seqs": 2})
    try:

        async def scenario() -> list[Any]:
            client = server.async_client()
            calls = [client.completions.create(model=MODEL, prompt="hi", max_tokens=20) for _ in range(40)]
            return await asyncio.gather(*calls, return_exceptions=True)

        results = asyncio.run(scenario())
        shed = [r for r in results if isinstance(r, openai.RateLimitError)]
        served = [r for r in results if not isinstance(r, BaseException)]
        assert shed and served and len(shed) + len(served) == len(results)
        assert all(r.response.headers.get("retry-after") for r in shed)
    finally:
        server.stop()


def test_too_many_tools_is_400_before_any_schema_work(http: httpx.Client) -> None:
    tools = [
        {"type": "function", "function": {"name": f"f{i}", "parameters": {"type": "object"}}}
        for i in range(129)
    ]
    body = {"messages": [{"role": "user", "content": "hi"}], "tools": tools, "max_tokens": 2}
    assert_400(post_raw(http, "/v1/chat/completions", body), "tools", "at most 128 tools")


def test_a_huge_tool_is_refused_before_its_grammar_compiles(
    hostile: RunningServer, http: httpx.Client
) -> None:
    properties = {f"p{i}": {"type": "integer"} for i in range(5000)}
    tool = {
        "type": "function",
        "function": {"name": "f", "parameters": {"type": "object", "properties": properties}},
    }
    stats = hostile.llm_engine.structured_outputs.stats
    before = (stats.compiled, stats.failed)
    body = {"messages": [{"role": "user", "content": "hi"}], "tools": [tool], "tool_choice": "required"}
    assert_400(post_raw(http, "/v1/chat/completions", body), "messages", "refused before tokenizing")
    assert (stats.compiled, stats.failed) == before


def test_a_prompt_over_the_context_is_400_before_its_grammar_compiles(
    hostile: RunningServer, http: httpx.Client
) -> None:
    stats = hostile.llm_engine.structured_outputs.stats
    before = (stats.compiled, stats.failed)
    schema = {"type": "object", "properties": {"fresh_name_for_this_test": {"type": "string"}}}
    body = {"prompt": [5] * 300, "max_tokens": 4, "guided_json": schema}
    assert_400(post_raw(http, "/v1/completions", body), "prompt", "maximum context length")
    assert (stats.compiled, stats.failed) == before


def test_a_schema_over_the_size_limit_is_400_naming_it(http: httpx.Client) -> None:
    schema = {"type": "object", "properties": {f"field_{i}": {"type": "string"} for i in range(1000)}}
    body = {"prompt": "hi", "max_tokens": 2, "guided_json": schema}
    assert_400(post_raw(http, "/v1/completions", body), None, "--max-grammar-bytes")


def test_a_schema_slower_than_the_compile_timeout_is_400_naming_it(tiny_model_dir: Path) -> None:
    server = start_server(tiny_model_dir, grammar_limits=GrammarLimits(compile_timeout=1e-6))
    try:
        schema = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}
        with server.http() as http:
            error = assert_400(
                post_raw(http, "/v1/completions", {"prompt": "hi", "max_tokens": 2, "guided_json": schema})
            )
        assert "--grammar-compile-timeout" in error["message"]
    finally:
        server.stop()


def test_an_unexpected_error_is_a_500_that_keeps_the_connection(
    hostile: RunningServer, http: httpx.Client
) -> None:
    app = hostile.server.config.app

    async def broken() -> None:
        raise RuntimeError("a bug no handler maps")

    app.router.add_api_route("/test-only/broken", broken, methods=["GET"])
    first = http.get("/test-only/broken")
    assert first.status_code == 500
    assert first.json()["error"]["type"] == "server_error"
    assert first.headers.get("connection") != "close"
    stream = first.extensions["network_stream"]
    second = http.get("/health")  # on the same connection: it must not have been dropped
    assert second.status_code == 200
    assert second.extensions["network_stream"] is stream


def test_shutdown_503_says_when_to_retry(tiny_model_dir: Path) -> None:
    server = start_server(tiny_model_dir)
    try:
        server.server.state.draining = True
        with server.http() as http:
            refused = post_raw(http, "/v1/completions", {"prompt": "hi", "max_tokens": 2})
            health = http.get("/health")
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "shutting_down"
        assert int(refused.headers["retry-after"]) > 0
        assert health.status_code == 503 and int(health.headers["retry-after"]) > 0
    finally:
        server.server.state.draining = False
        server.stop()


def test_the_openapi_document_lists_every_status_with_real_schemas(http: httpx.Client) -> None:
    document = http.get("/openapi.json").json()
    chat = document["paths"]["/v1/chat/completions"]["post"]["responses"]
    assert set(chat) == {"200", "400", "401", "404", "413", "429", "500", "503"}
    for status in ("400", "429", "500", "503"):
        assert chat[status]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/ErrorResponse"
        }
    ok = chat["200"]["content"]
    assert ok["application/json"]["schema"] == {"$ref": "#/components/schemas/ChatCompletionResponse"}
    assert "text/event-stream" in ok
    for path, operations in document["paths"].items():
        for operation in operations.values():
            assert "422" not in operation["responses"], path
            assert operation["responses"]["200"]["content"], path


@pytest.fixture
def held_worker(tiny_model_dir: Path) -> Iterator[tuple[TextWorker, threading.Event, list[str]]]:
    """A text worker whose large-text lane blocks every encode until released (and records what it encoded)."""
    worker = TextWorker(AutoTokenizer.from_pretrained(tiny_model_dir), TextLimit(1 << 20, 16))
    release, encoded = threading.Event(), []
    tokenizer = worker._large._tokenizer
    real_encode = tokenizer.encode

    def held_encode(text: str, **kwargs: Any) -> Any:
        release.wait(timeout=60)
        encoded.append(text[:10])
        return real_encode(text, **kwargs)

    tokenizer.encode = held_encode
    yield worker, release, encoded
    release.set()
    worker.shutdown()


def test_a_large_text_never_holds_up_a_small_one(
    held_worker: tuple[TextWorker, threading.Event, list[str]],
) -> None:
    worker, release, _ = held_worker
    large = "word " * (LARGE_TEXT_CHARS // 4)

    async def scenario() -> None:
        big = asyncio.create_task(worker.encode(large))
        small = await worker.encode("hello there")  # served while the large one is still being tokenized
        assert small and not big.done()
        release.set()
        assert len(await big) > len(small)

    asyncio.run(scenario())


def test_a_queued_large_text_is_dropped_when_its_caller_goes(
    held_worker: tuple[TextWorker, threading.Event, list[str]],
) -> None:
    worker, release, encoded = held_worker
    first, second = "A" + "a" * LARGE_TEXT_CHARS, "B" + "b" * LARGE_TEXT_CHARS

    async def scenario() -> None:
        running = asyncio.create_task(worker.encode(first))
        queued = asyncio.create_task(worker.encode(second))
        await asyncio.sleep(0.1)
        queued.cancel()  # what a client's disconnect does to its request's text work
        release.set()
        await running
        with pytest.raises(asyncio.CancelledError):
            await queued

    asyncio.run(scenario())
    assert encoded == [first[:10]]  # the second text was never tokenized
