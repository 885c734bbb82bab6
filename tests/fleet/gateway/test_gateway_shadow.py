"""Shadow traffic through a real gateway: the candidate pool gets the copy, the caller's answer is the same
bytes with and without it, and the copy's answer is logged beside the primary's."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fleet_harness import Replicas, RunningGateway, free_port, gateway_config, metric, start_gateway, wait_for

from switchyard.fleet.config import FleetConfig, PoolConfig, ShadowConfig
from switchyard.fleet.online_eval.config import OnlineEvalConfig
from switchyard.fleet.online_eval.log import OnlineEvalLog
from switchyard.fleet.replica import ReplicaHealth

REQUEST = {
    "model": "tiny",
    "messages": [{"role": "user", "content": "Say something."}],
    "max_tokens": 6,
    "temperature": 0,
}


def _with_shadow(config: FleetConfig, share: float) -> FleetConfig:
    pools = tuple(
        PoolConfig(**{**pool.__dict__, "shadow": ShadowConfig("tiny-qwen", share)})
        if pool.model == "tiny"
        else pool
        for pool in config.pools
    )
    return FleetConfig(**{**config.__dict__, "pools": pools})


@pytest.fixture(scope="module")
def gateways(
    replicas: Replicas, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[RunningGateway, ...]]:
    """The same pools twice: without a shadow, and with `tiny` copied to `tiny-qwen` (share 1)."""
    log = tmp_path_factory.mktemp("shadow") / "log.db"
    pools = {"tiny": [replicas.a.url], "tiny-qwen": [replicas.qwen.url]}
    plain = start_gateway(gateway_config(pools))
    shadowed = start_gateway(
        _with_shadow(gateway_config(pools, online_eval=OnlineEvalConfig(sample=0.0, log=str(log))), 1.0)
    )
    for running in (plain, shadowed):
        running.wait_all_healthy()
    yield plain, shadowed
    for running in (plain, shadowed):
        running.stop()


def _qwen_requests(running: RunningGateway) -> float:
    return metric(running.metrics(), "switchyard:fleet_requests_total", pool="tiny-qwen")


def _answer(running: RunningGateway, request_id: str) -> bytes:
    with running.http() as http:
        response = http.post("/v1/chat/completions", json=REQUEST, headers={"x-request-id": request_id})
    assert response.status_code == 200
    # the replica stamps its answer with a random id and the second it was made; the rest must match byte for byte
    content = re.sub(rb'"created":\s*\d+', b'"created":0', response.content)
    return re.sub(rb'"id":"chatcmpl-[0-9a-f]+"', b'"id":"chatcmpl-x"', content)


def test_the_callers_answer_is_unchanged_and_the_candidate_got_the_copy(
    gateways: tuple[RunningGateway, RunningGateway],
) -> None:
    plain, shadowed = gateways
    _answer(plain, "warm-up")  # both answers below then find the prompt in the replica's prefix cache
    assert _answer(plain, "same-id") == _answer(shadowed, "same-id")
    assert _qwen_requests(plain) == 0
    wait_for(lambda: _qwen_requests(shadowed) >= 1, what="the shadow copy at the candidate pool")


def test_the_copys_answer_is_logged_beside_the_primarys(
    gateways: tuple[RunningGateway, RunningGateway],
) -> None:
    _, shadowed = gateways
    _answer(shadowed, "compared")
    recorder = shadowed.runtime.online_eval
    assert recorder is not None

    def logged() -> dict[bool, object]:
        reader = OnlineEvalLog(Path(recorder.log.path))
        try:
            return {e.shadow: e for e in reader.exchanges() if e.request_id == "compared"}
        finally:
            reader.close()

    wait_for(lambda: len(logged()) == 2, what="the primary and the shadow in the log")
    exchanges = logged()
    primary, shadow = exchanges[False], exchanges[True]
    assert primary.pool == "tiny" and shadow.pool == "tiny-qwen"  # type: ignore[attr-defined]
    assert json.loads(shadow.request)["model"] == "tiny-qwen"  # type: ignore[attr-defined]
    assert json.loads(shadow.response)["model"] == "tiny-qwen"  # type: ignore[attr-defined]


def _streamed_text(running: RunningGateway) -> str:
    stream = running.client().chat.completions.create(
        model="tiny", messages=REQUEST["messages"], max_tokens=6, temperature=0, stream=True
    )
    return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)


def test_a_stream_is_unchanged_and_its_copy_still_reaches_the_candidate(
    gateways: tuple[RunningGateway, RunningGateway],
) -> None:
    plain, shadowed = gateways
    before = _qwen_requests(shadowed)
    assert _streamed_text(plain) == _streamed_text(shadowed)
    wait_for(lambda: _qwen_requests(shadowed) > before, what="the stream's copy at the candidate pool")


def test_a_failing_candidate_changes_nothing_for_the_caller(replicas: Replicas) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens: the candidate pool has no replica to route to
    config = _with_shadow(gateway_config({"tiny": [replicas.a.url], "tiny-qwen": [dead]}), 1.0)
    running = start_gateway(config)
    try:
        tiny = running.runtime.pools["tiny"].replicas
        wait_for(lambda: all(r.health is ReplicaHealth.HEALTHY for r in tiny), what="tiny's replica healthy")
        assert len(_answer(running, "despite-dead-shadow")) > 0
    finally:
        running.stop()
