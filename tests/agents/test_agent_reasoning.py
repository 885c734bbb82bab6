"""A reasoning model's thinking in the agent loop: read from the endpoint (plain and streamed, against a real
server with a reasoning parser), kept in the run's messages, and sent back only when the agent asks."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from scripted_model import ScriptedModel, call, say
from server.harness import MODEL, RunningServer, start_server, thinking_template, with_template

from switchyard.agents import (
    Agent,
    ModelDelta,
    ModelSettings,
    OpenAIModelClient,
    ReasoningDelta,
    Runner,
    RunResult,
    RunStatus,
    tool,
)
from switchyard.agents.model import ModelRequest


@tool
def lookup(city: str) -> str:
    """Look a city up.

    Args:
        city: The city's name.
    """
    return f"{city}: 12 C"


def thinking_then_call() -> ScriptedModel:
    first = dataclasses.replace(call("lookup", {"city": "Oslo"}), reasoning="The weather needs a lookup.")
    return ScriptedModel([first, say("It is 12 C in Oslo.")])


@pytest.mark.parametrize("replay", [False, True])
def test_reasoning_is_kept_and_replayed_only_when_asked(replay: bool) -> None:
    model = thinking_then_call()
    agent = Agent(
        name="weather", tools=[lookup], client=model, settings=ModelSettings(replay_reasoning=replay)
    )
    result = Runner().run_sync(agent, "Weather in Oslo?")
    assert result.status is RunStatus.COMPLETED, result.status_detail
    assert result.messages[1]["reasoning_content"] == "The weather needs a lookup."
    replayed = [m for m in model.requests[1].messages if m["role"] == "assistant"]
    assert len(replayed) == 1
    assert ("reasoning_content" in replayed[0]) is replay
    if replay:
        assert replayed[0]["reasoning_content"] == "The weather needs a lookup."


@pytest.fixture(scope="module")
def r1_server(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """Every reply starts inside its reasoning (DeepSeek-R1's template), so a random model's whole reply is
    reasoning."""
    folder = with_template(
        tiny_model_dir, tmp_path_factory.mktemp("r1-agent"), thinking_template(open_by_default=True)
    )
    running = start_server(folder, reasoning_parser="deepseek_r1")
    yield running
    running.stop()


def test_the_openai_client_reads_reasoning_plain_and_streamed(r1_server: RunningServer) -> None:
    client = OpenAIModelClient(client=r1_server.async_client())
    request = ModelRequest(
        model=MODEL,
        messages=[{"role": "user", "content": "Think first."}],
        tools=[],
        tool_choice=None,
        temperature=0,
        max_tokens=10,
    )
    plain = asyncio.run(client.complete(request))
    deltas: list[str] = []
    streamed = asyncio.run(
        OpenAIModelClient(client=r1_server.async_client()).complete(request, deltas.append)
    )
    with r1_server.http() as http:
        raw = http.post("/v1/chat/completions", json=_body(request)).json()["choices"][0]["message"]
    assert raw["reasoning_content"]
    assert plain.reasoning == raw["reasoning_content"]
    assert streamed.reasoning == raw["reasoning_content"]
    assert plain.content == streamed.content == (raw["content"] or None)
    assert "".join(deltas) == (raw["content"] or ""), "reasoning never reaches the content callback"


def _body(request: ModelRequest) -> dict[str, object]:
    return {
        "model": request.model,
        "messages": request.messages,
        "temperature": request.temperature,
        "max_tokens": request.max_tokens,
    }


def test_a_streamed_run_emits_the_thinking_as_reasoning_deltas(r1_server: RunningServer) -> None:
    agent = Agent(
        name="thinker",
        model=MODEL,
        client=OpenAIModelClient(client=r1_server.async_client()),
        settings=ModelSettings(temperature=0, max_tokens=10),
    )

    async def collect() -> tuple[list[object], RunResult]:
        stream = Runner().run_streamed(agent, "Think first.")
        events = [event async for event in stream.events()]
        assert stream.result is not None
        return events, stream.result

    events, result = asyncio.run(collect())
    thinking = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    assert thinking and thinking == result.messages[-1]["reasoning_content"]
    content = "".join(e.text for e in events if isinstance(e, ModelDelta))
    assert content == (result.messages[-1]["content"] or "")
