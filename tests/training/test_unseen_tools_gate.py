"""The unseen-tools table of `eval-default`: graded apart from the gate (no conversation counts in both), each
rate with its Wilson interval, in the report, the JSON and the model card."""

from __future__ import annotations

from typing import Any

import pytest

from switchyard.evals.stats import wilson_interval
from switchyard_training.chat_format import format_tool_call
from switchyard_training.example import Category, Check, CheckKind, Example
from switchyard_training.gate_card import UNSEEN_SECTION, unseen_section
from switchyard_training.quality import METRICS, UNSEEN_METRICS, MetricResult, QualityReport, evaluate

TIDE = {"name": "log_tide_reading", "arguments": {"harbour": "Vellmar Quay", "height_m": 2.4, "rising": True}}
LANTERN = {
    "name": "order_lantern_oil",
    "arguments": {"litres": 3, "grade": "amber", "depots": ["North", "Kell"]},
}
WEATHER = {"name": "get_weather", "arguments": {"city": "Oslo"}}


def _tool(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": f"{name} tool", "parameters": {}}}


def _example(category: Category, request: str, check: Check, tools: tuple[str, ...]) -> Example:
    return Example(
        category=category,
        messages=[{"role": "user", "content": request}, {"role": "assistant", "content": "gold"}],
        tools=[_tool(name) for name in tools],
        checks=[check],
    )


def _call(request: str, *calls: dict[str, Any]) -> Example:
    category = Category.OPEN_TOOL_PARALLEL if len(calls) > 1 else Category.OPEN_TOOL_CALL
    tools = ("log_tide_reading", "order_lantern_oil", "ring_bell")
    return _example(category, request, Check(CheckKind.TOOL_CALL, turn=1, tool_calls=calls), tools)


def _no_call(request: str) -> Example:
    return _example(Category.OPEN_NO_TOOL, request, Check(CheckKind.NO_TOOL, turn=1), ("ring_bell",))


class Scripted:
    """A scripted model: a fixed reply per request (the last user message), counting the prompts it saw."""

    def __init__(self, replies: dict[str, str]) -> None:
        self.replies = replies
        self.prompts: list[str] = []

    def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        request = messages[-1]["content"]
        self.prompts.append(request)
        return self.replies[request]


def _reply(*calls: dict[str, Any]) -> str:
    return "".join(format_tool_call(c) for c in calls)


def _call_then_thanks() -> Example:
    """A call, its result read back (the value the answer must hold), then thanks: no call fits."""
    messages = [
        {"role": "user", "content": "tide 3"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "type": "function", "function": TIDE}],
        },
        {"role": "tool", "tool_call_id": "c1", "name": TIDE["name"], "content": '{"logged": "T-77"}'},
        {"role": "assistant", "content": "Logged as T-77."},
        {"role": "user", "content": "thanks"},
        {"role": "assistant", "content": "You're welcome."},
    ]
    checks = [
        Check(CheckKind.TOOL_CALL, turn=1, tool_calls=(TIDE,)),
        Check(CheckKind.FACT, turn=3, answer="T-77"),
        Check(CheckKind.NO_TOOL, turn=5),
    ]
    return Example(Category.OPEN_TOOL_CALL, messages, [_tool(TIDE["name"])], checks)


def _fact_without_tools() -> Example:
    """A plain question among unfitting tools: its no-call check counts, its fact-table answer is not a tool's."""
    example = _no_call("capital")
    return Example(example.category, example.messages, example.tools,
                   [*example.checks, Check(CheckKind.FACT, turn=1, answer="Paris")])  # fmt: skip


UNSEEN = [
    _call_then_thanks(),
    _fact_without_tools(),
    _call("tide 1", TIDE),
    _call("tide 2", TIDE),
    _call("lantern", LANTERN),
    _call("both", TIDE, LANTERN),
    _no_call("poem"),
    _no_call("joke"),
]
DEMO = [
    _example(Category.TOOL_CALL, "weather", Check(CheckKind.TOOL_CALL, turn=1, tool_calls=(WEATHER,)), ()),
    _example(Category.NO_TOOL, "hello", Check(CheckKind.NO_TOOL, turn=1), ("get_weather",)),
]
MODEL = Scripted(
    {
        "tide 3": _reply(TIDE),
        '{"logged": "T-77"}': "It is logged as T-77.",
        "thanks": _reply(TIDE),  # a call where none fits
        "capital": "Paris.",
        "tide 1": _reply(TIDE),
        "tide 2": _reply(
            {**TIDE, "arguments": {**TIDE["arguments"], "height_m": 4.2}}
        ),  # right tool, wrong value
        "lantern": _reply(TIDE),  # wrong tool
        "both": _reply(LANTERN, TIDE),  # the right set, in another order
        "poem": "Here is a poem.",
        "joke": _reply(TIDE),  # a call where none fits
        "weather": _reply(WEATHER),
        "hello": _reply(WEATHER),
    }
)


def _counts(report: QualityReport) -> dict[str, tuple[int, int]]:
    return {name: (m.correct, m.total) for name, m in report.metrics.items()}


def test_the_gate_and_the_unseen_table_never_grade_the_same_conversation() -> None:
    model = Scripted(MODEL.replies)
    gate = evaluate(model, [*DEMO, *UNSEEN])
    assert sorted(model.prompts) == ["hello", "weather"], "the gate prompts no turn over generated tools"
    assert _counts(gate) == {
        "tool_selection": (1, 2),
        "tool_arguments": (1, 1),
        "json_extraction": (0, 0),
        "grounded": (0, 0),
        "injection_resisted": (0, 0),
        "answers": (0, 0),
    }
    assert gate.graded_turns == 2 and gate.unseen is None

    model = Scripted(MODEL.replies)
    unseen = evaluate(model, [*DEMO, *UNSEEN], metrics=UNSEEN_METRICS)
    assert len(model.prompts) == 10 and set(model.prompts) == set(MODEL.replies) - {"weather", "hello"}
    assert _counts(unseen) == {
        "unseen_tool_selection": (3, 4),
        "unseen_tool_arguments": (2, 4),
        "unseen_no_call": (2, 4),
        "unseen_parallel": (1, 1),
        "unseen_answers": (1, 1),
    }
    assert {m.name for m in METRICS}.isdisjoint(m.name for m in UNSEEN_METRICS)
    assert set(unseen.failure_kinds) == {"unseen_tool_selection", "unseen_tool_arguments", "unseen_no_call"}


def test_each_unseen_rate_has_its_wilson_interval() -> None:
    unseen = evaluate(MODEL, UNSEEN, metrics=UNSEEN_METRICS)
    selection = unseen.metrics["unseen_tool_selection"]
    assert selection.interval == wilson_interval(3, 4)
    assert (selection.interval.low, selection.interval.high) == pytest.approx((0.3006, 0.9544), abs=1e-4)
    assert not unseen.passed, "3 of 4 misses the 0.90 target"
    no_trials = evaluate(MODEL, UNSEEN[2:], metrics=UNSEEN_METRICS).metrics["unseen_answers"]
    assert no_trials.total == 0 and no_trials.interval == wilson_interval(0, 0)  # (0, 1)

    passing = QualityReport({"tool_selection": MetricResult("tool_selection", 1, 1, 0.90)}, 1, unseen=unseen)
    assert passing.passed, "the unseen table's verdict is not the gate's"
    gate = evaluate(MODEL, DEMO)
    gate.unseen = unseen
    raw = gate.to_dict()
    row = raw["unseen"]["metrics"]["unseen_tool_selection"]
    assert row["correct"] == 3 and row["total"] == 4 and row["target"] == 0.90
    assert (row["low"], row["high"]) == (selection.interval.low, selection.interval.high)
    assert "unseen_tool_selection" not in raw["metrics"] and "unseen" not in raw["unseen"]
    table = gate.format_table()
    assert "unseen_tool_selection    0.750  [0.301, 0.954]       4    0.90  FAIL" in table
    assert "unseen tools: targets MISSED over 10 graded turns" in table

    card = unseen_section(unseen, "switchyard eval-default --unseen-examples 8", 8)
    assert card.startswith(UNSEEN_SECTION + "\n") and "on 8 conversations" in card
    assert "| unseen_tool_selection | 0.750 | [0.301, 0.954] | 3 / 4 | 0.90 | **fail** |" in card
    assert "| unseen_parallel | 1.000 | [0.207, 1.000] | 1 / 1 | - |  |" in card
