"""A real agent loop against a real Switchyard server on loopback (tiny random model), through the openai client.

The random model's words mean nothing, but with tool_choice "required" the server constrains its reply to a
schema-valid call, so the loop's shape is deterministic: forced call -> tool result -> answer with "none".
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from model_factory import build_hf_model
from server.harness import MODEL, RunningServer, start_server
from tokenizer_factory import SPECIAL_TOKENS, build_tokenizer

from switchyard.agents import Agent, ModelSettings, OpenAIModelClient, Runner, RunStatus, ToolCalled, tool

ANSWER_ENDS = {"logit_bias": {str(SPECIAL_TOKENS.index("<|im_end|>")): 12.0}}
"""The random model seldom writes its end token, and an answer cut at max_tokens ends a run as TRUNCATED: a bias
on the end token ends each answer within a few tokens (inside a forced call the grammar still masks it)."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    folder = tmp_path_factory.mktemp("tiny-llama-agents")
    build_hf_model("llama", folder, seed=0, max_position_embeddings=1024)
    build_tokenizer(folder, vocab_size=320)
    running = start_server(folder, engine_overrides={"max_model_len": 1024, "kv_cache_memory": 16 << 20})
    yield running
    running.stop()


@tool
def shelf(row: int) -> str:
    """Which books stand on a shelf row.

    Args:
        row: Row number, 0 to 9.
    """
    return f"row {row}: atlases"


def test_forced_call_then_answer_through_a_real_server(server: RunningServer) -> None:
    seen: list[int] = []

    @tool
    def counted(row: int) -> str:
        """Count a row."""
        seen.append(row)
        return "ok"

    settings = ModelSettings(
        temperature=1.0, seed=3, max_tokens=40, tool_choice="required", tool_choice_after_tools="none",
        parallel_tool_calls=False, extra_body=ANSWER_ENDS,
    )  # fmt: skip
    agent = Agent(
        name="librarian", model=MODEL, tools=[counted], settings=settings,
        client=OpenAIModelClient(client=server.async_client()),
    )  # fmt: skip
    result = Runner().run_sync(agent, "Which books are on row 3?")
    assert result.status is RunStatus.COMPLETED, result.status_detail
    assert [m["role"] for m in result.messages] == ["user", "assistant", "tool", "assistant"]
    assert len(seen) == 1 and isinstance(seen[0], int)  # dispatched once, with schema-valid arguments
    assert result.turns == 2 and result.usage.input_tokens > 0 and result.usage.output_tokens > 0
    assert isinstance(result.final_output, str)


def test_streamed_run_through_a_real_server(server: RunningServer) -> None:
    agent = Agent(
        name="librarian", model=MODEL, tools=[shelf], settings=FORCED_CALL,  # greedy, it writes digits to the cut
        client=OpenAIModelClient(client=server.async_client()),
    )  # fmt: skip

    async def collect():  # type: ignore[no-untyped-def]
        stream = Runner().run_streamed(agent, "Which books are on row 3?")
        return [event async for event in stream.events()], stream.result

    events, result = asyncio.run(collect())
    assert result.completed and any(isinstance(e, ToolCalled) and e.tool == "shelf" for e in events)


FORCED_CALL = ModelSettings(
    temperature=1.0, seed=3, max_tokens=40, tool_choice="required", tool_choice_after_tools="none",
    parallel_tool_calls=False, extra_body=ANSWER_ENDS,
)  # fmt: skip
"""One forced call, then an answer: with these settings the tiny model's call is schema-valid."""


def bell_agent(client: OpenAIModelClient, rung: list[int]) -> Agent:
    """An agent whose one tool needs approval, so a run pauses after its first turn."""

    @tool(needs_approval=True)
    def ring(row: int) -> str:
        """Ring the bell of a shelf row.

        Args:
            row: Row number, 0 to 9.
        """
        rung.append(row)
        return "rung"

    return Agent(name="librarian", model=MODEL, tools=[ring], settings=FORCED_CALL, client=client)


def test_an_approval_resumed_through_the_sync_api_keeps_the_client_working(server: RunningServer) -> None:
    """run_sync pauses for approval, resume_sync goes on with the same agent and its async openai client: the
    client's pooled connections belong to the event loop they were opened on, so both calls must share it."""
    rung: list[int] = []
    agent = bell_agent(OpenAIModelClient(client=server.async_client()), rung)
    runner = Runner()
    paused = runner.run_sync(agent, "Ring row 3.")
    assert paused.status is RunStatus.NEEDS_APPROVAL, (paused.status_detail, paused.messages)
    (item,) = paused.pending_approvals
    paused.state.approve(item.call_id)
    done = runner.resume_sync(paused.state)
    assert done.status is RunStatus.COMPLETED, done.status_detail
    assert len(rung) == 1 and done.turns == 2
    again = runner.run_sync(agent, "Ring row 4.")  # a third sync call on the same runner
    assert again.status is RunStatus.NEEDS_APPROVAL, again.status_detail
    runner.close()


def test_a_client_built_from_a_url_survives_a_resume_on_a_new_runner(server: RunningServer) -> None:
    """A resume on another runner (another process, after a checkpoint) runs on another event loop; the client
    built from `base_url` opens new connections on the new loop."""
    rung: list[int] = []
    agent = bell_agent(OpenAIModelClient(base_url=f"{server.base_url}/v1"), rung)
    paused = Runner().run_sync(agent, "Ring row 3.")
    assert paused.status is RunStatus.NEEDS_APPROVAL, paused.status_detail
    paused.state.approve(paused.pending_approvals[0].call_id)
    done = Runner(agents=[agent]).resume_sync(paused.state)
    assert done.status is RunStatus.COMPLETED, done.status_detail
    assert len(rung) == 1
