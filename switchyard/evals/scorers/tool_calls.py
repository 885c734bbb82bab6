"""Tool use: the reply called the right tools (names), with the right arguments (compared as JSON).

Calls are read from the API's `tool_calls` (the server parsed the model's format), so one scorer serves every
model family. A call whose arguments are not a JSON object, or a reply cut off inside a call, is malformed and
fails both checks, as a client could not run it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from switchyard.evals.outcome import Outcome
from switchyard.evals.scorers.base import ScoringContext, Verdict, scorer
from switchyard.evals.scorers.normal_form import normalize


def call_key(call: Mapping[str, Any]) -> str:
    """A call's comparison form: its name and its arguments in normal form, as one sortable string."""
    return json.dumps([call["name"], normalize(call.get("arguments", {}))], sort_keys=True)


def expected_names(calls: Sequence[Mapping[str, Any]]) -> list[str]:
    return sorted(str(c["name"]) for c in calls)


def tool_selection_ok(expected: Sequence[Mapping[str, Any]], outcome: Outcome) -> bool:
    """The set of called tool names is the expected one (none when `expected` is empty); malformed fails."""
    calls = outcome.parsed_calls()
    return calls is not None and sorted(c["name"] for c in calls) == expected_names(expected)


def tool_arguments_ok(expected: Sequence[Mapping[str, Any]], outcome: Outcome) -> bool:
    """Exactly the expected calls, names and arguments, in any order."""
    calls = outcome.parsed_calls()
    return calls is not None and sorted(map(call_key, calls)) == sorted(map(call_key, expected))


def _made(outcome: Outcome) -> str:
    if outcome.malformed_calls or outcome.parsed_calls() is None:
        return "malformed tool call"
    names = [c.name for c in outcome.tool_calls]
    return f"called {', '.join(names)}" if names else "called no tool"


@scorer(
    "tool_selection",
    "the reply calls exactly the tools named in `calls` (no tool when `calls` is empty)",
    required=("calls",),
)
def tool_selection(params: Mapping[str, Any], outcome: Outcome, context: ScoringContext) -> Verdict:
    ok = tool_selection_ok(params["calls"], outcome)
    wanted = ", ".join(expected_names(params["calls"])) or "no tool"
    return Verdict(ok, detail="" if ok else f"expected {wanted}; {_made(outcome)}")


@scorer(
    "tool_arguments",
    "the reply makes exactly the calls in `calls`, names and arguments (JSON, strings ignoring case and "
    "spaces, numbers as numbers), in any order",
    required=("calls",),
)
def tool_arguments(params: Mapping[str, Any], outcome: Outcome, context: ScoringContext) -> Verdict:
    ok = tool_arguments_ok(params["calls"], outcome)
    if ok:
        return Verdict(True)
    made = outcome.parsed_calls()
    if made is None:
        return Verdict(False, detail="malformed tool call")
    return Verdict(False, detail=f"made {json.dumps(made, ensure_ascii=False)[:200]}")


SCORERS = (tool_selection, tool_arguments)
