"""Guardrails: checks the runtime runs on a run's input and final output; a tripped one ends the run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class GuardrailResult:
    tripped: bool
    message: str = ""


Guardrail = Callable[[str], GuardrailResult]
"""Takes the user's input (input guardrails) or the final output as text (output guardrails)."""


def first_tripped(guardrails: list[Guardrail], text: str) -> GuardrailResult | None:
    """The first guardrail that trips. One that raises counts as tripped: a check that could not run must not
    let the text through (fail closed), and the run ends with its typed status instead of an exception."""
    for guardrail in guardrails:
        try:
            result = guardrail(text)
        except Exception as error:  # any failure of a user's check is reported, not raised
            name = getattr(guardrail, "__name__", type(guardrail).__name__)
            return GuardrailResult(True, f"{name} failed ({type(error).__name__}: {error}); failing closed")
        if result.tripped:
            return result
    return None
