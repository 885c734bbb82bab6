"""Handoffs, structured final answers, streamed events, guardrails and tracing spans."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

import pydantic
import pytest
from scripted_model import ScriptedModel, call, calls, say

from switchyard.agents import (
    Agent,
    AgentTracer,
    ApprovalRequested,
    CheckpointStore,
    GuardrailResult,
    Handoff,
    ModelDelta,
    Price,
    PriceTable,
    RunFinished,
    Runner,
    RunState,
    RunStatus,
    RunStream,
    ToolCalled,
    ToolResult,
    TraceConfig,
    tool,
)


@tool
def lookup(order: int) -> str:
    """Look up an order."""
    return f"order {order} shipped"


def test_handoff_continues_with_the_other_agent_and_filtered_history() -> None:
    billing_model = ScriptedModel([say("Billing here: refund issued.")])
    billing = Agent(name="Billing", instructions="You handle refunds.", client=billing_model)

    def only_user(messages):  # type: ignore[no-untyped-def]
        return [m for m in messages if m["role"] == "user"]

    triage = Agent(
        name="Triage",
        tools=[lookup],
        handoffs=[Handoff(billing, history_filter=only_user)],
        client=ScriptedModel([call("transfer_to_billing", {})]),
    )
    result = Runner().run_sync(triage, "I want a refund")
    assert result.completed and result.last_agent == "Billing"
    assert result.final_output == "Billing here: refund issued."
    request = billing_model.requests[0]
    assert request.messages[0]["content"].startswith("You handle refunds.")
    assert [m["role"] for m in request.messages[1:]] == ["user"]
    assert "transfer_to_billing" in [t["function"]["name"] for t in triage.client.requests[0].tools]  # type: ignore[union-attr]


class Answer(pydantic.BaseModel):
    city: str
    celsius: float


def test_structured_output_through_the_final_answer_tool_or_text() -> None:
    model = ScriptedModel(
        [call("final_answer", {"city": "Oslo"}), call("final_answer", {"city": "Oslo", "celsius": 4})]
    )
    result = Runner().run_sync(Agent(name="w", output_type=Answer, client=model), "weather?")
    assert result.completed and result.final_output == Answer(city="Oslo", celsius=4)
    assert "celsius: Field required" in result.messages[2]["content"]
    text_model = ScriptedModel([say("not json"), say('{"city": "Rome", "celsius": 20}')])
    result = Runner().run_sync(Agent(name="w", output_type=Answer, client=text_model), "weather?")
    assert result.final_output == Answer(city="Rome", celsius=20) and result.turns == 2
    counted = Runner().run_sync(
        Agent(name="n", output_type=int, client=ScriptedModel([call("final_answer", {"value": 7})])), "n"
    )
    assert counted.final_output == 7


@pytest.mark.parametrize(
    "other",
    [
        ("lookup", {"order": 7}, "c_other"),  # valid
        ("lookup", {"order": "seven"}, "c_other"),  # arguments fail the schema
        ("lookup", "{not json", "c_other"),  # arguments are not JSON
        ("no_such_tool", {}, "c_other"),  # unknown tool
    ],
    ids=["valid", "bad-schema", "bad-json", "unknown-tool"],
)
@pytest.mark.parametrize("final_first", [True, False], ids=["final-first", "final-last"])
def test_a_valid_final_answer_ends_the_run_whatever_else_the_turn_called(
    other: tuple[str, object, str], final_first: bool
) -> None:
    ran: list[int] = []

    @tool
    def lookup(order: int) -> str:
        """Look up an order."""
        ran.append(order)
        return f"order {order} shipped"

    final = ("final_answer", {"city": "Oslo", "celsius": 4}, "c_final")
    turn = calls(final, other) if final_first else calls(other, final)  # type: ignore[arg-type]
    model = ScriptedModel([turn])
    result = Runner().run_sync(Agent(name="w", tools=[lookup], output_type=Answer, client=model), "weather?")
    assert result.status is RunStatus.COMPLETED and result.final_output == Answer(city="Oslo", celsius=4)
    assert result.turns == 1 and ran == []  # the turn's other call never ran
    assert result.state.pending == []
    # Every call of the turn still has its reply, so the transcript replays to OpenAI-style APIs.
    replies = {m["tool_call_id"]: m["content"] for m in result.messages if m["role"] == "tool"}
    assert replies == {
        "c_final": "Final answer received.",
        "c_other": "Not run: this turn gave the final answer.",
    }


def test_the_first_valid_final_answer_wins_and_an_invalid_one_is_an_ordinary_bad_call() -> None:
    model = ScriptedModel(
        [
            calls(("final_answer", {"city": "Oslo"}, "c1"), ("lookup", {"order": 7}, "c2")),
            calls(
                ("final_answer", {"city": "Oslo"}, "c3"),
                ("final_answer", {"city": "Rome", "celsius": 20}, "c4"),
                ("final_answer", {"city": "Oslo", "celsius": 4}, "c5"),
            ),
        ]
    )
    result = Runner().run_sync(Agent(name="w", tools=[lookup], output_type=Answer, client=model), "weather?")
    assert result.completed and result.final_output == Answer(city="Rome", celsius=20) and result.turns == 2
    # Turn 1 had no valid final answer: the bad one got its error and the valid call ran, as in any turn.
    tool_results = {m["tool_call_id"]: m["content"] for m in result.messages if m["role"] == "tool"}
    assert "celsius: Field required" in tool_results["c1"] and "order 7 shipped" in tool_results["c2"]


def test_an_output_guardrail_blocking_a_final_answer_tool_call_leaves_nothing_to_run_on_resume() -> None:
    def no_oslo(text: str) -> GuardrailResult:
        return GuardrailResult("Oslo" in text, "mentions Oslo")

    model = ScriptedModel(
        [
            calls(("final_answer", {"city": "Oslo", "celsius": 4}, "c1"), ("lookup", {"order": "x"}, "c2")),
            call("final_answer", {"city": "Rome", "celsius": 20}),
        ]
    )
    agent = Agent(name="w", tools=[lookup], output_type=Answer, output_guardrails=[no_oslo], client=model)
    runner = Runner()
    blocked = runner.run_sync(agent, "weather?")
    assert blocked.status is RunStatus.GUARDRAIL_TRIPPED and blocked.state.pending == []
    replies = {m["tool_call_id"]: m["content"] for m in blocked.messages if m["role"] == "tool"}
    assert replies["c1"].startswith("Final answer not accepted") and replies["c2"].startswith("Not run")
    resumed = runner.resume_sync(blocked.state)
    assert resumed.completed and resumed.final_output == Answer(city="Rome", celsius=20)


def test_streamed_run_reports_deltas_calls_results_approvals_and_the_end() -> None:
    @tool(needs_approval=True)
    def wipe(disk: str) -> str:
        """Wipe a disk."""
        return "wiped"

    model = ScriptedModel(
        [call("lookup", {"order": 7}), say("Order 7 has shipped."), call("wipe", {"disk": "c"})]
    )
    agent = Agent(name="s", tools=[lookup, wipe], client=model)

    async def collect(message: str) -> tuple[list[object], object]:
        stream = Runner().run_streamed(agent, message)
        events = [event async for event in stream.events()]
        return events, stream.result

    events, result = asyncio.run(collect("where is order 7?"))
    kinds = [type(e) for e in events]
    assert kinds[:2] == [ToolCalled, ToolResult] and ModelDelta in kinds and kinds[-1] is RunFinished
    assert "".join(e.text for e in events if isinstance(e, ModelDelta)).strip() == "Order 7 has shipped."
    assert result is events[-1].result  # type: ignore[attr-defined]
    model.replies = [call("wipe", {"disk": "c"})]
    events, result = asyncio.run(collect("wipe"))
    assert any(isinstance(e, ApprovalRequested) for e in events) and result.status is RunStatus.NEEDS_APPROVAL  # type: ignore[attr-defined]


@pytest.mark.parametrize("how", ["cancel", "leave the loop"])
def test_a_consumer_that_stops_reading_stops_the_run(how: str, tmp_path: Path) -> None:
    started, stopped = asyncio.Event(), asyncio.Event()
    blocking = [True]

    @tool
    async def slow_search(query: str) -> str:
        """Search slowly."""
        if blocking[0]:
            started.set()
            try:
                await asyncio.Event().wait()  # never answers on its own
            finally:
                stopped.set()
        return "found x"

    store = CheckpointStore(tmp_path / "runs.db")
    model = ScriptedModel([call("slow_search", {"query": "x"}), say("x is here")])
    agent = Agent(name="s", tools=[slow_search], client=model)

    async def scenario() -> RunStream:
        stream = Runner(store=store).run_streamed(agent, "find x")
        async with contextlib.aclosing(stream.events()) as events:
            async for event in events:
                if isinstance(event, ToolCalled):
                    await started.wait()
                    if how == "cancel":
                        stream.cancel()
                    else:
                        break
        await asyncio.wait_for(stopped.wait(), timeout=30)  # the tool was cancelled, not left running
        return stream

    stream = asyncio.run(scenario())
    assert stream.result is None
    (run_id,) = store.run_ids()
    blocking[0] = False
    resumed = Runner(store=store, agents=[agent]).resume_sync(run_id)  # saved steps survive the cancel
    assert resumed.status is RunStatus.COMPLETED and resumed.final_output == "x is here"


def test_guardrails_trip_on_input_and_output() -> None:
    def no_secrets(text: str) -> GuardrailResult:
        return GuardrailResult("password" in text, "mentions a password")

    agent = Agent(
        name="g",
        input_guardrails=[no_secrets],
        output_guardrails=[no_secrets],
        client=ScriptedModel([say("the password is 1234")]),
    )
    blocked = Runner().run_sync(agent, "my password?")
    assert blocked.status is RunStatus.GUARDRAIL_TRIPPED and blocked.turns == 0
    leaked = Runner().run_sync(agent, "tell me")
    assert leaked.status is RunStatus.GUARDRAIL_TRIPPED and leaked.final_output is None
    assert leaked.partial_output == "the password is 1234"  # kept in the transcript for review


def test_a_guardrail_that_raises_fails_closed_and_ends_the_run_cleanly() -> None:
    def broken(text: str) -> GuardrailResult:
        raise RuntimeError("classifier unavailable")

    model = ScriptedModel([say("an answer")])
    on_input = Runner().run_sync(Agent(name="g", input_guardrails=[broken], client=model), "hello")
    assert on_input.status is RunStatus.GUARDRAIL_TRIPPED and on_input.turns == 0
    assert "broken failed (RuntimeError: classifier unavailable)" in on_input.status_detail
    on_output = Runner().run_sync(Agent(name="g", output_guardrails=[broken], client=model), "hello")
    assert on_output.status is RunStatus.GUARDRAIL_TRIPPED and on_output.final_output is None
    assert on_output.partial_output == "an answer"


def test_tracing_writes_spans_with_tokens_cost_and_latency(tmp_path: Path) -> None:
    billing = Agent(name="Billing", client=ScriptedModel([say("done")], repeat_last=True))
    agent = Agent(
        name="Triage",
        tools=[lookup],
        handoffs=[billing],
        client=ScriptedModel([call("lookup", {"order": 1}), call("transfer_to_billing", {})]),
    )
    path = tmp_path / "trace.jsonl"
    tracer = AgentTracer.from_config(TraceConfig(jsonl_path=path))
    prices = PriceTable(default=Price(1.0, 2.0))
    Runner(tracer=tracer, prices=prices).run_sync(agent, "refund order 1")
    tracer.shutdown()
    spans = [json.loads(line) for line in path.read_text().splitlines()]
    names = [s["name"] for s in spans]
    assert {"agent.run", "agent.turn", "agent.model_call", "agent.tool_call", "agent.handoff"} <= set(names)
    run = next(s for s in spans if s["name"] == "agent.run")
    assert (
        run["attributes"]["gen_ai.usage.input_tokens"] == 30
        and run["attributes"]["switchyard.status"] == "completed"
    )
    assert run["attributes"]["switchyard.cost_usd"] > 0 and run["attributes"]["switchyard.latency_ms"] >= 0
    model_call = next(s for s in spans if s["name"] == "agent.model_call")
    assert model_call["attributes"]["gen_ai.usage.output_tokens"] == 5
    assert len({s["trace_id"] for s in spans}) == 1
    assert all(s["parent_id"] for s in spans if s["name"] != "agent.run")


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [("{not json", "not valid JSON"), ({"reason": "refund"}, "takes no arguments")],
    ids=["bad-json", "extra-argument"],
)
def test_a_handoff_with_malformed_arguments_is_refused_not_made(arguments: object, problem: str) -> None:
    billing = Agent(name="Billing", client=ScriptedModel([say("billing here")]))
    model = ScriptedModel([call("transfer_to_billing", arguments), say("triage here")])  # type: ignore[arg-type]
    result = Runner().run_sync(Agent(name="Triage", handoffs=[billing], client=model), "refund")
    assert result.completed and result.last_agent == "Triage" and result.final_output == "triage here"
    (reply,) = [m["content"] for m in result.messages if m["role"] == "tool"]
    assert problem in reply and "handoff was not made" in reply and '"additionalProperties": false' in reply
    assert billing.client.requests == []  # type: ignore[union-attr]


def test_a_handoff_with_no_arguments_at_all_is_made() -> None:
    billing = Agent(name="Billing", client=ScriptedModel([say("billing here")], repeat_last=True))
    model = ScriptedModel([call("transfer_to_billing", "")])
    result = Runner().run_sync(Agent(name="Triage", handoffs=[billing], client=model), "refund")
    assert result.completed and result.last_agent == "Billing"


def test_the_stream_reports_a_result_for_every_call_refused_before_running() -> None:
    model = ScriptedModel(
        [
            calls(("lookup", '{"order": 1', "bad"), ("nope", {}, "unknown"), ("lookup", {"order": 2}, "ok")),
            say("x"),
        ]
    )
    events: list[object] = []
    Runner().run_sync(Agent(name="s", tools=[lookup], client=model), "go", emit=events.append)
    called = [e.call_id for e in events if isinstance(e, ToolCalled)]
    results = {e.call_id: e for e in events if isinstance(e, ToolResult)}
    assert called == ["bad", "unknown", "ok"] and set(results) == set(called)
    assert results["bad"].is_error and "not valid JSON" in results["bad"].result
    assert results["unknown"].is_error and "unknown tool 'nope'" in results["unknown"].result
    assert not results["ok"].is_error
    raw = {e.call_id: e.raw_arguments for e in events if isinstance(e, ToolCalled)}
    assert raw["bad"] == '{"order": 1' and json.loads(raw["ok"]) == {"order": 2}  # what the model wrote


def test_resuming_a_run_stopped_by_an_input_guardrail_never_sends_the_input_to_the_model() -> None:
    def no_secrets(text: str) -> GuardrailResult:
        return GuardrailResult("password" in text, "mentions a password")

    model = ScriptedModel([say("noted")])
    agent = Agent(name="g", input_guardrails=[no_secrets], client=model)
    runner = Runner()
    blocked = runner.run_sync(agent, "my password is hunter2")
    assert blocked.status is RunStatus.GUARDRAIL_TRIPPED
    again = runner.resume_sync(RunState.from_json(blocked.state.to_json()))
    assert again.status is RunStatus.GUARDRAIL_TRIPPED and "mentions a password" in again.status_detail
    assert model.requests == []
    agent.input_guardrails = []  # a guardrail relaxed since lets the resumed run go on
    assert runner.resume_sync(again.state).final_output == "noted"
