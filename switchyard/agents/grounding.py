"""Grounding check: is each cited sentence of a RAG answer supported by the passages it cites?

Embedding similarity (sentence vs. the cited passages' sentences) is cheap and catches invented claims, a
number check catches changed figures (which embeddings barely see), and an optional judge model decides the
borderline cases. Unsupported sentences are flagged in the verdict, and
`answer_with_rag` can regenerate once with feedback. `self_consistent` majority-votes short answers.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from switchyard.agents.chat_model import ChatFn, maybe_await, reply_text
from switchyard.agents.rag.citations import parse_citations, rag_messages, split_sentences, strip_citations
from switchyard.agents.rag.embeddings import Embedder
from switchyard.agents.rag.store import Passage, RagStore

_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")

Judge = Callable[[str, Sequence[str]], "bool | Awaitable[bool]"]
"""(claim, cited passage texts) → supported?"""


@dataclass(frozen=True)
class SentenceCheck:
    sentence: str
    citations: list[int]
    similarity: float
    """Best cosine similarity between the claim and a sentence of a cited passage (0 when nothing cited)."""
    supported: bool
    reason: str
    """"similar", "judge", "no citation", "unknown passage", "number not in passage", "low similarity",
    "judge rejected"."""


@dataclass(frozen=True)
class GroundingVerdict:
    sentences: list[SentenceCheck]

    @property
    def grounded(self) -> bool:
        return all(check.supported for check in self.sentences)

    @property
    def unsupported(self) -> list[SentenceCheck]:
        return [check for check in self.sentences if not check.supported]


@dataclass(frozen=True)
class GroundingConfig:
    support_threshold: float = 0.75
    """Similarity at or above which a claim counts as supported without asking the judge."""
    reject_threshold: float = 0.45
    """Similarity below which a claim is unsupported without asking the judge."""
    require_citations: bool = True
    """Flag factual sentences that cite nothing."""
    always_judge: bool = False
    """Ask the judge (when given) about every claim that passes the number check, not only the borderline
    ones: similarity cannot tell "emptied every hour" from "emptied every Saturday"."""


async def check_grounding(
    answer: str,
    passages: Sequence[Passage],
    embedder: Embedder,
    judge: Judge | None = None,
    config: GroundingConfig | None = None,
) -> GroundingVerdict:
    """Check every sentence of `answer` against the passages it cites (by their [n])."""
    config = config or GroundingConfig()
    by_number = {p.n: p for p in passages}
    checks = []
    for cited in parse_citations(answer, passages):
        claim = strip_citations(cited.sentence)
        if not cited.citations:
            supported = not config.require_citations or _is_non_claim(claim)
            checks.append(SentenceCheck(cited.sentence, [], 0.0, supported, "no citation"))
            continue
        if any(n not in by_number for n in cited.citations):
            checks.append(SentenceCheck(cited.sentence, cited.citations, 0.0, False, "unknown passage"))
            continue
        texts = [by_number[n].text for n in cited.citations]
        similarity = _best_similarity(embedder, claim, texts)
        missing = _numbers(claim) - set().union(*(_numbers(text) for text in texts))
        if missing:  # embeddings barely notice a changed number; a number the passages lack is invented
            supported, reason = False, "number not in passage"
        elif similarity >= config.support_threshold and not (config.always_judge and judge is not None):
            supported, reason = True, "similar"
        elif similarity < config.reject_threshold or judge is None:
            supported, reason = False, "low similarity"
        else:
            supported = bool(await maybe_await(judge(claim, texts)))
            reason = "judge" if supported else "judge rejected"
        checks.append(SentenceCheck(cited.sentence, cited.citations, similarity, supported, reason))
    return GroundingVerdict(checks)


def _best_similarity(embedder: Embedder, claim: str, passages: Sequence[str]) -> float:
    units = [s for text in passages for s in split_sentences(" ".join(text.split()))] + list(passages)
    vectors = embedder.embed([claim, *units])
    return float(np.max(vectors[1:] @ vectors[0])) if len(units) else 0.0


def _numbers(text: str) -> set[str]:
    return {n.replace(",", "") for n in _NUMBER.findall(text)}


def _is_non_claim(sentence: str) -> bool:
    """Sentences that assert nothing checkable (e.g. "The passages do not say.") need no citation."""
    lowered = sentence.lower()
    return sentence.endswith("?") or any(
        phrase in lowered
        for phrase in (
            "do not contain",
            "does not say",
            "do not say",
            "not mentioned",
            "not in the passages",
            "not given in the passages",
        )
    )


def chat_judge(chat: ChatFn) -> Judge:
    """A Judge that asks a chat model for SUPPORTED / UNSUPPORTED."""

    async def judge(claim: str, passages: Sequence[str]) -> bool:
        quoted = "\n\n".join(f"Passage {i}:\n{text}" for i, text in enumerate(passages, 1))
        prompt = (
            f"{quoted}\n\nClaim: {claim}\n\nIs the claim fully supported by the passages above? "
            "Answer with one word: SUPPORTED or UNSUPPORTED."
        )
        reply = reply_text(await maybe_await(chat([{"role": "user", "content": prompt}]))).upper()
        return "UNSUPPORTED" not in reply and "SUPPORTED" in reply

    return judge


@dataclass(frozen=True)
class RagAnswer:
    text: str
    passages: list[Passage]
    verdict: GroundingVerdict
    sources: dict[int, str] = field(default_factory=dict)
    """Citation number → source, for the passages the answer cites."""
    attempts: int = 1


async def answer_with_rag(
    question: str,
    store: RagStore,
    collection: str,
    chat: ChatFn,
    k: int = 5,
    judge: Judge | None = None,
    regenerate: bool = True,
    config: GroundingConfig | None = None,
) -> RagAnswer:
    """Retrieve, answer with [n] citations, check grounding; if a claim is unsupported and `regenerate`,
    ask once more naming the unsupported sentences, and keep the better-grounded answer."""
    passages = store.query(question, collection, k=k)
    messages = rag_messages(question, passages)
    text = reply_text(await maybe_await(chat(messages))).strip()
    verdict = await check_grounding(text, passages, store.embedder, judge, config)
    attempts = 1
    if regenerate and not verdict.grounded:
        flagged = "\n".join(f"- {check.sentence}" for check in verdict.unsupported)
        feedback = (
            "These sentences of your previous answer are not supported by the passages they cite:\n"
            f"{flagged}\nRewrite the answer using only what the passages say, citing them as [n]."
        )
        retry = reply_text(await maybe_await(chat(rag_messages(question, passages, feedback)))).strip()
        retry_verdict = await check_grounding(retry, passages, store.embedder, judge, config)
        attempts = 2
        if len(retry_verdict.unsupported) < len(verdict.unsupported):
            text, verdict = retry, retry_verdict
    cited = {n for check in verdict.sentences for n in check.citations}
    sources = {p.n: p.citation() for p in passages if p.n in cited}
    return RagAnswer(text=text, passages=list(passages), verdict=verdict, sources=sources, attempts=attempts)


async def self_consistent(sample: Callable[[], str | Awaitable[str]], k: int = 5) -> tuple[str, float]:
    """Draw `k` short answers and return the most common (normalised) one and its vote share."""
    if k < 1:
        raise ValueError("k must be at least 1")
    answers = [str(await maybe_await(sample())).strip() for _ in range(k)]
    keys = [_normalise(a) for a in answers]
    winner, votes = Counter(keys).most_common(1)[0]
    return answers[keys.index(winner)], votes / k


def _normalise(answer: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", "", strip_citations(answer).lower()).split())
