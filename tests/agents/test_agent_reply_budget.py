"""Reply budgets: a tool's `max_tokens` raises the turns that offer it, a call cut off at the budget is asked
again once with `cut_call_max_tokens`, and a call cut off again ends the run as TRUNCATED naming the tool.

Scripted models pin the rules; the bundled model through a real server shows them on a real cut call (its
calculator call, ~20 tokens, under a 4-token budget).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
from scripted_model import ScriptedModel, call, say
from server.harness import MODEL, RunningServer, start_server

from switchyard.agents import Agent, ModelSettings, OpenAIModelClient, RunLimits, Runner, RunStatus, tool
from switchyard.agents.call_validation import CUT_CALL_TEXT
from switchyard.agents.demo import DemoWorld, demo_tools
from switchyard.agents.injection import InjectionPolicy
from switchyard.agents.model import DeltaCallback, ModelRequest, ModelResponse
from switchyard.models.registry import BUNDLED_MODELS, MAIN_MODEL, is_built


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(max_tokens=200, side_effects="acting")
def send_message(to: str, text: str) -> str:
    """Send a message."""
    return "sent"


CUT = dataclasses.replace(call("add", '{"a": 2, "b'), finish_reason="length")
WHOLE = call("add", {"a": 2, "b": 3})


def cut_below(budget: int) -> ScriptedModel:
    """A model whose call to add needs `budget` tokens: cut off under it, whole from it on; then it answers."""

    def first(request: ModelRequest) -> ModelResponse:
        return CUT if (request.max_tokens or 0) < budget else WHOLE

    return ScriptedModel([first, say("5")])


def test_a_tool_raises_the_budget_of_the_turns_that_offer_it() -> None:
    model = ScriptedModel([say("hi")])
    agent = Agent(name="a", tools=[add, send_message], client=model, settings=ModelSettings(max_tokens=16))
    Runner().run_sync(agent, "hi")
    hidden = dataclasses.replace(agent, tool_allowlist=frozenset({"add"}), client=ScriptedModel([say("hi")]))
    Runner().run_sync(hidden, "hi")
    budgeted = dataclasses.replace(agent, client=ScriptedModel([say("hi")]))
    Runner(limits=RunLimits(max_tokens=100)).run_sync(budgeted, "hi")
    assert model.requests[0].max_tokens == 200, "send_message's own budget"
    assert hidden.client.requests[0].max_tokens == 16, "a tool not offered raises nothing"  # type: ignore[union-attr]
    assert budgeted.client.requests[0].max_tokens == 100, "the run's budget has the last word"  # type: ignore[union-attr]


def test_an_agent_without_max_tokens_leaves_the_limit_to_the_server() -> None:
    model = ScriptedModel([say("hi")])
    Runner().run_sync(Agent(name="a", tools=[send_message], client=model), "hi")
    assert model.requests[0].max_tokens is None


def test_a_cut_call_is_asked_again_with_room_and_only_the_whole_call_is_kept() -> None:
    model = cut_below(50)
    agent = Agent(name="a", tools=[add], client=model, settings=ModelSettings(max_tokens=16))
    result = Runner().run_sync(agent, "2+3")
    assert result.status is RunStatus.COMPLETED and result.final_output == "5"
    assert [r.max_tokens for r in model.requests] == [16, 1024, 16]
    assert result.turns == 2 and result.usage.output_tokens == 15, "the cut attempt's tokens count too"
    calls = [c["function"]["arguments"] for m in result.messages for c in m.get("tool_calls") or []]
    assert calls == ['{"a": 2, "b": 3}']


def test_a_call_cut_again_is_reported_with_its_tool_and_never_run() -> None:
    model = cut_below(10_000)
    agent = Agent(
        name="a", tools=[add], client=model, settings=ModelSettings(max_tokens=16, cut_call_max_tokens=64)
    )
    result = Runner().run_sync(agent, "2+3")
    assert result.status is RunStatus.TRUNCATED and [r.max_tokens for r in model.requests] == [16, 64]
    assert result.status_detail == (
        "the reply was cut short at max_tokens=64 inside a call to add (its arguments never closed) "
        "(finish_reason 'length')"
    )
    assert [p.result for p in result.state.pending] == [CUT_CALL_TEXT]
    assert not any(m["role"] == "tool" for m in result.messages)


def test_a_reply_cut_before_showing_anything_is_asked_again_but_a_cut_answer_is_not() -> None:
    """A server holds a call's opening back until the tool is named: cut that early, the reply is empty."""
    empty = dataclasses.replace(say(""), finish_reason="length")
    model = ScriptedModel([lambda r: empty if (r.max_tokens or 0) < 50 else WHOLE, say("5")])
    agent = Agent(name="a", tools=[add], client=model, settings=ModelSettings(max_tokens=16))
    assert Runner().run_sync(agent, "2+3").final_output == "5" and len(model.requests) == 3
    text = ScriptedModel([dataclasses.replace(say("The sum of 2 and"), finish_reason="length")])
    result = Runner().run_sync(dataclasses.replace(agent, client=text), "2+3")
    assert result.status is RunStatus.TRUNCATED and len(text.requests) == 1


def test_a_retry_the_endpoint_refuses_still_reports_the_cut() -> None:
    """A larger budget may not fit the model's context: the cut is what the run reports, with the refusal."""

    def first(request: ModelRequest) -> ModelResponse:
        if (request.max_tokens or 0) > 100:
            raise ValueError("prompt + max_tokens exceeds the context")
        return CUT

    agent = Agent(name="a", tools=[add], client=ScriptedModel([first]), settings=ModelSettings(max_tokens=16))
    result = Runner().run_sync(agent, "2+3")
    assert result.status is RunStatus.TRUNCATED and "inside a call to add" in result.status_detail
    assert result.status_detail.endswith(
        "; asked again with max_tokens=1024: ValueError: prompt + max_tokens exceeds the context"
    )


def test_no_retry_past_the_runs_token_budget() -> None:
    """The retry's budget is what the run has left: no larger than the first request's, it is not made."""
    model = cut_below(10_000)
    agent = Agent(name="a", tools=[add], client=model, settings=ModelSettings(max_tokens=16))
    result = Runner(limits=RunLimits(max_tokens=30)).run_sync(agent, "2+3")
    assert len(model.requests) == 1 and result.status is RunStatus.TRUNCATED
    roomy = cut_below(40)
    agent = dataclasses.replace(agent, client=roomy)
    result = Runner(limits=RunLimits(max_tokens=60)).run_sync(agent, "2+3")
    assert [r.max_tokens for r in roomy.requests][:2] == [16, 45], "60 minus the cut attempt's 15"


def test_budgets_must_be_positive() -> None:
    with pytest.raises(ValueError, match="cut_call_max_tokens"):
        ModelSettings(cut_call_max_tokens=0)
    with pytest.raises(ValueError, match="max_tokens"):
        tool(max_tokens=0)(add.function)


# ------------------------------------------------------------------------------ the bundled model, for real

needs_bundled = pytest.mark.skipif(
    not is_built(BUNDLED_MODELS[MAIN_MODEL]), reason="bundled model not built (switchyard train-default)"
)


@pytest.fixture(scope="module")
def bundled_server() -> Iterator[RunningServer]:
    running = start_server(
        BUNDLED_MODELS[MAIN_MODEL], engine_overrides={"max_model_len": None, "kv_cache_memory": 64 << 20}
    )
    yield running
    running.stop()


@dataclasses.dataclass
class BudgetsSeen:
    """The real client, noting each request's max_tokens and each reply's finish reason."""

    client: OpenAIModelClient
    seen: list[tuple[int | None, str | None]] = dataclasses.field(default_factory=list)

    async def complete(self, request: ModelRequest, on_delta: DeltaCallback | None = None) -> ModelResponse:
        response = await self.client.complete(request, on_delta)
        self.seen.append((request.max_tokens, response.finish_reason))
        return response


def calculator_agent(server: RunningServer, settings: ModelSettings, tool_budget: int | None) -> Agent:
    calculator = next(t for t in demo_tools(DemoWorld()) if t.name == "calculator")
    return Agent(
        name="assistant",
        instructions="You are a helpful assistant with access to tools.",
        tools=[dataclasses.replace(calculator, max_tokens=tool_budget)],
        model=MODEL,
        client=BudgetsSeen(OpenAIModelClient(client=server.async_client())),
        settings=settings,
    )


def first_turn(agent: Agent) -> tuple[RunStatus, str, list[str]]:
    """(status, detail, tool results) after the first model turn and its calls."""
    runner = Runner(limits=RunLimits(max_turns=1), policy=InjectionPolicy(spotlight=False))
    result = runner.run_sync(agent, "What is 12 * 7?")
    return result.status, result.status_detail, [m["content"] for m in result.messages if m["role"] == "tool"]


@needs_bundled
def test_the_bundled_models_cut_call_is_asked_again_and_runs(bundled_server: RunningServer) -> None:
    agent = calculator_agent(bundled_server, ModelSettings(temperature=0.0, max_tokens=4), None)
    status, _, results = first_turn(agent)
    assert agent.client.seen == [(4, "length"), (1024, "tool_calls")]  # type: ignore[union-attr]
    assert status is RunStatus.MAX_TURNS and results == ['{"result": "84"}']


@needs_bundled
def test_the_bundled_models_cut_call_without_a_retry_is_truncated(bundled_server: RunningServer) -> None:
    settings = ModelSettings(temperature=0.0, max_tokens=4, cut_call_max_tokens=None)
    status, detail, results = first_turn(calculator_agent(bundled_server, settings, None))
    assert status is RunStatus.TRUNCATED and "max_tokens=4" in detail and results == []


@needs_bundled
def test_the_calculators_own_budget_needs_no_retry(bundled_server: RunningServer) -> None:
    settings = ModelSettings(temperature=0.0, max_tokens=4, cut_call_max_tokens=None)
    agent = calculator_agent(bundled_server, settings, 64)
    status, _, results = first_turn(agent)
    assert agent.client.seen == [(64, "tool_calls")]  # type: ignore[union-attr]
    assert status is RunStatus.MAX_TURNS and results == ['{"result": "84"}']


@needs_bundled
def test_a_retry_past_the_models_context_reports_the_cut(bundled_server: RunningServer) -> None:
    settings = ModelSettings(temperature=0.0, max_tokens=4, cut_call_max_tokens=100_000)
    status, detail, results = first_turn(calculator_agent(bundled_server, settings, None))
    assert status is RunStatus.TRUNCATED and results == []
    assert "asked again with max_tokens=100000: BadRequestError" in detail and "context length" in detail
