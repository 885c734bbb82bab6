"""AsyncLLMEngine without HTTP: streaming, abort on cancellation, admission, timeouts, surviving failures."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from harness import blocks_in_use

from switchyard.config import EngineConfig
from switchyard.drain_rate import DrainRate, estimate_retry_after
from switchyard.engine.async_engine import (
    AsyncLLMEngine,
    EngineDeadError,
    QueueFullError,
    RequestFailedError,
    RequestTimeoutError,
)
from switchyard.engine.engine import LLMEngine
from switchyard.engine.sampling_params import SamplingParams
from switchyard.engine.structured.params import StructuredOutputsParams
from switchyard.errors import InvalidRequestError
from switchyard.models.tokenizer import render_chat

T = TypeVar("T")

LONG = SamplingParams(temperature=0, max_tokens=200, ignore_eos=True)
SHORT = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)


@pytest.fixture(scope="module")
def llm_engine(tiny_model_dir: Path) -> LLMEngine:
    return LLMEngine(
        EngineConfig(
            model=str(tiny_model_dir),
            dtype="float32",
            device="cpu",
            max_model_len=256,
            kv_cache_memory=8 << 20,
        )
    )


def run(llm_engine: LLMEngine, body: Callable[[AsyncLLMEngine], Awaitable[T]], **kwargs: Any) -> T:
    """Run body(engine) on a fresh AsyncLLMEngine in a fresh event loop; the LLMEngine must end idle."""

    async def main() -> T:
        engine = AsyncLLMEngine(llm_engine, **kwargs)
        await engine.start()
        try:
            return await body(engine)
        finally:
            await engine.shutdown()

    result = asyncio.run(main())
    assert blocks_in_use(llm_engine) == 0
    assert not llm_engine.requests
    return result


def used_blocks(engine: AsyncLLMEngine) -> Awaitable[int]:
    return engine.run_in_engine_thread(blocks_in_use, engine.engine)


def test_stream_deltas_add_up_to_the_final_output(llm_engine: LLMEngine) -> None:
    async def body(engine: AsyncLLMEngine) -> None:
        outputs = [o async for o in engine.generate("a", [5, 6, 7, 8], SHORT)]
        assert outputs[-1].finished and not any(o.finished for o in outputs[:-1])
        final = outputs[-1].outputs[0]
        assert [t for o in outputs for t in o.outputs[0].delta_token_ids] == final.token_ids
        assert "".join(o.outputs[0].delta_text for o in outputs) == final.text
        assert len(final.token_ids) == 8

    run(llm_engine, body)


def test_cancelled_consumer_frees_blocks_before_the_next_step(llm_engine: LLMEngine) -> None:
    async def body(engine: AsyncLLMEngine) -> None:
        first = asyncio.Event()

        async def consume() -> None:
            async for _ in engine.generate("a", [5, 6, 7, 8], LONG):
                first.set()

        task = asyncio.create_task(consume())
        await first.wait()
        assert await used_blocks(engine) > 0
        steps_at_cancel = engine.num_steps
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        # The abort was queued on the engine thread at cancellation, ahead of any later step. The step running
        # at cancel time and one the loop submitted while the cancellation reached the consumer may finish.
        assert await used_blocks(engine) == 0
        assert engine.num_steps <= steps_at_cancel + 2
        assert engine.num_in_flight == 0

    run(llm_engine, body)


def test_the_engine_steps_while_a_prompt_is_being_tokenized(llm_engine: LLMEngine) -> None:
    # A huge prompt takes seconds to tokenize; that must happen beside the engine's steps, not in their way.
    async def body(engine: AsyncLLMEngine) -> None:
        release = threading.Event()
        tokenizer = engine.text._small._tokenizer
        real_encode = tokenizer.encode

        def held_encode(*args: Any, **kwargs: Any) -> Any:
            release.wait(timeout=60)
            return real_encode(*args, **kwargs)

        tokenizer.encode = held_encode
        try:
            tokenizing = asyncio.create_task(engine.text.encode("hello there"))
            outputs = [o async for o in engine.generate("a", [5, 6, 7, 8], SHORT)]
            assert outputs[-1].finished and not tokenizing.done()  # generated while the encode still waits
            release.set()
            assert await tokenizing == list(llm_engine.tokenize("hello there"))
        finally:
            release.set()
            tokenizer.encode = real_encode

    run(llm_engine, body)


def test_invalid_request_fails_at_admission(llm_engine: LLMEngine) -> None:
    async def body(engine: AsyncLLMEngine) -> None:
        with pytest.raises(InvalidRequestError) as info:
            await engine.add_request("a", list(range(5, 300)), SHORT)
        assert info.value.param == "prompt"
        assert engine.num_in_flight == 0

    run(llm_engine, body)


def test_a_grammar_that_does_not_compile_is_refused_before_anything_is_queued(llm_engine: LLMEngine) -> None:
    async def body(engine: AsyncLLMEngine) -> None:
        bad = SamplingParams(max_tokens=8, structured_outputs=StructuredOutputsParams(grammar="root ::= ("))
        steps = engine.num_steps
        with pytest.raises(InvalidRequestError):
            await engine.add_request("bad", [5, 6, 7], bad)
        assert engine.num_in_flight == 0 and engine.num_steps == steps
        assert await engine.run_in_engine_thread(lambda: engine.engine.scheduler.num_waiting) == 0

    run(llm_engine, body)


def test_the_stream_reports_the_prompt_the_engine_kept(llm_engine: LLMEngine) -> None:
    async def body(engine: AsyncLLMEngine) -> None:
        truncated = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True, truncate_prompt_tokens=3)
        async with await engine.add_request("cut", [5, 6, 7, 8, 9], truncated) as stream:
            assert stream.prompt_token_ids == [7, 8, 9]
            assert [o async for o in stream][-1].prompt_token_ids == [7, 8, 9]

    run(llm_engine, body)


def test_a_chat_renders_and_reads_its_end_in_one_call(llm_engine: LLMEngine) -> None:
    async def body(engine: AsyncLLMEngine) -> None:
        messages = [{"role": "user", "content": "hello"}]
        rendered = await engine.text.render_chat(messages, tail_tokens=4)
        assert rendered.prompt_token_ids == render_chat(llm_engine.tokenizer, messages)
        assert rendered.tail_text == llm_engine.tokenizer.decode(rendered.prompt_token_ids[-4:])
        assert (await engine.text.render_chat(messages)).tail_text == ""
        prompts = await engine.text.encode_prompts(["hello there", [5, 6]])
        assert prompts == [llm_engine.tokenize("hello there"), [5, 6]]

    run(llm_engine, body)


def test_full_waiting_queue_refuses_with_retry_after(tiny_model_dir: Path) -> None:
    """max_waiting bounds the backlog: requests the batch has no room for (here one sequence at a time), not
    those the next step will schedule."""
    one_at_a_time = LLMEngine(
        EngineConfig(
            model=str(tiny_model_dir),
            dtype="float32",
            device="cpu",
            max_model_len=256,
            kv_cache_memory=8 << 20,
            max_num_seqs=1,
        )
    )

    async def body(engine: AsyncLLMEngine) -> None:
        release = threading.Event()
        blocker = engine.run_in_engine_thread(release.wait)  # hold the engine thread so the adds queue up
        adds = [asyncio.create_task(engine.add_request(f"r{i}", [5, 6, 7], SHORT)) for i in range(4)]
        await asyncio.sleep(0.05)
        release.set()
        await blocker
        results = await asyncio.gather(*adds, return_exceptions=True)
        # r0 fits the batch; r1 is the one request allowed to wait behind it; r2 and r3 find that backlog full.
        assert not isinstance(results[0], BaseException) and not isinstance(results[1], BaseException)
        for refused in results[2:]:
            assert isinstance(refused, QueueFullError)
            assert refused.num_waiting == 1 and 1 <= refused.retry_after <= 60
        for admitted in results[:2]:
            async with admitted as stream:  # type: ignore[union-attr]
                assert [o async for o in stream][-1].finished

    run(one_at_a_time, body, max_waiting=1)


def test_timeout_aborts_the_request(llm_engine: LLMEngine) -> None:
    async def body(engine: AsyncLLMEngine) -> None:
        stream = await engine.add_request("slow", [5, 6, 7], LONG, timeout=0.05)
        with pytest.raises(RequestTimeoutError):
            async with stream:
                async for _ in stream:
                    pass
        assert await used_blocks(engine) == 0

    run(llm_engine, body)


def test_failed_step_fails_in_flight_requests_and_the_loop_carries_on(
    llm_engine: LLMEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_step = llm_engine.step
    calls = {"n": 0}

    def flaky_step() -> Any:
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("boom")
        return real_step()

    monkeypatch.setattr(llm_engine, "step", flaky_step)

    async def body(engine: AsyncLLMEngine) -> None:
        with pytest.raises(RequestFailedError, match="boom"):
            async for _ in engine.generate("a", [5, 6, 7], LONG):
                pass
        assert engine.is_alive
        assert await used_blocks(engine) == 0
        outputs = [o async for o in engine.generate("b", [5, 6, 7], SHORT)]
        assert outputs[-1].finished and len(outputs[-1].outputs[0].token_ids) == 8

    run(llm_engine, body)


def test_repeated_step_failures_declare_the_engine_dead(
    llm_engine: LLMEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_step() -> Any:
        raise RuntimeError("broken")

    monkeypatch.setattr(llm_engine, "step", broken_step)

    async def body(engine: AsyncLLMEngine) -> None:
        for name in ("a", "b"):
            with pytest.raises(RequestFailedError):
                async for _ in engine.generate(name, [5, 6, 7], SHORT):
                    pass
        await asyncio.sleep(0.01)
        assert not engine.is_alive
        with pytest.raises(EngineDeadError, match="in a row"):
            await engine.add_request("c", [5, 6, 7], SHORT)

    run(llm_engine, body, max_consecutive_failures=2)
    monkeypatch.undo()
    while llm_engine.has_unfinished_requests():  # drain the abort outputs left by the failed steps
        llm_engine.step()


def test_retry_after_follows_the_drain_rate() -> None:
    drain = DrainRate(window=10.0, start=0.0)
    assert drain.per_second(5.0) is None
    for t in (1.0, 2.0, 3.0, 4.0):
        drain.record(t)
    assert drain.per_second(4.0) == pytest.approx(1.0)
    assert drain.per_second(30.0) is None  # all finishes fell out of the window
    assert estimate_retry_after(20, 2.0) == 10.0
    assert estimate_retry_after(1, 100.0) == 1.0
    assert estimate_retry_after(10_000, 1.0) == 60.0
    assert estimate_retry_after(5, None) >= 1.0


def test_an_engine_built_on_its_thread_is_stepped_there(llm_engine: LLMEngine) -> None:
    """The load and every step share one thread (one OpenMP team; see `built_on_its_thread`)."""
    built_on: list[int] = []

    def build() -> LLMEngine:
        built_on.append(threading.get_ident())
        return llm_engine

    async def main() -> None:
        engine = AsyncLLMEngine.built_on_its_thread(build)
        await engine.start()
        try:
            assert built_on != [threading.get_ident()]
            assert await engine.run_in_engine_thread(threading.get_ident) == built_on[0]
            final = None
            async for output in engine.generate("p", [1, 2, 3], SHORT):
                final = output
            assert final is not None and len(final.outputs[0].token_ids) == 8
        finally:
            await engine.shutdown()

    asyncio.run(main())


def test_a_failed_build_on_the_engine_thread_raises_to_the_caller() -> None:
    def build() -> LLMEngine:
        raise ValueError("no such model")

    with pytest.raises(ValueError, match="no such model"):
        AsyncLLMEngine.built_on_its_thread(build)
