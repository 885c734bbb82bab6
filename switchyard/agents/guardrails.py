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
    for guardrail in guardrails:
        result = guardrail(text)
        if result.tripped:
            return result
    return None
