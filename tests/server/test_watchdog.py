"""The watchdog: an engine step that hangs is abandoned, the engine rebuilt, and streams continue."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from switchyard.config import EngineConfig
from switchyard.engine.async_engine import AsyncLLMEngine, RequestFailedError
from switchyard.engine.engine import LLMEngine
from switchyard.engine.model_runner import ModelRunner
from switchyard.engine.sampling_params import SamplingParams

GREEDY = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
PROMPTS = [[5, 6, 7, 8, 9], [40, 41, 42], [100, 7, 200, 9, 31, 77]]


def make_engine(folder: Path) -> LLMEngine:
    config = EngineConfig(model=str(folder), dtype="float32", max_model_len=256, kv_cache_memory=8 << 20)
    return LLMEngine(config)


def hang_next_forward(engine: LLMEngine, release: threading.Event, times: int = 1) -> None:
    """Make the runner's next `times` forward passes block until `release` is set (a hung kernel)."""
    runner = engine.runner
    original = runner.forward
    remaining = [times]

    def forward(inputs):  # type: ignore[no-untyped-def]
        if remaining[0] > 0:
            remaining[0] -= 1
            release.wait(timeout=30)
        return original(inputs)

    runner.forward = forward  # type: ignore[method-assign]


async def collect(engine: AsyncLLMEngine, request_id: str, prompt: list[int]) -> tuple[list[int], str]:
    tokens: list[int] = []
    text = ""
    async with await engine.add_request(request_id, prompt, GREEDY) as stream:
        async for output in stream:
            tokens += output.outputs[0].delta_token_ids
            text += output.outputs[0].delta_text
    return tokens, text


def test_hung_step_is_recovered_and_streams_continue_without_repeats(tiny_model_dir: Path) -> None:
    reference_engine = make_engine(tiny_model_dir)
    expected = {}
    for i, prompt in enumerate(PROMPTS):
        reference_engine.add_request(str(i), prompt, GREEDY)
    while reference_engine.has_unfinished_requests():
        for output in reference_engine.step():
            if output.finished:
                expected[output.request_id] = (output.outputs[0].token_ids, output.outputs[0].text)

    llm_engine = make_engine(tiny_model_dir)
    release = threading.Event()

    async def main() -> dict[str, tuple[list[int], str]]:
        engine = AsyncLLMEngine(llm_engine, step_timeout=2.0)
        await engine.start()
        try:
            tasks = {str(i): asyncio.create_task(collect(engine, str(i), p)) for i, p in enumerate(PROMPTS)}
            while llm_engine.num_generated_tokens < 10:  # let every stream get going
                await asyncio.sleep(0.01)
            hang_next_forward(llm_engine, release)
            results = {k: await t for k, t in tasks.items()}
            # A request arriving after the rebuild is served normally.
            results["late"] = await collect(engine, "late", PROMPTS[0])
            return results
        finally:
            release.set()  # let the abandoned step finish: it must not touch the rebuilt engine
            await engine.shutdown()

    results = asyncio.run(main())
    assert llm_engine.num_hung_steps == 1
    for request_id, (tokens, text) in expected.items():
        assert results[request_id] == (tokens, text)
    assert results["late"] == expected["0"]


def test_a_request_in_two_hung_steps_is_failed_with_a_clear_error(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    llm_engine = make_engine(tiny_model_dir)
    release = threading.Event()
    hangs_left = [0]
    original_forward = ModelRunner.forward

    def forward(runner: ModelRunner, inputs):  # type: ignore[no-untyped-def]
        # Patched on the class, so the runner rebuilt after the first hang hangs on its first step too;
        # arming it only after the rebuild would race the rebuilt engine finishing the request.
        if hangs_left[0] > 0:
            hangs_left[0] -= 1
            release.wait(timeout=30)
        return original_forward(runner, inputs)

    monkeypatch.setattr(ModelRunner, "forward", forward)

    async def main() -> None:
        engine = AsyncLLMEngine(llm_engine, step_timeout=2.0)
        await engine.start()
        try:
            task = asyncio.create_task(collect(engine, "poison", PROMPTS[0]))
            while llm_engine.num_generated_tokens < 2:
                await asyncio.sleep(0.01)
            hangs_left[0] = 2
            with pytest.raises(RequestFailedError, match="hung"):
                await task
            assert engine.is_alive
            assert await collect(engine, "next", PROMPTS[1])
        finally:
            release.set()
            await engine.shutdown()

    asyncio.run(main())
    assert llm_engine.num_hung_steps == 2
