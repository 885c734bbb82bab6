"""The demo assistant's tools: the bundled model's own (same names, schemas and offline world, `demo_world`),
among them the acting `send_message`, which always needs a human's approval here."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from switchyard.agents.agent import Agent, ModelSettings
from switchyard.agents.demo_nouns import DEMO_NOUNS
from switchyard.agents.demo_world import (
    CALCULATOR,
    CONVERT_UNITS,
    GET_WEATHER,
    SEND_MESSAGE,
    ToolWorld,
    run_tool,
)
from switchyard.agents.injection import Caller
from switchyard.agents.model import ModelClient
from switchyard.agents.tool import FunctionTool, tool

INSTRUCTIONS = "You are a helpful assistant with access to tools."
"""One of the system prompts the bundled model saw with tools in training."""

SEND_MESSAGE_MAX_TOKENS = 256
"""A message's whole text must fit in the call: more than the 160 tokens the demo's answers need."""

DEMO_CALLER = Caller("demo-user", frozenset({"messages:send"}))
"""The demo's user, allowed to send messages: a caller without that scope is not offered `send_message`."""


@dataclass
class DemoWorld:
    """The weather table the tools read and the outbox `send_message` writes to."""

    world: ToolWorld = field(default_factory=lambda: ToolWorld.build(DEMO_NOUNS, seed=0))
    outbox: list[str] = field(default_factory=list)

    def a_city(self) -> str:
        """The first city of the weather table (the demo's tasks ask about it)."""
        city = next(iter(self.world.weather), None)
        if city is None:
            raise ValueError("the demo world has no cities in its weather table")
        return city


def demo_tools(state: DemoWorld) -> list[FunctionTool]:
    rng = random.Random(0)

    def run(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return run_tool(state.world, name, arguments, rng)

    @tool(description=CALCULATOR["function"]["description"], schema=CALCULATOR["function"]["parameters"])
    def calculator(expression: str) -> dict[str, Any]:
        return run("calculator", {"expression": expression})

    @tool(
        description=CONVERT_UNITS["function"]["description"], schema=CONVERT_UNITS["function"]["parameters"]
    )
    def convert_units(value: float, from_unit: str, to_unit: str) -> dict[str, Any]:
        return run("convert_units", {"value": value, "from_unit": from_unit, "to_unit": to_unit})

    @tool(description=GET_WEATHER["function"]["description"], schema=GET_WEATHER["function"]["parameters"])
    def get_weather(city: str) -> dict[str, Any]:
        return run("get_weather", {"city": city})

    @tool(
        description=SEND_MESSAGE["function"]["description"],
        schema=SEND_MESSAGE["function"]["parameters"],
        side_effects="acting",
        needs_approval=True,
        scopes={"messages:send"},
        max_tokens=SEND_MESSAGE_MAX_TOKENS,
    )
    def send_message(to: str, text: str) -> dict[str, Any]:
        state.outbox.append(f"to {to}: {text}")
        return {"status": "sent", "to": to}

    return [calculator, convert_units, get_weather, send_message]


def demo_agent(client: ModelClient, model: str, state: DemoWorld, max_tokens: int = 160) -> Agent:
    return Agent(
        name="assistant",
        instructions=INSTRUCTIONS,
        tools=demo_tools(state),
        model=model,
        client=client,
        settings=ModelSettings(temperature=0.0, max_tokens=max_tokens),
    )


def demo_tasks(state: DemoWorld) -> list[str]:
    """Requests in the forms the bundled model was trained on, and one that needs approval."""
    return [
        "What is 12 * 7?",
        "Convert 5 km to mi.",
        f"What's the weather in {state.a_city()}?",
        "Send a message to Maria saying the report is ready.",
    ]
