"""LLM-as-judge: another model (any OpenAI-compatible endpoint) grades the reply against a rubric.

The judge is asked for {"score", "reason"} under a JSON schema (`response_format`), so a server with structured
outputs (Switchyard, vLLM, OpenAI) cannot answer out of form; a server without them is asked again without the
schema and its first number in range is read. The score is kept as a value in [0, 1] beside the pass/fail.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from switchyard.evals.outcome import Outcome
from switchyard.evals.scorers.base import JudgeEndpoint, ScoringContext, Verdict, scorer

JUDGE_SYSTEM = (
    "You grade an assistant's reply against a rubric. Be strict: a reply that only partly meets the rubric "
    'does not get the top score. Answer with JSON: {"score": <integer>, "reason": "<one sentence>"}.'
)


class JudgeUnavailableError(RuntimeError):
    """A suite uses the `judge` scorer but the run was given no judge model (--judge-model)."""


def judge_prompt(rubric: str, question: str, reply: str, reference: str | None, scale: int) -> str:
    parts = [f"Rubric:\n{rubric}", f"Question:\n{question or '(none)'}"]
    if reference:
        parts.append(f"Reference answer:\n{reference}")
    parts.append(f"Reply to grade:\n{reply or '(empty reply)'}")
    parts.append(f"Score it from 1 (fails the rubric) to {scale} (fully meets it).")
    return "\n\n".join(parts)


def score_schema(scale: int) -> dict[str, Any]:
    return {
        "type": "json_schema",
        "json_schema": {
            "name": "grade",
            "strict": True,
            "schema": {
                "type": "object",
                "properties": {
                    "score": {"type": "integer", "minimum": 1, "maximum": scale},
                    "reason": {"type": "string", "maxLength": 300},
                },
                "required": ["score", "reason"],
                "additionalProperties": False,
            },
        },
    }


def read_score(text: str, scale: int) -> tuple[int, str] | None:
    """(score, reason) from the judge's reply: its JSON, else the first whole number in 1..scale."""
    try:
        value = json.loads(text)
        if isinstance(value, dict) and isinstance(value.get("score"), int) and 1 <= value["score"] <= scale:
            return value["score"], str(value.get("reason", ""))
    except json.JSONDecodeError:
        pass
    for number in re.findall(r"\b\d+\b", text):
        if 1 <= int(number) <= scale:
            return int(number), text.strip()[:300]
    return None


async def ask_judge(endpoint: JudgeEndpoint, prompt: str, scale: int) -> str:
    import openai

    messages = [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": prompt}]
    request: dict[str, Any] = {
        "model": endpoint.model,
        "messages": messages,
        "temperature": endpoint.temperature,
        "max_tokens": 200,
    }
    try:
        reply = await endpoint.client.chat.completions.create(**request, response_format=score_schema(scale))
    except openai.BadRequestError:  # no structured outputs there: ask in plain text
        reply = await endpoint.client.chat.completions.create(**request)
    return reply.choices[0].message.content or ""


@scorer(
    "judge",
    "a judge model grades the reply against `rubric` (optionally given a `reference` answer) from 1 to "
    "`scale` (5); it passes at `pass_score` (default: scale - 1)",
    required=("rubric",),
    optional=("reference", "scale", "pass_score"),
)
async def judge(params: Mapping[str, Any], outcome: Outcome, context: ScoringContext) -> Verdict:
    if context.judge is None:
        raise JudgeUnavailableError(
            "the judge scorer needs a judge model: pass --judge-model (and --judge-base-url)"
        )
    scale = int(params.get("scale", 5))
    pass_score = int(params.get("pass_score", scale - 1))
    prompt = judge_prompt(
        str(params["rubric"]), outcome.prompt, outcome.content, params.get("reference"), scale
    )
    text = await ask_judge(context.judge, prompt, scale)
    read = read_score(text, scale)
    if read is None:
        return Verdict(False, value=0.0, detail=f"the judge gave no score: {text[:120]!r}")
    score, reason = read
    return Verdict(score >= pass_score, value=(score - 1) / (scale - 1), detail=f"{score}/{scale}: {reason}")


SCORERS = (judge,)
