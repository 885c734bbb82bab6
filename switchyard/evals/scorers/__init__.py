"""The built-in scorers, by name: one module per family, collected here into one read-only table."""

from __future__ import annotations

from types import MappingProxyType

from switchyard.evals.scorers import budget, citations, injection, json_output, judge, match, tool_calls
from switchyard.evals.scorers.base import JudgeEndpoint, Scorer, ScorerParamsError, ScoringContext, Verdict

SCORERS: MappingProxyType[str, Scorer] = MappingProxyType(
    {
        s.name: s
        for family in (match, json_output, tool_calls, citations, injection, judge, budget)
        for s in family.SCORERS
    }
)
"""Every built-in scorer by the name a suite gives it."""


class UnknownScorerError(KeyError):
    """A suite names a scorer that does not exist."""

    def __str__(self) -> str:
        return str(self.args[0])


def get_scorer(name: str) -> Scorer:
    try:
        return SCORERS[name]
    except KeyError:
        raise UnknownScorerError(f"unknown scorer {name!r}; known: {', '.join(sorted(SCORERS))}") from None


__all__ = [
    "SCORERS",
    "JudgeEndpoint",
    "Scorer",
    "ScorerParamsError",
    "ScoringContext",
    "UnknownScorerError",
    "Verdict",
    "get_scorer",
]
