"""The semantic response cache through a real gateway, with real embeddings: the bundled MiniLM served by
`switchyard rag serve-embeddings`' app on loopback. A question worded differently gets the cached answer; an
unrelated one, another tenant's key, a sampled request or `Cache-Control: no-cache` do not."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from fleet_harness import Replicas, RunningGateway, free_port, gateway_config, metric, start_gateway

from switchyard.fleet.response_cache import ResponseCacheConfig
from switchyard.fleet.semantic_cache import SemanticCacheConfig

pytest.importorskip(
    "sentence_transformers", reason="the semantic cache's test embeds with the rag extra's MiniLM"
)


@pytest.fixture(scope="module")
def embeddings_url() -> Iterator[str]:
    from switchyard.agents.rag.embeddings import MiniLMEmbedder
    from switchyard.agents.rag.embeddings_server import build_embeddings_app

    minilm = MiniLMEmbedder()
    minilm.embed(["warm up"])
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(build_embeddings_app(minilm), host="127.0.0.1", port=port, log_level="error")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/v1"
    server.should_exit = True
    thread.join(timeout=30)


@pytest.fixture(scope="module")
def gateway(replicas: Replicas, embeddings_url: str) -> Iterator[RunningGateway]:
    config = gateway_config(
        {"tiny": [replicas.a.url]},
        response_cache=ResponseCacheConfig(ttl=300),
        semantic_cache=SemanticCacheConfig(url=embeddings_url, similarity=0.85),
    )
    running = start_gateway(config)
    running.wait_all_healthy()
    yield running
    running.stop()


def ask(gateway: RunningGateway, text: str, key: str = "client-one", **fields: Any) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}", **fields.pop("headers", {})}
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": text}],
        "max_tokens": 6,
        "temperature": 0,
    }
    with gateway.http() as http:
        return http.post("/v1/chat/completions", json={**body, **fields}, headers=headers)


def test_a_question_worded_differently_gets_the_cached_answer(gateway: RunningGateway) -> None:
    first = ask(gateway, "What is the capital of France?")
    assert first.headers["x-switchyard-cache"] == "miss"
    again = ask(gateway, "what's the capital of france")
    assert again.headers["x-switchyard-cache"] == "semantic-hit"
    assert again.json()["choices"] == first.json()["choices"]
    assert ask(gateway, "How do I bake sourdough bread?").headers["x-switchyard-cache"] == "miss"
    hits = metric(gateway.metrics(), "switchyard:fleet_response_cache_lookups_total", result="semantic_hit")
    assert hits == 1


def test_the_rest_of_the_request_and_the_tenant_must_match(gateway: RunningGateway) -> None:
    assert ask(gateway, "Which river flows through Paris?").headers["x-switchyard-cache"] == "miss"
    close = "which river runs through paris"
    assert ask(gateway, close, key="client-two").headers["x-switchyard-cache"] == "miss"  # another key
    assert ask(gateway, close, max_tokens=7).headers["x-switchyard-cache"] == "miss"  # other parameters
    assert ask(gateway, close, temperature=1).headers["x-switchyard-cache"] == "uncacheable"
    fresh = ask(gateway, close, headers={"cache-control": "no-cache"})
    assert fresh.headers["x-switchyard-cache"] == "bypass"
    assert ask(gateway, close).headers["x-switchyard-cache"] in ("hit", "semantic-hit")
