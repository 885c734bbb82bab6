"""The prefill queued at a replica, as the gateway counts it for kv_aware: a request's uncached prompt tokens
from the moment it is sent until its first token passes through the gateway (a stream's role chunk, sent
before the prefill, does not count as one), for streamed and whole answers alike."""

from __future__ import annotations

import dataclasses
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import pytest
from fleet_harness import gateway_config, start_gateway, wait_for
from recording_worker import RecordingWorker

from switchyard.fleet.prompt_tokens import CHAT_PATH, PromptTokenizer
from switchyard.fleet.replica import ReplicaHealth

BODY = {"model": "held", "messages": [{"role": "user", "content": "Which platform for the night train?"}]}


def test_a_requests_prefill_counts_on_its_replica_until_its_first_token(tiny_model_dir: Path) -> None:
    tokenizer = PromptTokenizer.from_folder(tiny_model_dir)
    try:
        prompt = tokenizer.token_ids(CHAT_PATH, BODY)
    finally:
        tokenizer.close()
    assert prompt is not None
    first_token = threading.Event()
    worker = RecordingWorker(first_token=first_token)
    config = gateway_config({"held": [worker.url]}, policy="kv_aware")
    pool_config = dataclasses.replace(config.pools[0], tokenizer=str(tiny_model_dir))
    gateway = start_gateway(dataclasses.replace(config, pools=(pool_config,)))
    try:
        replica = gateway.runtime.pools["held"].replicas[0]
        wait_for(lambda: replica.health is ReplicaHealth.HEALTHY, 60, "the worker healthy")
        client = gateway.client()

        opened = threading.Event()

        def stream() -> str:
            text = ""
            for chunk in client.chat.completions.create(**BODY, stream=True):  # type: ignore[call-overload]
                opened.set()
                text += chunk.choices[0].delta.content or ""
            return text

        with ThreadPoolExecutor(max_workers=2) as executor:
            streamed = executor.submit(stream)
            assert opened.wait(timeout=30)
            # The role chunk has passed through to the client; the prefill is still queued.
            assert replica.queued_prefill_tokens == len(prompt)
            row = f'switchyard:fleet_queued_prefill_tokens{{pool="held",replica="{replica.name}"}} {len(prompt)}.0'
            assert row in gateway.metrics()
            assert gateway.replicas()[replica.name]["queued_prefill_tokens"] == len(prompt)
            whole = executor.submit(client.chat.completions.create, **BODY)
            assert whole.result(timeout=30).choices[0].message.content == "a b c"
            assert replica.queued_prefill_tokens == len(prompt)  # the whole answer was counted off at its end
            first_token.set()
            assert streamed.result(timeout=30) == "t0t1t2"
        assert replica.queued_prefill_tokens == 0
    finally:
        first_token.set()
        gateway.stop()
        worker.stop()


@pytest.mark.parametrize("cut_after", [0, 2], ids=["before-the-first-event", "mid-stream"])
def test_a_stream_that_breaks_leaves_no_prefill_counted(tiny_model_dir: Path, cut_after: int) -> None:
    """A replica that drops the connection before the first event (the attempt fails) or after it (the client
    gets an error event) takes the request's prefill off its count either way."""
    worker = RecordingWorker(cut_after=cut_after)
    config = gateway_config({"held": [worker.url]}, policy="kv_aware", max_attempts=1)
    pool_config = dataclasses.replace(config.pools[0], tokenizer=str(tiny_model_dir))
    gateway = start_gateway(dataclasses.replace(config, pools=(pool_config,)))
    try:
        replica = gateway.runtime.pools["held"].replicas[0]
        wait_for(lambda: replica.health is ReplicaHealth.HEALTHY, 60, "the worker healthy")
        with pytest.raises(openai.APIError):
            for _ in gateway.client().chat.completions.create(**BODY, stream=True):  # type: ignore[call-overload]
                pass
        assert len(worker.bodies) == 1
        wait_for(lambda: replica.in_flight == 0, 30, "the attempt finished")
        assert replica.queued_prefill_tokens == 0
    finally:
        gateway.stop()
        worker.stop()
