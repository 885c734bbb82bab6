"""The OpenAI Agents SDK against Switchyard on loopback: an agent with a function tool and an output type, over
both its Responses and its Chat Completions models, plain and streamed.

The SDK sends tools and a JSON response format together and parses the final answer into the output type;
until Switchyard accepted that combination it answered 400. The model is tiny and random, so the answer's
value is gibberish; what must hold is that every run ends with an answer of the right type.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pydantic
import pytest
from harness import MODEL, RunningServer, start_tool_server

agents = pytest.importorskip("agents")
openai = pytest.importorskip("openai")


class Answer(pydantic.BaseModel):
    value: int


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = start_tool_server(tmp_path_factory.mktemp("tiny-llama-1k"))
    yield running
    running.stop()


@agents.function_tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@pytest.mark.parametrize("api", ["responses", "chat"])
@pytest.mark.parametrize("streamed", [False, True])
def test_an_agent_with_tools_and_an_output_type_gets_its_answer(
    server: RunningServer, api: str, streamed: bool
) -> None:
    agents.set_tracing_disabled(True)

    async def run() -> object:
        client = server.async_client(api_key="unused")
        model_class = agents.OpenAIResponsesModel if api == "responses" else agents.OpenAIChatCompletionsModel
        agent = agents.Agent(
            name="calculator",
            instructions="Use add, then answer.",
            tools=[add],
            output_type=Answer,
            model=model_class(model=MODEL, openai_client=client),
            model_settings=agents.ModelSettings(max_tokens=300, temperature=1.0, extra_body={"seed": 3}),
        )
        if not streamed:
            return (await agents.Runner.run(agent, "What is 2 + 3?", max_turns=6)).final_output
        result = agents.Runner.run_streamed(agent, "What is 2 + 3?", max_turns=6)
        events = [event async for event in result.stream_events()]
        assert events
        return result.final_output

    assert isinstance(asyncio.run(run()), Answer)
