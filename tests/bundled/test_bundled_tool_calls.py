"""The bundled model picks the right tool on simple prompts, through the server and the openai client.

Skipped until `switchyard train-default` has built the bundled models.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from server.harness import RunningServer, start_server

from switchyard.bundled import BUNDLED_MODELS, MAIN_MODEL, is_built
from switchyard.bundled.tools import TOOLS

pytestmark = pytest.mark.skipif(
    not all(is_built(path) for path in BUNDLED_MODELS.values()), reason="bundled models not built yet"
)

CASES = [
    ("What is 12 * 7?", "calculator"),
    ("Convert 5 km to miles, please.", "convert_units"),
    ("What's the weather like in Oslo?", "get_weather"),
    ("What time is it in Tokyo?", "get_current_time"),
]


@pytest.fixture(scope="module")
def bundled_server() -> Iterator[RunningServer]:
    running = start_server(
        BUNDLED_MODELS[MAIN_MODEL],
        engine_overrides={"dtype": "bfloat16", "max_model_len": 2048, "kv_cache_memory": 64 << 20},
    )
    yield running
    running.stop()


@pytest.mark.parametrize(("prompt", "tool"), CASES)
@pytest.mark.parametrize("tool_choice", ["auto", "required"])
def test_bundled_model_picks_the_right_tool(
    bundled_server: RunningServer, prompt: str, tool: str, tool_choice: str
) -> None:
    client = bundled_server.client()
    response = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": prompt}],
        tools=list(TOOLS.values()),  # type: ignore[arg-type]
        tool_choice=tool_choice,  # type: ignore[arg-type]
        temperature=0,
        max_tokens=96,
    )
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls", choice.message.content
    [call] = choice.message.tool_calls or []
    assert call.function.name == tool
    json.loads(call.function.arguments)
