"""The bundled model picks the right tool on simple prompts, through the server and the openai client.

Skipped until `switchyard train-default` has built the bundled models.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from server.harness import RunningServer, start_server

from switchyard.agents.demo_world import TOOLS
from switchyard.models.registry import BUNDLED_MODELS, MAIN_MODEL, is_built

pytestmark = pytest.mark.skipif(
    not all(is_built(path) for path in BUNDLED_MODELS.values()), reason="bundled models not built yet"
)

CASES = [
    ("What is 12 * 7?", "calculator"),
    ("How much is 350 divided by 7?", "calculator"),
    ("Compute 19 + 23.", "calculator"),
    ("Convert 5 km to miles, please.", "convert_units"),
    ("How many pounds is 20 kg?", "convert_units"),
    ("What's the weather like in Oslo?", "get_weather"),
    ("Is it raining in Lisbon?", "get_weather"),
    ("What's the weather in Berlin?", "get_weather"),
    ("What time is it in Tokyo?", "get_current_time"),
    ("What time is it in Madrid?", "get_current_time"),
    ("What time is it in Porto?", "get_current_time"),
    ("What time is it in New York?", "get_current_time"),
]
"""Simple prompts, cities from the training lists, the held-out lists and neither. A tiny model misses some
(run 32 writes "To stroller" for Tokyo, whose pieces the corpus hardly ever has it write), so the test asks
for the gate's tool-selection rate over all of them, and never a wrong tool."""
MIN_RIGHT = 0.9


@pytest.fixture(scope="module")
def bundled_server() -> Iterator[RunningServer]:
    running = start_server(
        BUNDLED_MODELS[MAIN_MODEL],
        engine_overrides={"dtype": "bfloat16", "max_model_len": 2048, "kv_cache_memory": 64 << 20},
    )
    yield running
    running.stop()


@pytest.mark.parametrize("tool_choice", ["auto", "required"])
def test_bundled_model_picks_the_right_tool(bundled_server: RunningServer, tool_choice: str) -> None:
    client = bundled_server.client()
    right, misses = 0, []
    for prompt, tool in CASES:
        response = client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": prompt}],
            tools=list(TOOLS.values()),  # type: ignore[arg-type]
            tool_choice=tool_choice,  # type: ignore[arg-type]
            temperature=0,
            max_tokens=96,
        )
        choice = response.choices[0]
        calls = choice.message.tool_calls or []
        if choice.finish_reason == "tool_calls" and len(calls) == 1 and calls[0].function.name == tool:
            json.loads(calls[0].function.arguments)
            right += 1
            continue
        misses.append(
            (prompt, choice.finish_reason, [c.function.name for c in calls], choice.message.content)
        )
        assert all(c.function.name == tool for c in calls), f"a wrong tool for {prompt!r}: {misses[-1]}"
    assert right / len(CASES) >= MIN_RIGHT, misses
