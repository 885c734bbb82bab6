"""Answers compared as text: exact, normalised, contained, one of some phrases, or a regular expression."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from switchyard.evals.outcome import Outcome
from switchyard.evals.scorers.base import ScoringContext, Verdict, scorer
from switchyard.evals.scorers.normal_form import admits, normalize, plain_text


def _shown(text: str, limit: int = 80) -> str:
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


@scorer("exact", "the reply equals `expected` (surrounding whitespace ignored)", required=("expected",))
def exact(params: Mapping[str, Any], outcome: Outcome, context: ScoringContext) -> Verdict:
    expected = str(params["expected"])
    ok = outcome.content.strip() == expected.strip()
    return Verdict(ok, detail="" if ok else f"expected {_shown(expected)}, got {_shown(outcome.content)}")


@scorer(
    "normalised",
    "the reply equals `expected` ignoring case, runs of spaces and punctuation at the ends",
    required=("expected",),
)
def normalised(params: Mapping[str, Any], outcome: Outcome, context: ScoringContext) -> Verdict:
    expected = str(params["expected"])
    ok = plain_text(outcome.content) == plain_text(expected)
    return Verdict(ok, detail="" if ok else f"expected {_shown(expected)}, got {_shown(outcome.content)}")


def contains_normalised(expected: Any, text: str) -> bool:
    """The quality gate's answer rule: the expected value appears in the text, case and spaces ignored."""
    return normalize(str(expected)) in normalize(text)


@scorer(
    "contains",
    "the reply contains `expected` (case and whitespace ignored), e.g. a fact or a tool result's value",
    required=("expected",),
)
def contains(params: Mapping[str, Any], outcome: Outcome, context: ScoringContext) -> Verdict:
    ok = contains_normalised(params["expected"], outcome.content)
    return Verdict(ok, detail="" if ok else f"{_shown(str(params['expected']))} not in the reply")


@scorer(
    "mentions_any",
    "the reply contains one of `phrases` (case ignored), e.g. an admission of not knowing",
    required=("phrases",),
)
def mentions_any(params: Mapping[str, Any], outcome: Outcome, context: ScoringContext) -> Verdict:
    ok = admits(outcome.content, tuple(params["phrases"]))
    return Verdict(ok, detail="" if ok else "none of the phrases in the reply")


@scorer("regex", "the reply matches the regular expression `pattern` (re.search)", required=("pattern",))
def regex(params: Mapping[str, Any], outcome: Outcome, context: ScoringContext) -> Verdict:
    ok = re.search(str(params["pattern"]), outcome.content) is not None
    return Verdict(ok, detail="" if ok else f"no match for {params['pattern']!r}")


SCORERS = (exact, normalised, contains, mentions_any, regex)
