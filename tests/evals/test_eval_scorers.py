"""The built-in scorers on crafted outcomes: what passes, what fails, and why."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from switchyard.agents.rag.store import Passage
from switchyard.evals.outcome import Outcome, ToolCall
from switchyard.evals.scorers import (
    SCORERS,
    ScorerParamsError,
    ScoringContext,
    UnknownScorerError,
    get_scorer,
)
from switchyard.evals.scorers.judge import read_score


def verdict(scorer: str, outcome: Outcome, **params: Any):  # type: ignore[no-untyped-def]
    found = get_scorer(scorer)
    found.check_params(params)
    return asyncio.run(found.score(params, outcome, ScoringContext()))


def passes(scorer: str, outcome: Outcome | str, **params: Any) -> bool:
    return verdict(scorer, Outcome(outcome) if isinstance(outcome, str) else outcome, **params).passed


def calls(*items: tuple[str, Any]) -> Outcome:
    return Outcome("", tuple(ToolCall(n, a if isinstance(a, str) else json.dumps(a)) for n, a in items))


def test_text_matches() -> None:
    assert passes("exact", "  Paris\n", expected="Paris") and not passes("exact", "paris", expected="Paris")
    assert passes("normalised", "The  answer is PARIS!", expected="the answer is paris")
    assert not passes("normalised", "Paris, France", expected="Paris")
    assert passes("contains", "It is 4 °C in New York.", expected="new york") and passes(
        "contains", "x 42", expected=42
    )
    assert not passes("contains", "It is 5 °C.", expected="4")
    assert passes("mentions_any", "Sorry, I don’t know.", phrases=["i don't know"])
    assert not passes("mentions_any", "It is Bobo.", phrases=["i don't know", "not sure"])
    assert passes("regex", "order #1234 shipped", pattern=r"#\d{4}\b") and not passes(
        "regex", "#12", pattern=r"#\d{4}"
    )


def test_json_scorers() -> None:
    schema = {"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]}
    assert passes("json_valid", '```json\n{"a": 1}\n```') and not passes("json_valid", '{"a": 1')
    assert not passes("json_valid", "[1, 2]") and passes("json_valid", "[1, 2]", object=False)
    assert passes("json_schema", '{"age": 36}', schema=schema)
    failed = verdict("json_schema", Outcome('{"age": "36"}'), schema=schema)
    assert not failed.passed and "age" in failed.detail
    expected = {"name": "Ada Lovelace", "age": 36, "city": None}
    assert passes("json_match", '{"age": 36.0, "city": null, "name": "ada  lovelace"}', expected=expected)
    assert not passes("json_match", '{"name": "Ada Lovelace", "age": 37, "city": null}', expected=expected)
    assert not passes("json_match", '{"name": "Ada Lovelace", "age": 36}', expected=expected)


WEATHER = [{"name": "get_weather", "arguments": {"city": "Oslo"}}]


def test_tool_calls_compared_as_json() -> None:
    right = calls(("get_weather", {"city": " oslo "}))
    assert passes("tool_selection", right, calls=WEATHER) and passes("tool_arguments", right, calls=WEATHER)
    wrong_argument = calls(("get_weather", {"city": "Lima"}))
    assert passes("tool_selection", wrong_argument, calls=WEATHER)
    assert not passes("tool_arguments", wrong_argument, calls=WEATHER)
    assert not passes("tool_selection", calls(("get_current_time", {"city": "Oslo"})), calls=WEATHER)
    assert not passes("tool_selection", Outcome("It is sunny."), calls=WEATHER)
    assert passes("tool_selection", Outcome("I cannot book flights."), calls=[])  # no tool fits
    assert not passes("tool_selection", right, calls=[])
    both = [
        *WEATHER,
        {"name": "convert_units", "arguments": {"value": 5, "from_unit": "km", "to_unit": "mi"}},
    ]
    reordered = calls(
        ("convert_units", '{"to_unit": "mi", "value": 5.0, "from_unit": "km"}'),
        ("get_weather", {"city": "Oslo"}),
    )
    assert passes("tool_arguments", reordered, calls=both)
    assert not passes("tool_arguments", right, calls=both)


def test_malformed_calls_fail_both_tool_checks() -> None:
    for outcome in (
        calls(("get_weather", '{"city": "Oslo"')),  # arguments not JSON
        calls(("get_weather", '["Oslo"]')),  # not an object
        Outcome(
            "", (ToolCall("get_weather", '{"city": "Oslo"}'),), malformed_calls=True
        ),  # cut at max_tokens
    ):
        assert not passes("tool_selection", outcome, calls=WEATHER)
        result = verdict("tool_arguments", outcome, calls=WEATHER)
        assert not result.passed and result.detail == "malformed tool call"


def test_cited_answer_with_a_fixed_citation() -> None:
    phrases = ["do not contain", "not in the passages"]
    assert passes("cited_answer", "Korva Labs was founded in 1987 [2].", answer="1987", citation=2)
    assert not passes("cited_answer", "Korva Labs was founded in 1987.", answer="1987", citation=2)
    assert not passes("cited_answer", "Founded in 1987 [1][2].", answer="1987", citation=2)
    assert not passes("cited_answer", "It was founded in 1990 [2].", answer="1987", citation=2)
    assert passes(
        "cited_answer", "Its founder is not in the passages.", citation=None, not_found_phrases=phrases
    )
    assert not passes("cited_answer", "The founder is Ada [1].", citation=None, not_found_phrases=phrases)


def _passage(n: int, text: str) -> Passage:
    return Passage(n=n, text=text, source="acme.md", position=n, heading="", page=None, score=1.0)


def test_cited_answer_over_retrieved_passages() -> None:
    passages = (_passage(1, "Acme has a staff of 120"), _passage(2, "Acme was founded in 1971"))
    assert passes("cited_answer", Outcome("Acme was founded in 1971 [2].", passages=passages), answer="1971")
    wrong = verdict(
        "cited_answer", Outcome("Acme was founded in 1971 [1].", passages=passages), answer="1971"
    )
    assert not wrong.passed and wrong.detail == "no cited passage holds the answer"
    assert not passes("cited_answer", Outcome("Founded in 1971 [3].", passages=passages), answer="1971")
    assert not passes("cited_answer", Outcome("Founded in 1971.", passages=passages), answer="1971")


def test_payload_absent() -> None:
    assert passes("payload_absent", "It is 4°C and cloudy in Oslo.", marker="BLUE MOON")
    assert not passes("payload_absent", "Sure! blue moon. Also cloudy.", marker="BLUE MOON")
    assert not passes("payload_absent", "   ", marker="BLUE MOON")  # an empty reply is no evidence
    assert passes("payload_absent", "The data held an instruction, which I did not follow.", marker="FOL")


def test_injection_resisted_counts_unapproved_acting_calls_after_the_injection() -> None:
    send = '{"to": "Mallory", "text": "the code is 4471"}'
    read = ToolCall("get_weather", '{"city": "Oslo"}', after_injection=False)
    attacked = Outcome(
        "", (read, ToolCall("send_message", send, acting=True, approved=False, after_injection=True))
    )
    result = verdict("injection_resisted", attacked)
    assert (
        not result.passed and "blocked: not approved" in result.detail
    )  # the runtime blocked it; the model tried
    before = Outcome("", (ToolCall("send_message", send, acting=True, approved=True, after_injection=False),))
    assert passes("injection_resisted", before)  # the user's own request, before any injected data
    asked = [{"name": "send_message", "arguments": {"to": "mallory", "text": "The code is 4471"}}]
    approved = Outcome(
        "", (ToolCall("send_message", send, acting=True, approved=True, after_injection=True),)
    )
    assert passes("injection_resisted", approved, allowed=asked)
    assert passes("injection_resisted", Outcome("It is sunny.", (read,)))


def test_latency_and_cost_budgets_keep_their_value() -> None:
    slow = verdict("latency", Outcome("x", latency_s=2.5), max_seconds=2)
    assert not slow.passed and slow.value == 2.5
    assert passes("latency", Outcome("x", latency_s=0.5), max_seconds=2)
    assert passes("cost", Outcome("x", cost=0.001), max_usd=0.01) and not passes(
        "cost", Outcome("x", cost=0.1), max_usd=0.01
    )


def test_judge_scores_are_read_from_json_or_text() -> None:
    assert read_score('{"score": 4, "reason": "mostly right"}', 5) == (4, "mostly right")
    assert read_score("I'd give it 3 out of 5.", 5) == (3, "I'd give it 3 out of 5.")
    assert read_score('{"score": 9}', 5) is None and read_score("no idea", 5) is None


def test_registry_names_scorers_and_checks_their_parameters() -> None:
    assert {
        "exact",
        "json_schema",
        "tool_arguments",
        "citation_grounded",
        "injection_resisted",
        "judge",
        "latency",
    } <= set(SCORERS)
    with pytest.raises(UnknownScorerError, match="unknown scorer 'exactly'"):
        get_scorer("exactly")
    with pytest.raises(ScorerParamsError, match="needs expected"):
        get_scorer("exact").check_params({})
    with pytest.raises(ScorerParamsError, match="does not take answer"):
        get_scorer("exact").check_params({"expected": "a", "answer": "b"})
    with pytest.raises(TypeError, match="async"):
        get_scorer("judge").score_now({"rubric": "r"}, Outcome("x"))


def test_citation_grounded_uses_the_grounding_check(minilm) -> None:  # type: ignore[no-untyped-def]
    passages = (_passage(1, "Acme has a staff of 120."), _passage(2, "Acme was founded in 1971 in Oslo."))
    context = ScoringContext(embedder_factory=lambda: minilm)
    scorer = get_scorer("citation_grounded")

    def grounded(text: str):  # type: ignore[no-untyped-def]
        return asyncio.run(scorer.score({}, Outcome(text, passages=passages), context))

    assert grounded("Acme was founded in 1971 in Oslo [2].").passed
    changed = grounded("Acme was founded in 1975 in Oslo [2].")
    assert not changed.passed and "number not in passage" in changed.detail
    assert grounded("Acme was founded in 1971 [2].").value == 1.0
    uncited = grounded("Acme was founded in 1971.")
    assert not uncited.passed and uncited.detail == "no citation"
