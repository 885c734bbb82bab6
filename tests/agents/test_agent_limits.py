"""Hard limits end a run with a typed status and keep the transcript, the partial output, usage and cost."""

from __future__ import annotations

import asyncio
import dataclasses

import pydantic
import pytest
from scripted_model import ScriptedModel, call, calls, say

from switchyard.agents import Agent, ModelSettings, Price, PriceTable, RunLimits, Runner, RunStatus, tool
from switchyard.agents.model import ModelRequest, ModelResponse


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def agent_with(*replies: object, repeat_last: bool = False) -> Agent:
    return Agent(name="calc", tools=[add], client=ScriptedModel(list(replies), repeat_last=repeat_last))  # type: ignore[arg-type]


def test_completed_run_reports_usage_and_cost() -> None:
    agent = agent_with(call("add", {"a": 2, "b": 3}), say("2 + 3 = 5"))
    prices = PriceTable({"switchyard-chat": Price(input_per_million=1000.0, output_per_million=2000.0)})
    result = Runner(prices=prices).run_sync(agent, "what is 2 + 3?")
    assert result.status is RunStatus.COMPLETED and result.final_output == "2 + 3 = 5"
    assert result.usage.input_tokens == 20 and result.usage.output_tokens == 10 and result.turns == 2
    assert result.cost == pytest.approx((20 * 1000 + 10 * 2000) / 1e6)
    tool_message = next(m for m in result.messages if m["role"] == "tool")
    assert "\n5\n" in tool_message["content"]  # spotlighted: delimiters around the result


def test_max_turns_keeps_transcript_and_partial_output() -> None:
    def chatty(request: ModelRequest) -> ModelResponse:
        turn = sum(m["role"] == "assistant" for m in request.messages)
        response = call("add", {"a": turn, "b": 1})
        return ModelResponse(f"working on step {turn}", response.tool_calls, response.usage)

    result = Runner(limits=RunLimits(max_turns=3)).run_sync(agent_with(chatty, repeat_last=True), "count")
    assert result.status is RunStatus.MAX_TURNS and result.turns == 3
    assert result.partial_output == "working on step 2" and result.final_output is None
    assert sum(m["role"] == "tool" for m in result.messages) == 3


def test_timeout_stops_a_slow_model() -> None:
    class Slow(ScriptedModel):
        async def complete(self, request, on_delta=None):  # type: ignore[no-untyped-def]
            await asyncio.sleep(5)
            raise AssertionError("unreachable")

    agent = Agent(name="slow", client=Slow([]))
    result = Runner(limits=RunLimits(timeout=0.2)).run_sync(agent, "hi")
    assert result.status is RunStatus.TIMEOUT and result.messages[0]["content"] == "hi"


def test_max_tokens_and_max_cost() -> None:
    replies = [call("add", {"a": i, "b": i}, input_tokens=100, output_tokens=50) for i in range(5)]
    by_tokens = Runner(limits=RunLimits(max_tokens=300)).run_sync(agent_with(*replies), "go")
    assert by_tokens.status is RunStatus.MAX_TOKENS and by_tokens.usage.total_tokens == 300
    prices = PriceTable(default=Price(10_000.0, 10_000.0))  # $1.5 per call
    by_cost = Runner(limits=RunLimits(max_cost=2.0), prices=prices).run_sync(agent_with(*replies), "go")
    assert by_cost.status is RunStatus.MAX_COST and by_cost.cost == pytest.approx(3.0) and by_cost.turns == 2


def test_max_tokens_lowers_the_per_call_budget() -> None:
    model = ScriptedModel([say("ok")])
    Runner(limits=RunLimits(max_tokens=40)).run_sync(Agent(name="a", client=model), "hi")
    assert model.requests[0].max_tokens == 40


def cut(text: str, input_tokens: int = 10, output_tokens: int = 5) -> ModelResponse:
    return dataclasses.replace(say(text, input_tokens, output_tokens), finish_reason="length")


def test_a_reply_cut_at_max_tokens_is_not_an_answer() -> None:
    agent = Agent(
        name="a",
        client=ScriptedModel([cut("The capital of France is")]),
        settings=ModelSettings(max_tokens=5),
    )
    result = Runner().run_sync(agent, "capital of France?")
    assert result.status is RunStatus.TRUNCATED and not result.completed and result.final_output is None
    assert result.partial_output == "The capital of France is"
    assert "max_tokens=5" in result.status_detail and "length" in result.status_detail
    assert [m["role"] for m in result.messages] == ["user", "assistant"]  # no retry prompt was added


def test_a_structured_answer_cut_short_ends_the_run_instead_of_retrying() -> None:
    class City(pydantic.BaseModel):
        name: str

    model = ScriptedModel([cut('{"name": "Par')], repeat_last=True)
    result = Runner().run_sync(Agent(name="a", client=model, output_type=City), "a city")
    assert result.status is RunStatus.TRUNCATED and len(model.requests) == 1
    assert "the server's limit" in result.status_detail


def test_a_call_cut_at_max_tokens_is_never_run_and_asked_again_once_at_most() -> None:
    cut_call = dataclasses.replace(call("add", '{"a": 2, "b'), finish_reason="length")
    model = ScriptedModel([cut_call], repeat_last=True)
    result = Runner().run_sync(
        Agent(name="a", tools=[add], client=model, settings=ModelSettings(max_tokens=8)), "2+3"
    )
    assert result.status is RunStatus.TRUNCATED and [r.max_tokens for r in model.requests] == [8, 1024]
    assert "max_tokens=1024 inside a call to add" in result.status_detail
    assert not any(m["role"] == "tool" for m in result.messages)
    no_retry = ScriptedModel([cut_call], repeat_last=True)
    settings = ModelSettings(max_tokens=8, cut_call_max_tokens=None)
    Runner().run_sync(Agent(name="a", tools=[add], client=no_retry, settings=settings), "2+3")
    assert len(no_retry.requests) == 1


def test_whole_calls_before_the_cut_still_run() -> None:
    whole = dataclasses.replace(call("add", {"a": 2, "b": 3}), finish_reason="length")
    result = Runner().run_sync(agent_with(whole, say("5")), "2+3")
    assert result.status is RunStatus.COMPLETED and result.final_output == "5"
    assert "\n5\n" in next(m["content"] for m in result.messages if m["role"] == "tool")


def test_a_reply_cut_by_the_run_budget_reports_the_budget() -> None:
    model = ScriptedModel([cut("Counting: one, two", input_tokens=30, output_tokens=10)])
    result = Runner(limits=RunLimits(max_tokens=40)).run_sync(Agent(name="a", client=model), "count")
    assert result.status is RunStatus.MAX_TOKENS and result.partial_output == "Counting: one, two"
    assert "cut short" in result.status_detail


def test_a_reply_that_ends_on_the_budget_still_completes() -> None:
    model = ScriptedModel([say("done", input_tokens=30, output_tokens=10)])
    result = Runner(limits=RunLimits(max_tokens=40)).run_sync(Agent(name="a", client=model), "go")
    assert result.status is RunStatus.COMPLETED and result.final_output == "done"


def test_loop_detector_ends_repeated_identical_calls() -> None:
    agent = agent_with(call("add", {"a": 1, "b": 1}), repeat_last=True)
    result = Runner(limits=RunLimits(loop_threshold=3, max_turns=20)).run_sync(agent, "loop")
    assert result.status is RunStatus.LOOP_DETECTED and result.turns == 3
    assert "add called 3 times" in result.status_detail
    assert sum(m["role"] == "tool" for m in result.messages) == 2  # the third call was never run


def test_bad_arguments_go_back_to_the_model_and_are_never_dispatched() -> None:
    ran: list[tuple[int, int]] = []

    @tool
    def mul(a: int, b: int) -> int:
        """Multiply."""
        ran.append((a, b))
        return a * b

    model = ScriptedModel([call("mul", '{"a": 2'), call("mul", {"a": 2}), call("mull", {"a": 2, "b": 3}),
                           call("mul", {"a": 2, "b": 3}), say("6")])  # fmt: skip
    result = Runner().run_sync(Agent(name="m", tools=[mul], client=model), "2*3")
    assert result.status is RunStatus.COMPLETED and ran == [(2, 3)]
    errors = [m["content"] for m in result.messages if m["role"] == "tool"][:3]
    assert "not valid JSON" in errors[0] and '"required"' in errors[0]  # the error comes with the schema
    assert "b: Field required" in errors[1]
    assert "unknown tool 'mull'" in errors[2] and "Available tools: mul" in errors[2]


def test_retry_limit_on_bad_calls() -> None:
    agent = agent_with(call("add", {"a": "x"}), repeat_last=True)
    result = Runner(limits=RunLimits(max_tool_retries=2, loop_threshold=None)).run_sync(agent, "x")
    assert result.status is RunStatus.TOOL_RETRIES_EXHAUSTED and result.turns == 3


def test_parallel_calls_run_in_order() -> None:
    agent = agent_with(
        calls(("add", {"a": 1, "b": 2}, "c1"), ("add", {"a": 3, "b": 4}, "c2")), say("3 and 7")
    )
    result = Runner().run_sync(agent, "two sums")
    tools = [m for m in result.messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tools] == ["c1", "c2"]
    assert "\n3\n" in tools[0]["content"] and "\n7\n" in tools[1]["content"]


def test_a_slow_tool_times_out_alone_and_the_run_goes_on() -> None:
    @tool(timeout=0.05)
    async def slow() -> str:
        """Take too long."""
        await asyncio.sleep(2)
        return "late"

    agent = Agent(name="t", tools=[slow], client=ScriptedModel([call("slow", {}), say("gave up")]))
    result = Runner(limits=RunLimits(timeout=30)).run_sync(agent, "x")
    assert result.completed and "slow timed out after 0.05 s" in result.messages[2]["content"]


def test_a_failing_endpoint_ends_the_run_and_keeps_the_transcript() -> None:
    def broken(request: ModelRequest) -> ModelResponse:
        raise ConnectionError("server went away")

    agent = agent_with(call("add", {"a": 1, "b": 2}), broken)
    result = Runner().run_sync(agent, "x")
    assert result.status is RunStatus.MODEL_ERROR and "server went away" in result.status_detail
    assert [m["role"] for m in result.messages] == ["user", "assistant", "tool"]


def test_the_run_timeout_bounds_the_context_budgets_own_model_calls() -> None:
    from switchyard.agents.memory.context_budget import ContextBudget

    async def hanging_recall(query: str) -> list[str]:
        await asyncio.sleep(60)  # e.g. an embedding or summarising endpoint that never answers
        return []

    budget = ContextBudget(
        count_tokens=len, context_window=1000, reply_budget=10, summariser=str, recall=hanging_recall
    )
    model = ScriptedModel([say("unreachable")])
    result = Runner(context_budget=budget, limits=RunLimits(timeout=0.2)).run_sync(
        Agent(name="c", client=model), "hi"
    )
    assert result.status is RunStatus.TIMEOUT and model.requests == []
    assert result.messages == [{"role": "user", "content": "hi"}]


def test_a_failing_context_budget_endpoint_ends_the_run_like_a_failing_model() -> None:
    from switchyard.agents.memory.context_budget import ContextBudget

    def broken_recall(query: str) -> list[str]:
        raise ConnectionError("memory store went away")

    budget = ContextBudget(
        count_tokens=len, context_window=1000, reply_budget=10, summariser=str, recall=broken_recall
    )
    result = Runner(context_budget=budget).run_sync(Agent(name="c", client=ScriptedModel([say("x")])), "hi")
    assert result.status is RunStatus.MODEL_ERROR and "memory store went away" in result.status_detail
    assert result.messages == [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_turns": 0},
        {"timeout": -1.0},
        {"max_cost": 0},
        {"max_tool_retries": -1},
        {"max_tool_retries": 1.5},
    ],
)
def test_nonsense_limits_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        RunLimits(**kwargs)  # type: ignore[arg-type]


def answered_in_place(messages: list[dict]) -> bool:
    """Every assistant tool call has its tool reply before the next non-tool message, as chat APIs require."""
    waiting: set[str] = set()
    for message in messages:
        if message["role"] == "tool":
            waiting.discard(message["tool_call_id"])
            continue
        if waiting:
            return False
        waiting = {c["id"] for c in message.get("tool_calls") or []}
    return not waiting


def test_input_list_answers_the_call_a_cut_ended_the_run_on() -> None:
    cut_call = dataclasses.replace(call("add", '{"a": 2, "b'), finish_reason="length")
    settings = ModelSettings(max_tokens=8, cut_call_max_tokens=None)
    agent = Agent(name="a", tools=[add], client=ScriptedModel([cut_call]), settings=settings)
    result = Runner().run_sync(agent, "2+3")
    assert not answered_in_place(result.messages), "the transcript keeps the cut call open for a resume"
    follow_up = result.to_input_list()
    assert answered_in_place(follow_up) and follow_up[: len(result.messages)] == result.messages
    reply = follow_up[-1]
    assert reply["tool_call_id"] == result.messages[-1]["tool_calls"][0]["id"]
    assert "not run" in reply["content"] and "truncated" in reply["content"]


def test_input_list_after_a_loop_and_after_a_completed_run() -> None:
    looping = agent_with(call("add", {"a": 1, "b": 1}), repeat_last=True)
    stopped = Runner(limits=RunLimits(loop_threshold=3, max_turns=20)).run_sync(looping, "loop")
    follow_up = stopped.to_input_list()
    assert answered_in_place(follow_up) and len(follow_up) == len(stopped.messages) + 1
    assert "loop_detected" in follow_up[-1]["content"]
    done = Runner().run_sync(agent_with(call("add", {"a": 2, "b": 3}), say("5")), "2+3")
    assert done.to_input_list() == done.messages
