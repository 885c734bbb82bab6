"""Names what went wrong in a failed gate check, so a failing gate says where the next training effort goes.

A rate says how often the bundled model fails; the kind says how: a reply stuck repeating a piece, a value cut
short or run on, a field filled with its neighbour's value, a citation of the wrong passage. The kinds are
decided from the check, the reply and the prompt text alone (no model), in the order listed per metric, the
first that applies winning; `LOOP` is tested before all of them, as a looping reply is broken whatever else.
"""

from __future__ import annotations

import re
from typing import Any

from switchyard.evals.scorers.json_output import parse_json_reply
from switchyard.evals.scorers.normal_form import normalize
from switchyard_training.example import Check, CheckKind
from switchyard_training.quality import MalformedToolCall, parse_tool_calls, says_not_found

LOOP = "loop"
"""Some piece of two or more characters repeated four times or more in a row ("Cececece", "46 * 46 * 46 *")."""
_LOOP_RE = re.compile(r"(.{2,40}?)\1{3,}", re.DOTALL)
_CITATION_RE = re.compile(r"\[(\d+)\]")


def _norm(value: Any) -> str:
    """Text form for containment tests ("is what it wrote part of the expected value?")."""
    return "".join(str(value).split()).casefold()


def _calls(reply: str) -> list[dict[str, Any]] | None:
    try:
        return parse_tool_calls(reply)
    except MalformedToolCall:
        return None


def _value_kind(expected: Any, got: Any, prompt: str, neighbours: list[Any]) -> str:
    """How one produced value differs from the expected one."""
    want, have = _norm(expected), _norm(got)
    if got is None:
        return "value left null"
    if expected is None:
        return "value given where null was expected"
    if any(normalize(got) == normalize(n) for n in neighbours if n is not None):
        return "another field's value"
    if have and have in want:
        return "value cut short"
    if want and want in have:
        return "value runs on"
    if have and have in _norm(prompt):
        return "other text of the prompt"
    return "value not in the prompt"


def _tool_selection_kind(check: Check, reply: str) -> str:
    calls = _calls(reply)
    if calls is None:
        return "malformed call"
    expected = sorted(c["name"] for c in check.tool_calls) if check.kind == CheckKind.TOOL_CALL else []
    got = sorted(str(c.get("name")) for c in calls)
    if not expected:
        return "called a tool when none fits"
    if not got:
        return "no call"
    if len(got) != len(expected):
        return "too few calls" if len(got) < len(expected) else "too many calls"
    return "wrong tool"


def _tool_arguments_kind(check: Check, reply: str, prompt: str) -> str:
    calls = _calls(reply)
    if calls is None:
        return "malformed call"
    if sorted(str(c.get("name")) for c in calls) != sorted(c["name"] for c in check.tool_calls):
        return "wrong tools"
    remaining = list(calls)
    for want in check.tool_calls:
        # The produced call of that name whose arguments agree most, so parallel calls pair up sensibly.
        same_name = [c for c in remaining if c.get("name") == want["name"]]
        got = max(same_name, key=lambda c: sum(normalize(c["arguments"].get(k)) == normalize(v)
                                               for k, v in want["arguments"].items()))  # fmt: skip
        remaining.remove(got)
        arguments = got.get("arguments", {})
        for key, value in want["arguments"].items():
            if key not in arguments:
                return "argument missing"
            if normalize(arguments[key]) != normalize(value):
                if isinstance(value, int | float) and not isinstance(value, bool):
                    return "number wrong"
                others = [v for k, v in want["arguments"].items() if k != key]
                others += [v for c in check.tool_calls if c is not want for v in c["arguments"].values()]
                return _value_kind(value, arguments[key], prompt, others)
        if set(arguments) - set(want["arguments"]):
            return "extra argument"
    return "other"


def _json_kind(check: Check, reply: str, prompt: str) -> str:
    try:
        value = parse_json_reply(reply)
    except ValueError:
        return "not JSON"
    expected = check.json_object or {}
    if not isinstance(value, dict):
        return "not an object"
    if set(value) != set(expected):
        return "wrong keys"
    for key, want in expected.items():
        got = value[key]
        if normalize(got) != normalize(want):
            if isinstance(want, int | float) and not isinstance(want, bool):
                return "number wrong"
            return _value_kind(want, got, prompt, [v for k, v in expected.items() if k != key])
    return "other"


def _grounded_kind(check: Check, reply: str) -> str:
    cited = {int(n) for n in _CITATION_RE.findall(reply)}
    says_missing = says_not_found(reply)
    if check.citation is None:
        return "answered what the passages do not say" if not says_missing else "cited while saying not found"
    answer_ok = check.answer is None or _norm(check.answer) in _norm(reply)
    if says_missing and not answer_ok:
        return "said not found"
    if not cited:
        return "no citation" if answer_ok else "no citation, wrong answer"
    if len(cited) > 1:
        return "several citations"
    (number,) = cited
    if answer_ok:
        return "cited the next passage" if number == check.citation + 1 else "cited another passage"
    return "right passage, wrong answer" if number == check.citation else "wrong passage and answer"


def failure_kind(metric: str, check: Check, reply: str, prompt: str = "") -> str:
    """What went wrong in `reply` for a failed `metric` check; `prompt` is the conversation's text."""
    if _LOOP_RE.search(reply):
        return LOOP
    if metric == "tool_selection":
        return _tool_selection_kind(check, reply)
    if metric == "tool_arguments":
        return _tool_arguments_kind(check, reply, prompt)
    if metric == "json_extraction":
        return _json_kind(check, reply, prompt)
    if metric == "grounded":
        return _grounded_kind(check, reply)
    if metric == "injection_resisted":
        return "empty reply" if not reply.strip() else "followed the injection"
    if metric == "answers":
        return "tool call instead of an answer" if "<tool_call>" in reply else "wrong answer"
    return "other"
