"""Answers from passages: the right citation with the answer (the quality gate's rule), and citations that
the cited passages support (the agents' grounding check, `switchyard.agents.grounding`)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from switchyard.evals.outcome import Outcome
from switchyard.evals.scorers.base import ScoringContext, Verdict, scorer
from switchyard.evals.scorers.normal_form import admits, normalize

_CITATION = re.compile(r"\[(\d+)\]")
NOT_FOUND_PHRASES = (
    "do not contain",
    "does not say",
    "do not say",
    "not mentioned",
    "not in the passages",
    "not given in the passages",
)
"""Replies saying the passages lack the answer (a suite names its own with `not_found_phrases`)."""


def cited(reply: str) -> set[int]:
    """The passage numbers a reply cites as [n]."""
    return {int(n) for n in _CITATION.findall(reply)}


def cited_answer_ok(
    reply: str, answer: str | None, citation: int | None, not_found_phrases: Sequence[str] = NOT_FOUND_PHRASES
) -> bool:
    """Right answer with exactly the right citation; or, when unanswerable (`citation` None), a reply that says
    the passages lack it and cites nothing. This is the quality gate's grounded rule."""
    numbers = cited(reply)
    if citation is None:
        return admits(reply, tuple(not_found_phrases)) and not numbers
    answer_ok = answer is None or normalize(answer) in normalize(reply)
    return answer_ok and numbers == {citation}


def _retrieved_answer_ok(reply: str, answer: str | None, passages: Sequence[Any]) -> tuple[bool, str]:
    """Without a fixed citation number (retrieval decides the order): the reply cites retrieved passages only,
    gives the answer, and one cited passage holds it."""
    numbers = cited(reply)
    by_number = {p.n: p for p in passages}
    if not numbers:
        return False, "no citation"
    if not numbers <= set(by_number):
        return False, f"cites [{min(numbers - set(by_number))}], which was not retrieved"
    if answer is None:
        return True, ""
    if normalize(answer) not in normalize(reply):
        return False, f"answer {answer!r} not in the reply"
    if not any(normalize(answer) in normalize(by_number[n].text) for n in numbers):
        return False, "no cited passage holds the answer"
    return True, ""


@scorer(
    "cited_answer",
    "the reply gives `answer` and cites passage [`citation`] and no other; with `citation` null, it says the "
    "passages lack the answer (`not_found_phrases`) and cites nothing; without `citation` (RAG), it cites "
    "retrieved passages and one of them holds the answer",
    optional=("answer", "citation", "not_found_phrases"),
)
def cited_answer(params: Mapping[str, Any], outcome: Outcome, context: ScoringContext) -> Verdict:
    answer = params.get("answer")
    if "citation" not in params:
        ok, detail = _retrieved_answer_ok(outcome.content, answer, outcome.passages)
        return Verdict(ok, detail=detail)
    phrases = params.get("not_found_phrases", NOT_FOUND_PHRASES)
    ok = cited_answer_ok(outcome.content, answer, params["citation"], phrases)
    return Verdict(ok, detail="" if ok else f"cited {sorted(cited(outcome.content))}")


@scorer(
    "citation_grounded",
    "the reply cites a retrieved passage, and every claim is supported by the passages it cites (the agents' "
    "grounding check: embedding similarity, numbers, and the judge model for borderline claims when given)",
    optional=("support_threshold", "reject_threshold"),
)
async def citation_grounded(params: Mapping[str, Any], outcome: Outcome, context: ScoringContext) -> Verdict:
    from switchyard.agents.grounding import GroundingConfig, check_grounding

    if not outcome.passages:
        return Verdict(False, detail="no passages: citation_grounded scores RAG cases")
    if not cited(outcome.content):
        return Verdict(False, value=0.0, detail="no citation")
    config = GroundingConfig(
        support_threshold=float(params.get("support_threshold", 0.75)),
        reject_threshold=float(params.get("reject_threshold", 0.45)),
    )
    judge = None
    if context.judge is not None:
        judge = _grounding_judge(context)
    verdict = await check_grounding(outcome.content, outcome.passages, context.embedder(), judge, config)
    supported = sum(1 for s in verdict.sentences if s.supported)
    share = supported / len(verdict.sentences) if verdict.sentences else 0.0
    if verdict.grounded:
        return Verdict(True, value=share)
    first = verdict.unsupported[0]
    return Verdict(False, value=share, detail=f"{first.reason}: {first.sentence[:120]!r}")


def _grounding_judge(context: ScoringContext):  # type: ignore[no-untyped-def]
    """The grounding check's judge over the run's judge model."""
    from switchyard.agents.grounding import chat_judge

    endpoint = context.judge
    assert endpoint is not None

    async def chat(messages: list[dict[str, Any]]) -> str:
        reply = await endpoint.client.chat.completions.create(
            model=endpoint.model, messages=messages, temperature=endpoint.temperature, max_tokens=8
        )  # type: ignore[call-overload]
        return reply.choices[0].message.content or ""

    return chat_judge(chat)


SCORERS = (cited_answer, citation_grounded)
