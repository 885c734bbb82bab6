"""Whether a tier's answer is kept or the request goes on to the next tier: a pure function of the answer's
token logprobs and how it finished.

An answer is escalated when it did not finish on its own (`length`: cut off at max_tokens, so its confidence
says nothing about the rest; anything but `stop` or `tool_calls`), when it is empty, when it carries no
logprobs to judge (a replica that does not report them is never trusted), or when its mean token logprob or
its lowest one falls below the thresholds. A tool call is judged the same way: its logprobs cover every
generated token, the call's name and arguments included. With several choices (`n`), every one must pass.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from switchyard.fleet.cascade.config import ConfidenceThresholds

FINISHED_REASONS = frozenset({"stop", "tool_calls"})
"""How an answer ends when the model itself ended it."""


class Reason(enum.Enum):
    """Why an answer was kept or escalated (the metrics' `reason` label)."""

    CONFIDENT = "confident"
    TRUNCATED = "truncated"
    """finish_reason `length`."""
    UNFINISHED = "unfinished"
    """Another finish_reason than stop, tool_calls or length (content_filter, abort, none)."""
    EMPTY = "empty"
    NO_LOGPROBS = "no_logprobs"
    LOW_MEAN = "low_mean_logprob"
    LOW_TOKEN = "low_token_logprob"


@dataclass(frozen=True)
class ChoiceConfidence:
    """What the decision reads of one choice of an answer."""

    token_logprobs: tuple[float, ...] | None
    """The logprob of each generated token, None when the answer reported none."""
    finish_reason: str | None
    has_output: bool
    """Text or a tool call came out."""


@dataclass(frozen=True)
class Verdict:
    accept: bool
    reason: Reason
    mean_logprob: float | None = None
    min_logprob: float | None = None


def judge_choice(choice: ChoiceConfidence, thresholds: ConfidenceThresholds) -> Verdict:
    """Keep this choice, or escalate it, and why."""
    if choice.finish_reason == "length":
        return Verdict(False, Reason.TRUNCATED)
    if choice.finish_reason not in FINISHED_REASONS:
        return Verdict(False, Reason.UNFINISHED)
    if not choice.has_output:
        return Verdict(False, Reason.EMPTY)
    if not choice.token_logprobs:
        return Verdict(False, Reason.NO_LOGPROBS)
    mean = math.fsum(choice.token_logprobs) / len(choice.token_logprobs)
    lowest = min(choice.token_logprobs)
    if thresholds.min_mean_logprob is not None and mean < thresholds.min_mean_logprob:
        return Verdict(False, Reason.LOW_MEAN, mean, lowest)
    if thresholds.min_token_logprob is not None and lowest < thresholds.min_token_logprob:
        return Verdict(False, Reason.LOW_TOKEN, mean, lowest)
    return Verdict(True, Reason.CONFIDENT, mean, lowest)


def judge_answer(choices: Sequence[ChoiceConfidence], thresholds: ConfidenceThresholds) -> Verdict:
    """Keep the answer only if every choice passes; the first failing choice's verdict otherwise. The kept
    answer's mean and minimum are its least confident choice's."""
    if not choices:
        return Verdict(False, Reason.EMPTY)
    verdicts = [judge_choice(choice, thresholds) for choice in choices]
    failed = next((verdict for verdict in verdicts if not verdict.accept), None)
    if failed is not None:
        return failed
    return min(verdicts, key=lambda verdict: verdict.mean_logprob or 0.0)


def answer_confidence(body: Mapping[str, Any], endpoint: str) -> list[ChoiceConfidence]:
    """The choices of a chat completion (`logprobs.content[].logprob`) or a completion
    (`logprobs.token_logprobs`), as the decision reads them."""
    choices = body.get("choices")
    if not isinstance(choices, list):
        return []
    read = []
    for choice in choices:
        if not isinstance(choice, Mapping):
            continue
        finish = choice.get("finish_reason")
        read.append(
            ChoiceConfidence(
                token_logprobs=_token_logprobs(choice.get("logprobs"), endpoint),
                finish_reason=finish if isinstance(finish, str) else None,
                has_output=_has_output(choice, endpoint),
            )
        )
    return read


def _token_logprobs(logprobs: Any, endpoint: str) -> tuple[float, ...] | None:
    if not isinstance(logprobs, Mapping):
        return None
    if endpoint == "chat":
        entries = logprobs.get("content")
        values = (
            [e.get("logprob") for e in entries if isinstance(e, Mapping)] if isinstance(entries, list) else []
        )
    else:
        values = logprobs.get("token_logprobs") if isinstance(logprobs.get("token_logprobs"), list) else []
    numbers = tuple(float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool))
    return numbers or None


def _has_output(choice: Mapping[str, Any], endpoint: str) -> bool:
    if endpoint != "chat":
        text = choice.get("text")
        return isinstance(text, str) and bool(text.strip())
    message = choice.get("message")
    if not isinstance(message, Mapping):
        return False
    content = message.get("content")
    return bool(message.get("tool_calls")) or (isinstance(content, str) and bool(content.strip()))
