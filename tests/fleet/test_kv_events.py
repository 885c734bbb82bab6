"""KV events end to end: a real server publishes its prefix cache, the fleet's subscriber mirrors it, and
kv_aware, given the token ids the gateway computes itself, picks the replica that served the prefix."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from server.harness import RunningServer, start_server

from switchyard.fleet.kv_events import KVEventSubscriber
from switchyard.fleet.kv_index import KVIndex
from switchyard.fleet.policies import RouteRequest
from switchyard.fleet.policies.kv_aware import KVAwareConfig, KVAwarePolicy
from switchyard.fleet.prompt_tokens import (
    CHAT_PATH,
    COMPLETIONS_PATH,
    RESPONSES_PATH,
    PromptTokenizer,
    replica_model_folder,
)
from switchyard.fleet.replica import Replica, ReplicaHealth
from switchyard.prefix_hash import prompt_block_hashes

PROMPT = list(range(10, 50))
"""40 token ids: two full blocks of 16 and a partial one."""


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path) -> Iterator[RunningServer]:
    running = start_server(tiny_model_dir)
    yield running
    running.stop()


def cached_hashes(server: RunningServer) -> set[int]:
    cache = server.llm_engine.block_manager.prefix_cache
    assert cache is not None
    return set(cache.cached_block_hashes())


def test_the_endpoint_publishes_stored_blocks_by_their_chained_hash(server: RunningServer) -> None:
    http, client = server.http(), server.client()
    first = http.get("/v1/kv_events").json()
    assert first["reset"] and first["block_size"] == 16 and first["events"] == []
    assert set(first["blocks"]) == cached_hashes(server)
    cursor = {"after": first["next"], "epoch": first["epoch"]}

    answer = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=1, temperature=0)
    assert answer.usage is not None and answer.usage.prompt_tokens_details is not None
    assert answer.usage.prompt_tokens_details.cached_tokens == 0
    page = http.get("/v1/kv_events", params=cursor).json()
    assert not page["reset"]
    expected = prompt_block_hashes(PROMPT, 16)
    assert [(kind, block) for _, kind, block in page["events"]] == [("stored", h) for h in expected]
    assert page["next"] == page["events"][-1][0] == first["next"] + 2

    again = client.completions.create(model="tiny", prompt=[*PROMPT[:32], 7, 8, 9], max_tokens=1)
    assert again.usage is not None and again.usage.prompt_tokens_details is not None
    assert again.usage.prompt_tokens_details.cached_tokens == 32
    quiet = http.get("/v1/kv_events", params={"after": page["next"], "epoch": page["epoch"]}).json()
    assert quiet["events"] == [] and not quiet["reset"]  # the shared blocks were not stored twice

    stranger = http.get("/v1/kv_events", params={"after": page["next"], "epoch": "a-restarted-server"}).json()
    assert stranger["reset"] and set(expected) <= set(stranger["blocks"]) == cached_hashes(server)
    bad = http.get("/v1/kv_events", params={"after": -2})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "query.after"


def test_a_server_without_prefix_cache_answers_404_in_openai_form(tiny_model_dir: Path) -> None:
    plain = start_server(tiny_model_dir, engine_overrides={"enable_prefix_caching": False})
    try:
        response = plain.http().get("/v1/kv_events")
        assert response.status_code == 404
        assert "prefix cache" in response.json()["error"]["message"]
        replica = Replica("plain", plain.base_url, "tiny", health=ReplicaHealth.HEALTHY)
        index = KVIndex()

        async def poll_twice() -> list[bool]:
            async with httpx.AsyncClient() as http:
                subscriber = KVEventSubscriber(index, unsupported_retry=3600)
                return [await subscriber.poll(replica, http), await subscriber.poll(replica, http)]

        assert asyncio.run(poll_twice()) == [False, False]  # the second is not even sent
        assert index.block_size(replica) is None
    finally:
        plain.stop()


def test_the_subscriber_mirrors_the_servers_cache(server: RunningServer) -> None:
    replica = Replica("r0", server.base_url, "tiny", health=ReplicaHealth.HEALTHY)
    index = KVIndex()
    subscriber = KVEventSubscriber(index)
    prompt = list(range(100, 164))  # four full blocks

    async def run() -> None:
        async with httpx.AsyncClient() as http:
            assert await subscriber.poll(replica, http)
            before = index.blocks_of(replica).confirmed
            assert before == cached_hashes(server)
            server.client().completions.create(model="tiny", prompt=prompt, max_tokens=1)
            assert await subscriber.poll(replica, http)
            assert index.blocks_of(replica).confirmed == cached_hashes(server)
            assert index.leading_blocks(replica, prompt_block_hashes(prompt, 16)) == 4
            subscriber.forget(replica)  # e.g. the replica restarted: the next poll takes a snapshot
            assert await subscriber.poll(replica, http)
            assert index.blocks_of(replica).confirmed == cached_hashes(server)

    asyncio.run(run())


def test_the_gateway_side_loads_no_torch(tiny_model_dir: Path) -> None:
    """The policies, the subscriber and the tokenizer work in a process that never imports torch."""
    script = (
        "import sys\n"
        "import switchyard.fleet.policies, switchyard.fleet.kv_events\n"
        "from switchyard.fleet.prompt_tokens import PromptTokenizer\n"
        f"tokenizer = PromptTokenizer.from_folder({str(tiny_model_dir)!r})\n"
        "body = {'messages': [{'role': 'user', 'content': 'hi'}]}\n"
        "assert tokenizer.token_ids('/v1/chat/completions', body)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


# ------------------------------------------------------------ real replicas
def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def replica_urls(tiny_model_dir: Path) -> Iterator[list[str]]:
    """Two `switchyard serve` processes of the tiny model, one torch thread each."""
    ports = [free_port(), free_port()]
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    processes = [
        subprocess.Popen(
            [
                *(sys.executable, "-m", "switchyard.cli", "serve", str(tiny_model_dir), "--port", str(port)),
                *("--served-model-name", "tiny", "--device", "cpu", "--dtype", "float32"),
                *("--max-model-len", "256", "--kv-cache-memory", str(8 << 20)),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=environment,
        )
        for port in ports
    ]
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    try:
        deadline = time.monotonic() + 90
        for process, url in zip(processes, urls, strict=True):
            while True:
                assert process.poll() is None, process.stdout.read() if process.stdout else ""
                try:
                    if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "replica did not come up"
                time.sleep(0.1)
        yield urls
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


SYSTEM = {
    "rail": "You are the timetable desk of a railway. Answer briefly, name the platform, and be polite.",
    "poem": "Tu es un poète. Réponds en vers, avec des rimes riches et des images de la mer.",
}


def chat(family: str, question: str) -> dict[str, Any]:
    return {
        "model": "tiny",
        "messages": [{"role": "system", "content": SYSTEM[family]}, {"role": "user", "content": question}],
    }


TOOLS = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]

CHAT_BODIES: list[dict[str, Any]] = [
    chat("rail", "When does the first train leave?"),
    {**chat("poem", "La mer."), "tools": TOOLS},
    {
        "model": "tiny",
        "messages": [
            {
                "role": "developer",
                "content": [{"type": "text", "text": "Use "}, {"type": "text", "text": "tools."}],
            },
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21 C."},
        ],
        "tools": TOOLS,
    },
    {
        "model": "tiny",
        "messages": [{"role": "user", "content": "Say hi"}, {"role": "assistant", "content": "Hi th"}],
        "continue_final_message": True,
        "add_generation_prompt": False,
    },
]


def test_the_gateways_token_ids_equal_the_replicas(replica_urls: list[str]) -> None:
    """PromptTokenizer, loaded from the folder the replica reports as its model's root, tokenizes chats,
    completions and responses exactly as the replica does (its POST /tokenize)."""

    async def run() -> None:
        async with httpx.AsyncClient() as http:
            folder = await replica_model_folder(http, replica_urls[0], "tiny")
            assert folder is not None
            assert await replica_model_folder(http, replica_urls[0], "another-model") is None
            tokenizer = PromptTokenizer.from_folder(folder)
            try:
                for body in CHAT_BODIES:
                    replica = (await http.post(f"{replica_urls[0]}/tokenize", json=body)).json()["tokens"]
                    assert await tokenizer.token_ids_async(CHAT_PATH, body) == tuple(replica), body
                for prompt in ("Hello, world! Café crème.", "日本語"):
                    replica = (await http.post(f"{replica_urls[0]}/tokenize", json={"prompt": prompt})).json()
                    mine = tokenizer.token_ids(COMPLETIONS_PATH, {"prompt": [prompt, "another"]})
                    assert mine == tuple(replica["tokens"])
                responses = {"instructions": SYSTEM["rail"], "input": "When does the first train leave?"}
                rendered = (await http.post(f"{replica_urls[0]}/tokenize", json=CHAT_BODIES[0])).json()
                assert tokenizer.token_ids(RESPONSES_PATH, responses) == tuple(rendered["tokens"])
                assert tokenizer.token_ids(COMPLETIONS_PATH, {"prompt": [5, 6, 7]}) == (5, 6, 7)
                assert tokenizer.token_ids(CHAT_PATH, {"messages": "not a list"}) is None
                assert tokenizer.token_ids(RESPONSES_PATH, {"input": [{"type": "function_call"}]}) is None
            finally:
                tokenizer.close()

    asyncio.run(run())


def test_kv_aware_picks_the_replica_that_served_the_prefix(
    replica_urls: list[str], tiny_model_dir: Path
) -> None:
    pool = [Replica(f"r{i}", url, "tiny", health=ReplicaHealth.HEALTHY) for i, url in enumerate(replica_urls)]
    policy = KVAwarePolicy(KVAwareConfig(poll_interval=0.05))
    tokenizer = PromptTokenizer.from_folder(tiny_model_dir)

    async def route(body: dict[str, Any]) -> Any:
        token_ids = await tokenizer.token_ids_async(CHAT_PATH, body)
        return policy.choose(RouteRequest(model="tiny", text="", token_ids=token_ids), pool)

    async def run() -> None:
        async with httpx.AsyncClient() as http:
            await policy.start(lambda: pool, http)
            try:
                # Each family's first request goes straight to a replica (no on_routed): what kv_aware knows
                # afterwards, it learnt from the replicas' events.
                for replica, family in zip(pool, ("rail", "poem"), strict=True):
                    client = openai.AsyncOpenAI(base_url=f"{replica.url}/v1", api_key="x", max_retries=0)
                    await client.chat.completions.create(**chat(family, "Hello?"), max_tokens=1)
                follow_ups = {"rail": chat("rail", "And the last one?"), "poem": chat("poem", "Le ciel.")}
                deadline = time.monotonic() + 20
                while True:
                    decisions = {family: await route(body) for family, body in follow_ups.items()}
                    if all(decision.reason == "cache_hit" for decision in decisions.values()):
                        break
                    assert time.monotonic() < deadline, f"events never arrived: {decisions}"
                    await asyncio.sleep(0.05)
                assert decisions["rail"].replica is pool[0] and decisions["poem"].replica is pool[1]
                for family, decision in decisions.items():
                    assert decision.predicted_cached_tokens >= 32  # the system prompt spans blocks
                    client = openai.AsyncOpenAI(
                        base_url=f"{decision.replica.url}/v1", api_key="x", max_retries=0
                    )
                    answer = await client.chat.completions.create(**follow_ups[family], max_tokens=1)
                    assert answer.usage is not None and answer.usage.prompt_tokens_details is not None
                    assert (
                        answer.usage.prompt_tokens_details.cached_tokens == decision.predicted_cached_tokens
                    )
            finally:
                await policy.stop()
                tokenizer.close()

    asyncio.run(run())
