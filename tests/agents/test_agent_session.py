"""A Runner with a session: history comes first, new messages are appended once, across runs and resumes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from scripted_model import ScriptedModel, call, calls, say

from switchyard.agents import Agent, Runner, RunStatus, SideEffects, tool
from switchyard.agents.memory.session import SQLiteSession
from switchyard.agents.model import ModelRequest, ModelResponse


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(side_effects=SideEffects.ACTING, needs_approval=True)
def send(text: str) -> str:
    """Send a message."""
    return "sent"


def test_history_is_loaded_and_new_messages_are_saved_once(tmp_path: Path) -> None:
    session = SQLiteSession("s1", path=tmp_path / "memory.db")
    seen: list[list[dict]] = []  # type: ignore[type-arg]

    def answer(request: ModelRequest) -> ModelResponse:
        seen.append(list(request.messages))
        return say(f"answer {len(seen)}")

    agent = Agent(
        name="a", instructions="Be brief.", tools=[add], client=ScriptedModel([answer], repeat_last=True)
    )
    runner = Runner()
    first = runner.run_sync(agent, "hello", session=session)
    assert first.status is RunStatus.COMPLETED
    second = runner.run_sync(agent, "again", session=SQLiteSession("s1", path=tmp_path / "memory.db"))
    assert second.final_output == "answer 2"
    contents = [m.get("content") for m in seen[1] if m["role"] != "system"]
    assert contents == ["hello", "answer 1", "again"]  # the first run's turn came back from SQLite
    stored = asyncio.run(SQLiteSession("s1", path=tmp_path / "memory.db").get_items())
    assert [m.get("content") for m in stored] == ["hello", "answer 1", "again", "answer 2"]


def test_a_paused_run_saves_what_it_has_and_its_resume_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    agent = Agent(
        name="a",
        instructions="Send things.",
        tools=[send],
        client=ScriptedModel([call("send", {"text": "hi"}), say("done")]),
    )
    runner = Runner()
    paused = runner.run_sync(agent, "send hi", session=SQLiteSession("s2", path=path))
    assert paused.status is RunStatus.NEEDS_APPROVAL
    saved = asyncio.run(SQLiteSession("s2", path=path).get_items())
    assert saved[0]["content"] == "send hi" and saved[-1]["role"] == "assistant"
    state = paused.state
    state.approve(state.approvals()[0].call_id)
    done = runner.resume_sync(state, session=SQLiteSession("s2", path=path))
    assert done.status is RunStatus.COMPLETED
    stored = asyncio.run(SQLiteSession("s2", path=path).get_items())
    assert [m["role"] for m in stored] == [m["role"] for m in done.messages]  # each message exactly once


def test_a_session_ended_by_a_final_answer_call_replays_and_stays_untainted(tmp_path: Path) -> None:
    """The final_answer turn's calls all get replies (OpenAI rejects tool_calls without them), and those
    replies, written by the runner, do not make the next run treat the session as holding tool output."""
    import pydantic

    class Sum(pydantic.BaseModel):
        total: int

    path = tmp_path / "memory.db"
    answering = Agent(
        name="a",
        tools=[add],
        output_type=Sum,
        client=ScriptedModel([calls(("final_answer", {"total": 3}, "c1"), ("add", {"a": 1, "b": 2}, "c2"))]),
    )
    first = Runner().run_sync(answering, "1 + 2?", session=SQLiteSession("s4", path=path))
    assert first.final_output == Sum(total=3)
    stored = asyncio.run(SQLiteSession("s4", path=path).get_items())
    asked = {c["id"] for m in stored for c in m.get("tool_calls") or []}
    assert asked == {"c1", "c2"} == {m["tool_call_id"] for m in stored if m["role"] == "tool"}

    script = [say("(the first run's turn)"), call("send", {"text": "hi"}), say("done")]
    sender = Agent(name="b", tools=[send], client=ScriptedModel(script))
    second = Runner().run_sync(sender, "send hi", session=SQLiteSession("s4", path=path))
    assert not second.state.tainted
    assert second.status is RunStatus.NEEDS_APPROVAL  # send's own rule; taint would add nothing here

    asyncio.run(
        SQLiteSession("s4", path=path).add_items([{"role": "tool", "tool_call_id": "c9", "content": "x"}])
    )
    third = Runner().run_sync(sender, "send hi", session=SQLiteSession("s4", path=path))
    assert third.state.tainted  # a real tool result in the history does taint


def words(messages: list[dict]) -> int:  # type: ignore[type-arg]
    """A token counter for the context-budget tests: words plus a few per message."""
    return sum(len(str(m.get("content") or "").split()) + 4 for m in messages)


def long_session(path: Path, name: str) -> SQLiteSession:
    """A session whose 12 turns do not fit a 200-token window beside a 40-token reply budget."""
    session = SQLiteSession(name, path=path)
    asyncio.run(
        session.add_items(
            [
                {"role": "user" if i % 2 == 0 else "assistant", "content": f"hello number {i} " * 10}
                for i in range(12)
            ]
        )
    )
    return session


def test_a_context_budget_summarises_old_turns_before_the_model_call(tmp_path: Path) -> None:
    from switchyard.agents.memory.context_budget import ContextBudget

    summaries: list[int] = []

    def summarise(previous: str | None, messages: list[dict]) -> str:  # type: ignore[type-arg]
        summaries.append(len(messages))
        return "earlier: the user said hello many times"

    session = long_session(tmp_path / "memory.db", "s3")
    requests: list[ModelRequest] = []

    def answer(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        return say("ok")

    budget = ContextBudget(count_tokens=words, context_window=200, reply_budget=40, summariser=summarise)
    agent = Agent(name="a", instructions="Be brief.", client=ScriptedModel([answer]))
    result = Runner(context_budget=budget).run_sync(agent, "and now?", session=session)
    assert result.status is RunStatus.COMPLETED and summaries  # the history did not fit: it was summarised
    sent = requests[0].messages
    assert words(sent) <= 160
    assert sent[0]["content"].startswith("Be brief.")
    assert any("earlier: the user said hello" in str(m.get("content")) for m in sent)
    assert sent[-1] == {"role": "user", "content": "and now?"}  # the newest turn verbatim
    assert result.state.summary is not None and result.state.summary["covered"] > 0


def test_summaries_count_toward_the_runs_token_and_cost_limits(tmp_path: Path) -> None:
    """A summary written to fit the run's context is spent on the run: its tokens and its model's price count,
    and a summary that exhausts the budget ends the run before the model is called."""
    from switchyard.agents import RunLimits
    from switchyard.agents.chat_model import ChatReply
    from switchyard.agents.limits import Price, PriceTable
    from switchyard.agents.memory.context_budget import ContextBudget
    from switchyard.agents.model import ModelUsage

    def summarise(previous: str | None, messages: list[dict]) -> ChatReply:  # type: ignore[type-arg]
        return ChatReply("earlier: hellos", ModelUsage(input_tokens=300, output_tokens=20), model="small")

    budget = ContextBudget(count_tokens=words, context_window=200, reply_budget=40, summariser=summarise)
    prices = PriceTable({"small": Price(1.0, 2.0), "big": Price(10.0, 20.0)})
    model = ScriptedModel([say("ok")], repeat_last=True)
    agent = Agent(name="a", model="big", client=model)
    runner = Runner(context_budget=budget, prices=prices, limits=RunLimits(max_tokens=1000))
    result = runner.run_sync(agent, "and now?", session=long_session(tmp_path / "m.db", "s6"))
    assert result.status is RunStatus.COMPLETED
    # The summary (300 + 20, priced as "small") and the answer (say(): 10 + 5, priced as "big").
    assert (result.usage.input_tokens, result.usage.output_tokens) == (310, 25)
    assert result.cost == pytest.approx((300 * 1.0 + 20 * 2.0 + 10 * 10.0 + 5 * 20.0) / 1e6)
    # The model call was told what the summary left of the token budget.
    assert model.requests[0].max_tokens is not None and model.requests[0].max_tokens <= 1000 - 320

    untouched = ScriptedModel([say("never")])
    capped = Runner(context_budget=budget, limits=RunLimits(max_tokens=300)).run_sync(
        Agent(name="a", client=untouched), "and now?", session=long_session(tmp_path / "n.db", "s7")
    )
    assert capped.status is RunStatus.MAX_TOKENS and capped.usage.total_tokens == 320
    assert untouched.requests == []  # the summary spent the budget: no model call was made


def test_a_new_run_on_a_session_left_by_a_stopped_run_replies_to_its_unanswered_calls(tmp_path: Path) -> None:
    """A run the loop detector stopped leaves its last turn's call unanswered (a resume would run it); the
    next run on the session must not send tool_calls without replies, which OpenAI-style APIs reject."""
    from switchyard.agents import RunLimits
    from switchyard.agents.transcript import STOPPED_BEFORE_RUN

    path = tmp_path / "memory.db"
    looping = Agent(
        name="a", tools=[add], client=ScriptedModel([call("add", {"a": 1, "b": 1})], repeat_last=True)
    )
    stopped = Runner(limits=RunLimits(loop_threshold=2)).run_sync(
        looping, "loop", session=SQLiteSession("s5", path=path)
    )
    assert stopped.status is RunStatus.LOOP_DETECTED
    stored = asyncio.run(SQLiteSession("s5", path=path).get_items())
    assert stored[-1]["role"] == "assistant" and stored[-1]["tool_calls"]  # unanswered: the session is a log

    model = ScriptedModel([say("hello again")], repeat_last=True)
    second = Runner().run_sync(
        Agent(name="a", tools=[add], client=model), "hi", session=SQLiteSession("s5", path=path)
    )
    assert second.final_output == "hello again"
    sent = model.requests[0].messages[1:]
    for index, message in enumerate(sent):  # every call is answered by the tool replies right after it
        asked = [c["id"] for c in message.get("tool_calls") or []]
        following = sent[index + 1 : index + 1 + len(asked)]
        assert [(m["role"], m.get("tool_call_id")) for m in following] == [("tool", i) for i in asked]
    assert sent[-2] == {"role": "tool", "tool_call_id": "call_add_0", "content": STOPPED_BEFORE_RUN}
    after = asyncio.run(SQLiteSession("s5", path=path).get_items())
    assert after == [
        *stored,
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello again"},
    ]
