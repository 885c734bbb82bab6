"""A mixture-of-experts model (Qwen2-MoE, with a shared expert) served through the openai client: the router's
load per expert on /metrics, and prefix caching, speculative decoding and structured outputs working with it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import MODEL, RunningServer, metric, start_server

PROMPT = "ab cd ef " * 10
SCHEMA = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}},
    "required": ["ok"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def moe_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from model_factory import build_hf_model
    from tokenizer_factory import build_tokenizer

    folder = tmp_path_factory.mktemp("tiny-qwen2-moe")
    build_hf_model("qwen2_moe", folder, seed=2, max_position_embeddings=512)
    build_tokenizer(folder, vocab_size=320)
    return folder


@pytest.fixture(scope="module")
def server(moe_dir: Path) -> Iterator[RunningServer]:
    running = start_server(moe_dir)
    running.llm_engine.expert_load.interval = 0.0  # read the device counters at every step
    yield running
    running.stop()


def greedy(server: RunningServer, **extra: object) -> str:
    reply = server.client().completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=24, temperature=0, extra_body={"ignore_eos": True, **extra}
    )
    return reply.choices[0].text


def expert_tokens(server: RunningServer) -> dict[tuple[int, int], float]:
    text = server.http().get("/metrics").text
    return {
        (layer, expert): metric(
            text, "switchyard:moe_expert_tokens_total", layer=str(layer), expert=str(expert)
        )
        for layer in (0, 1)
        for expert in range(4)
    }


def test_router_load_per_expert_is_on_metrics(server: RunningServer) -> None:
    """Every token the model computes is routed to 2 of 4 experts in each of its 2 sparse layers; the counters
    on /metrics are the model's own, and a second identical prompt (served from the prefix cache) adds only
    the tokens actually computed."""
    first = greedy(server)
    after_first = expert_tokens(server)
    model_counts = server.llm_engine.model.routed_tokens()
    assert model_counts is not None
    assert after_first == {
        (layer, expert): float(model_counts[layer, expert]) for layer, expert in after_first
    }
    per_layer = [sum(v for (layer, _), v in after_first.items() if layer == i) for i in (0, 1)]
    assert per_layer[0] == per_layer[1] > 0 and per_layer[0] % 2 == 0
    assert sum(1 for v in after_first.values() if v > 0) > 2  # the load is spread, not all on one expert
    computed_first = per_layer[0] / 2
    assert greedy(server) == first  # prefix caching on (the default): the same greedy text
    computed_second = sum(v for (layer, _), v in expert_tokens(server).items() if layer == 0) / 2
    assert computed_second - computed_first < computed_first  # the cached prompt blocks were not recomputed


def test_structured_output_holds_with_experts(server: RunningServer) -> None:
    reply = server.client().chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "ok?"}],
        max_tokens=30,
        response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA}},
    )
    assert set(json.loads(reply.choices[0].message.content or "")) == {"ok"}


def test_speculative_decoding_gives_the_same_greedy_text(server: RunningServer, moe_dir: Path) -> None:
    plain = greedy(server)
    speculating = start_server(moe_dir, engine_overrides={"speculative_method": "ngram"})
    try:
        assert greedy(speculating) == plain
        text = speculating.http().get("/metrics").text
        assert metric(text, "switchyard:spec_decode_tokens_total", kind="proposed") > 0
    finally:
        speculating.stop()
