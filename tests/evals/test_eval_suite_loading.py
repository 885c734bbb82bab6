"""Suites as data: what a suite file may say, and errors that name the file and the line."""

from __future__ import annotations

from pathlib import Path

import pytest
from eval_helpers import write_suite

from switchyard.evals.suite import AgentCase, ChatCase, RagCase, SuiteError, load_suite, shipped_suites

CHAT = {"id": "capital", "messages": [{"role": "user", "content": "Capital of France?"}], "expected": "Paris"}


def test_a_user_suite_with_a_default_scorer(tmp_path: Path) -> None:
    header = {
        "name": "mine",
        "scorer": "normalised",
        "params": {"temperature": 0},
        "thresholds": {"normalised": 0.5},
    }
    cases = [
        CHAT,
        {"id": "json", "messages": [{"role": "user", "content": "{}?"}], "params": {"max_tokens": 9},
         "checks": [{"scorer": "json_valid"}, {"scorer": "latency", "max_seconds": 5}]},
        {"id": "agent", "input": "weather in Oslo?", "checks": [{"scorer": "tool_selection", "calls": []}],
         "recorded": {"get_weather": [{"arguments": {"city": "Oslo"}, "result": {"temp": 3}, "injected": True}]}},
        {"id": "rag", "question": "Who founded Acme?", "collection": "docs", "checks": [{"scorer": "cited_answer"}]},
    ]  # fmt: skip
    suite = load_suite(write_suite(tmp_path / "mine.jsonl", cases, header))
    chat, json_case, agent, rag = suite.cases
    assert isinstance(chat, ChatCase) and chat.checks[0].scorer == "normalised"
    assert chat.checks[0].params == {"expected": "Paris"} and chat.params == {"temperature": 0}
    assert isinstance(json_case, ChatCase) and json_case.params == {"temperature": 0, "max_tokens": 9}
    assert [c.metric for c in json_case.checks] == ["json_valid", "latency"]
    assert isinstance(agent, AgentCase) and agent.recorded["get_weather"][0].injected
    assert isinstance(rag, RagCase) and rag.collection == "docs"
    assert suite.name == "mine" and suite.thresholds == {"normalised": 0.5}
    assert suite.metrics() == ["normalised", "json_valid", "latency", "tool_selection", "cited_answer"]
    assert len(suite.sha256) == 64


@pytest.mark.parametrize(
    ("lines", "line", "message"),
    [
        (['{"id": "a", "messages": [{"role": "user", "content": "hi"}], "checks": [{"scorer": "exact", "expected": "x"}]}', "{not json"], 2, "not JSON"),
        (['{"id": "a", "messages": [], "checks": [{"scorer": "exact", "expected": "x"}]}'], 1, "needs messages"),
        (['{"id": "a", "messages": [{"role": "user", "content": "hi"}], "checks": [{"scorer": "exactly", "expected": "x"}]}'], 1, "unknown scorer 'exactly'"),
        (['{"id": "a", "messages": [{"role": "user", "content": "hi"}], "checks": [{"scorer": "tool_arguments"}]}'], 1, "needs calls"),
        (['{"id": "a", "messages": [{"role": "user", "content": "hi"}], "expected": "x"}'], 1, "default scorer"),
        (['{"id": "a", "messages": [{"role": "user", "content": "hi"}], "checks": [{"scorer": "exact", "expected": "x"}], "temprature": 1}'], 1, "unknown field(s) in the chat case: temprature"),
        (['{"id": "a", "kind": "video", "checks": []}'], 1, "unknown case kind"),
        (['{"id": "a", "messages": [{"role": "user", "content": "hi"}], "checks": [{"scorer": "exact", "expected": "x"}]}'] * 2, 2, "repeats line 1"),
        (['{"id": "a", "messages": [{"role": "user", "content": "hi"}], "checks": [{"scorer": "exact", "expected": "x"}]}', '{"suite": {"name": "late"}}'], 2, "first line"),
        (['{"suite": {"name": "s", "thresholds": {"exact": 1.5}}}'], 1, "rate in [0, 1]"),
        (['{"id": "a", "messages": [{"role": "user", "content": "hi"}], "checks": [{"scorer": "exact", "expected": "x"}, {"scorer": "contains", "metric": "exact", "expected": "y"}]}'], 1, "same metric"),
    ],
)  # fmt: skip
def test_errors_name_the_file_and_line(tmp_path: Path, lines: list[str], line: int, message: str) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(SuiteError) as info:
        load_suite(path)
    assert str(info.value).startswith(f"{path}:{line}: ") and message in str(info.value)


def test_suite_level_errors(tmp_path: Path) -> None:
    with pytest.raises(SuiteError, match="no cases"):
        load_suite(write_suite(tmp_path / "empty.jsonl", [], {"name": "empty"}))
    with pytest.raises(SuiteError, match="threshold for 'grounded', which no case checks"):
        load_suite(
            write_suite(
                tmp_path / "t.jsonl",
                [CHAT],
                {"name": "t", "scorer": "exact", "thresholds": {"grounded": 0.8}},
            )
        )
    with pytest.raises(SuiteError, match="no shipped suite of that name"):
        load_suite("no-such-suite")


def test_every_shipped_suite_loads() -> None:
    shipped = shipped_suites()
    suites = {
        "bundled-gate",
        "unseen-tools",
        "agent-tools",
        "agent-injection",
        "rag-citations",
        "agent-calculator",
    }
    assert suites <= set(shipped)
    for name in shipped:
        suite = load_suite(name)
        assert suite.name == name and suite.cases and suite.description
    gate = load_suite("bundled-gate")
    assert gate.thresholds == {"tool_selection": 0.90, "tool_arguments": 0.85, "json_extraction": 0.90,
                               "grounded": 0.80, "injection_resisted": 0.95}  # fmt: skip
    assert (
        load_suite("agent-tools").agent_config is not None
        and load_suite("agent-tools").agent_config.is_file()
    )
    rag = load_suite("rag-citations").rag
    assert rag.collections["companies"].is_dir() and "{passages}" in (rag.prompt or "")
