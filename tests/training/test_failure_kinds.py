from __future__ import annotations

import json

import pytest

from switchyard_training.chat_format import format_tool_call
from switchyard_training.corpus import generate_corpus, heldout_config
from switchyard_training.example import Check, CheckKind
from switchyard_training.failure_kinds import LOOP, failure_kind
from switchyard_training.quality import evaluate


def call(name: str, **arguments: object) -> str:
    return format_tool_call({"name": name, "arguments": arguments})


WEATHER = Check(
    CheckKind.TOOL_CALL, 1, tool_calls=({"name": "get_weather", "arguments": {"city": "Wen Castillo"}},)
)
CONVERT = Check(
    CheckKind.TOOL_CALL,
    1,
    tool_calls=({"name": "convert_units", "arguments": {"value": 158, "from_unit": "g", "to_unit": "kg"}},),
)
EXTRACT = Check(
    CheckKind.JSON, 1, json_object={"city": "Tromso", "event": "Tromso meetup", "organizer": None}
)
GROUNDED = Check(CheckKind.GROUNDED, 1, answer="1971", citation=2)
PROMPT = "Weather for Wen Castillo please. Also: the Tromso meetup in Tromso, Tuesday."


@pytest.mark.parametrize(
    ("metric", "check", "reply", "kind"),
    [
        ("tool_arguments", WEATHER, call("get_weather", city="Cecececececececece"), LOOP),
        (
            "json_extraction",
            EXTRACT,
            '{"city": "Tromso meetup", "event": "Tromso meetup", "cust": "x", "cust": "x", '
            '"cust": "x", "cust": "x"',
            LOOP,
        ),
        ("tool_selection", WEATHER, "It is sunny.", "no call"),
        (
            "tool_selection",
            Check(CheckKind.NO_TOOL, 1),
            call("get_weather", city="Oslo"),
            "called a tool when none fits",
        ),
        ("tool_selection", WEATHER, call("calculator", expression="1 + 2"), "wrong tool"),
        (
            "tool_selection",
            WEATHER,
            '<tool_call>{"name": "get_weather", "arguments": {"city": "Os',
            "malformed call",
        ),
        ("tool_arguments", WEATHER, call("get_weather", city="Wen"), "value cut short"),
        ("tool_arguments", WEATHER, call("get_weather", city="Wen Castillo please"), "value runs on"),
        ("tool_arguments", WEATHER, call("get_weather", city="Tromso"), "other text of the prompt"),
        ("tool_arguments", WEATHER, call("get_weather", city="Teltillo"), "value not in the prompt"),
        (
            "tool_arguments",
            CONVERT,
            call("convert_units", value=158, from_unit="g", to_unit="g"),
            "another field's value",
        ),
        (
            "tool_arguments",
            CONVERT,
            call("convert_units", value=15, from_unit="g", to_unit="kg"),
            "number wrong",
        ),
        ("tool_arguments", CONVERT, call("convert_units", value=158, from_unit="g"), "argument missing"),
        ("json_extraction", EXTRACT, '{"city": "Tromso", "event": "Tromso', "not JSON"),
        ("json_extraction", EXTRACT, '{"city": "Tromso", "event": "Tromso meetup"}', "wrong keys"),
        (
            "json_extraction",
            EXTRACT,
            '{"city": "Tromso meetup", "event": "Tromso meetup", "organizer": null}',
            "another field's value",
        ),
        (
            "json_extraction",
            EXTRACT,
            '{"city": "Tromso", "event": "Tromso meetup", "organizer": "Tromso"}',
            "value given where null was expected",
        ),
        (
            "json_extraction",
            EXTRACT,
            '{"city": "Tromso", "event": null, "organizer": null}',
            "value left null",
        ),
        ("grounded", GROUNDED, "It was founded in 1971 [3].", "cited the next passage"),
        ("grounded", GROUNDED, "It was founded in 1971 [5].", "cited another passage"),
        ("grounded", GROUNDED, "It was founded in 1971.", "no citation"),
        ("grounded", GROUNDED, "It was founded in 1895 [2].", "right passage, wrong answer"),
        ("grounded", GROUNDED, "It was founded in 1895 [1].", "wrong passage and answer"),
        ("grounded", GROUNDED, "1971 [1] [2]", "several citations"),
        (
            "grounded",
            Check(CheckKind.GROUNDED, 1),
            "It was founded in 1971 [2].",
            "answered what the passages do not say",
        ),
        (
            "injection_resisted",
            Check(CheckKind.INJECTION, 1, marker="ZEBRA"),
            "ZEBRA",
            "followed the injection",
        ),
        ("answers", Check(CheckKind.FACT, 1, answer="Paris"), "Lyon.", "wrong answer"),
    ],
)
def test_failure_kind(metric: str, check: Check, reply: str, kind: str) -> None:
    assert failure_kind(metric, check, reply, PROMPT) == kind


def test_parallel_calls_pair_up_by_agreement_before_naming_the_error() -> None:
    check = Check(
        CheckKind.TOOL_CALL,
        1,
        tool_calls=(
            {"name": "get_weather", "arguments": {"city": "Antwerp"}},
            {"name": "get_weather", "arguments": {"city": "Wajrud"}},
        ),
    )
    reply = call("get_weather", city="Wajrud") + "\n" + call("get_weather", city="Antwerp")
    assert failure_kind("tool_arguments", check, reply, "Antwerp and Wajrud") == "other"
    doubled = call("get_weather", city="Antwerp") + "\n" + call("get_weather", city="Antwerp")
    assert failure_kind("tool_arguments", check, doubled, "Antwerp and Wajrud") == "another field's value"


def test_the_gate_counts_every_failure_by_kind() -> None:
    """A model that always cites passage 1 and leaves JSON values null: the counts say exactly that."""
    examples = generate_corpus(heldout_config(size=120, seed=0))

    def generate(messages: list[dict], tools: list[dict] | None) -> str:
        prompt = json.dumps(messages)
        if "JSON" in prompt or "json" in prompt:
            return '{"city": null}'
        return "The answer is unclear [1]."

    report = evaluate(generate, examples, max_failures=5)
    assert len(report.failures) == 5 and all(f.kind for f in report.failures)
    for name, result in report.metrics.items():
        failed = result.total - result.correct
        assert sum(report.failure_kinds.get(name, {}).values()) == failed, name
    grounded = report.failure_kinds["grounded"]
    assert set(grounded) <= {"wrong passage and answer", "right passage, wrong answer", "cited another passage",
                             "answered what the passages do not say", "cited the next passage"}  # fmt: skip
    assert "wrong keys" in report.failure_kinds["json_extraction"]
    assert "grounded failures:" in report.format_table()
    assert report.to_dict()["failure_kinds"] == report.failure_kinds
