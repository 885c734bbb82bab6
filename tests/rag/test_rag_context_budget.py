"""Context budgeting: nothing changes while the conversation fits; past the budget, old turns are summarised
and the newest kept verbatim, with counts from the model's tokenizer."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest
from tokenizer_factory import build_tokenizer

from switchyard.agents.memory.context_budget import (
    SUMMARY_PREFIX,
    ContextBudget,
    ContextOverflowError,
    fit_session,
    tokenizer_counter,
)
from switchyard.agents.memory.session import RunningSummary, SQLiteSession
from switchyard.models.tokenizer import load_tokenizer

SYSTEM = [{"role": "system", "content": "You are a terse assistant."}]


@pytest.fixture(scope="module")
def counter(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    folder = tmp_path_factory.mktemp("tok")
    build_tokenizer(folder, vocab_size=320)
    return tokenizer_counter(load_tokenizer(folder))


def history(turns: int) -> list[dict]:
    messages = []
    for i in range(turns):
        messages.append({"role": "user", "content": f"question number {i} about the weather in town {i}"})
        messages.append({"role": "assistant", "content": f"answer number {i}: it is sunny in town {i}"})
    return messages


class RecordingSummariser:
    def __init__(self) -> None:
        self.calls: list[tuple[str | None, int]] = []

    def __call__(self, previous: str | None, messages: Sequence[dict]) -> str:
        self.calls.append((previous, len(messages)))
        return f"{len(messages)} older messages about weather"


def test_summarisation_starts_exactly_when_budget_is_exceeded(counter) -> None:  # type: ignore[no-untyped-def]
    messages = history(6)
    full = counter(SYSTEM + messages)
    summariser = RecordingSummariser()

    fits = ContextBudget(counter, context_window=full + 100, reply_budget=100, summariser=summariser)
    fitted = asyncio.run(fits.fit(SYSTEM, messages))
    assert fitted.messages == SYSTEM + messages and not fitted.summarised and fitted.tokens == full
    assert summariser.calls == []

    over = ContextBudget(counter, context_window=full + 99, reply_budget=100, summariser=summariser)
    fitted = asyncio.run(over.fit(SYSTEM, messages))
    assert fitted.summarised and len(summariser.calls) >= 1
    assert fitted.tokens == counter(fitted.messages) <= full - 1
    assert fitted.messages[0] == SYSTEM[0]
    assert fitted.messages[1]["content"].startswith(SUMMARY_PREFIX)
    kept = fitted.messages[2:]
    assert kept == messages[len(messages) - len(kept) :] and kept[-1] == messages[-1]  # newest verbatim
    assert fitted.summary is not None and fitted.summary.covered == len(messages) - len(kept)


def test_tight_budget_keeps_only_the_newest_and_overflow_raises(counter) -> None:  # type: ignore[no-untyped-def]
    messages = history(8)
    newest_only = counter([*SYSTEM, {"role": "system", "content": SUMMARY_PREFIX + "x"}, messages[-1]])
    budget = ContextBudget(
        counter,
        context_window=newest_only + 40,
        reply_budget=40,
        summariser=lambda p, m: "x",
        summary_reserve=1,
    )
    fitted = asyncio.run(budget.fit(SYSTEM, messages))
    assert fitted.messages[-1] == messages[-1] and len(fitted.messages) == 3
    tiny = ContextBudget(counter, context_window=30, reply_budget=10, summariser=lambda p, m: "x")
    with pytest.raises(ContextOverflowError):
        asyncio.run(tiny.fit(SYSTEM, messages))
    calls: list[int] = []
    single = ContextBudget(
        counter, context_window=30, reply_budget=10, summariser=lambda p, m: str(calls.append(len(m)))
    )
    with pytest.raises(ContextOverflowError, match="budget is 20"):
        asyncio.run(single.fit(SYSTEM, messages[-1:]))
    assert calls == []  # nothing older to summarise: no pointless summariser call


def test_running_summary_is_reused_and_persisted(tmp_path: Path, counter) -> None:  # type: ignore[no-untyped-def]
    async def scenario() -> None:
        session = SQLiteSession("budget", tmp_path / "m.db")
        await session.add_items(history(6))
        summariser = RecordingSummariser()

        async def async_summariser(previous: str | None, messages: Sequence[dict]) -> str:
            return summariser(previous, messages)

        full = counter(SYSTEM + history(6))
        budget = ContextBudget(counter, context_window=full, reply_budget=60, summariser=async_summariser)
        first = await fit_session(budget, session, SYSTEM)
        assert first.summarised and await session.get_summary() == first.summary
        again = await fit_session(budget, session, SYSTEM)  # same history: the stored summary suffices
        assert not again.summarised and again.messages == first.messages and len(summariser.calls) == 1
        await session.add_items(history(3))
        third = await fit_session(budget, session, SYSTEM)
        assert third.summarised and summariser.calls[-1][0] == first.summary.text  # extends the old summary
        assert isinstance(third.summary, RunningSummary) and third.summary.covered > first.summary.covered

    asyncio.run(scenario())


def test_recalled_facts_are_added_and_counted(counter) -> None:  # type: ignore[no-untyped-def]
    budget = ContextBudget(
        counter,
        context_window=4096,
        reply_budget=100,
        summariser=lambda p, m: "",
        recall=lambda query: ["The user's dog is called Biscuit."] if "dog" in query else [],
    )
    fitted = asyncio.run(budget.fit(SYSTEM, [{"role": "user", "content": "what is my dog's name?"}]))
    assert fitted.recalled == ["The user's dog is called Biscuit."]
    assert "Biscuit" in fitted.messages[1]["content"] and fitted.tokens == counter(fitted.messages)


def test_cut_never_orphans_a_tool_result(counter) -> None:  # type: ignore[no-untyped-def]
    messages: list[dict] = []
    for i in range(5):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
        messages += [
            {"role": "user", "content": f"look up item {i} for me please"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": f"item {i} is in stock"},
            {"role": "assistant", "content": f"item {i} is available"},
        ]
    full = counter(SYSTEM + messages)
    for window in range(full // 3, full, 7):
        budget = ContextBudget(counter, window + 50, 50, summariser=lambda p, m: "s", summary_reserve=4)
        try:
            fitted = asyncio.run(budget.fit(SYSTEM, messages))
        except ContextOverflowError:
            continue
        tail = [m for m in fitted.messages if m["role"] != "system"]
        assert tail[0]["role"] != "tool" and fitted.tokens <= window
