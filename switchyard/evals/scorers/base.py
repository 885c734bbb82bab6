"""What a scorer is: a named rule that reads a case's outcome and the check's parameters and gives a verdict.

Scorers are data plus a function, so a suite names them as strings and the registry (`scorers/__init__.py`)
finds them; the parameters a check passes are validated when the suite loads, so a typo fails before any request
is sent. A scorer may be async (the LLM judge asks a model); most are plain functions.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from switchyard.evals.outcome import Outcome

if TYPE_CHECKING:
    import openai

    from switchyard.agents.rag.embeddings import Embedder


@dataclass(frozen=True)
class Verdict:
    passed: bool
    value: float | None = None
    """A number the metric is about, when it has one (a judge's score in [0, 1], a latency in seconds)."""
    detail: str = ""
    """Why it failed (or what was measured), for reading the per-case records."""


@dataclass(frozen=True)
class JudgeEndpoint:
    """The OpenAI-compatible model that grades replies for the `judge` scorer."""

    client: openai.AsyncOpenAI
    model: str
    temperature: float = 0.0


@dataclass
class ScoringContext:
    """What some scorers need beyond the outcome: a judge model, an embedder; built once per run."""

    judge: JudgeEndpoint | None = None
    embedder_factory: Callable[[], Embedder] | None = None
    """Builds the sentence embedder of the grounding check on first use (loading it takes seconds)."""
    _embedder: Embedder | None = field(default=None, repr=False)

    def embedder(self) -> Embedder:
        if self._embedder is None:
            if self.embedder_factory is None:
                from switchyard.agents.rag.embeddings import MiniLMEmbedder

                self._embedder = MiniLMEmbedder()
            else:
                self._embedder = self.embedder_factory()
        return self._embedder


ScoreFn = Callable[[Mapping[str, Any], Outcome, ScoringContext], "Verdict | Awaitable[Verdict]"]


class ScorerParamsError(ValueError):
    """A check gives a scorer parameters it does not take, or leaves out one it needs."""


@dataclass(frozen=True)
class Scorer:
    name: str
    description: str
    score_fn: ScoreFn
    required: frozenset[str] = frozenset()
    optional: frozenset[str] = frozenset()

    def check_params(self, params: Mapping[str, Any]) -> None:
        missing = self.required - set(params)
        unknown = set(params) - self.required - self.optional
        if missing or unknown:
            problems = []
            if missing:
                problems.append(f"needs {', '.join(sorted(missing))}")
            if unknown:
                takes = ", ".join(sorted(self.required | self.optional)) or "nothing"
                problems.append(f"does not take {', '.join(sorted(unknown))} (it takes {takes})")
            raise ScorerParamsError(f"scorer {self.name!r} " + "; ".join(problems))

    def score_now(self, params: Mapping[str, Any], outcome: Outcome) -> Verdict:
        """The verdict of a scorer that needs nothing beyond the outcome, without an event loop (the training
        package's quality gate scores this way); the judge and the grounding check cannot."""
        verdict = self.score_fn(params, outcome, ScoringContext())
        if inspect.isawaitable(verdict):
            if inspect.iscoroutine(verdict):
                verdict.close()
            raise TypeError(f"scorer {self.name!r} is async: await Scorer.score instead")
        return verdict

    async def score(self, params: Mapping[str, Any], outcome: Outcome, context: ScoringContext) -> Verdict:
        verdict = self.score_fn(params, outcome, context)
        if inspect.isawaitable(verdict):
            verdict = await verdict
        return verdict


def scorer(
    name: str, description: str, required: tuple[str, ...] = (), optional: tuple[str, ...] = ()
) -> Callable[[ScoreFn], Scorer]:
    """Decorator: a score function becomes a `Scorer` of that name (collected by `scorers/__init__.py`)."""

    def build(fn: ScoreFn) -> Scorer:
        return Scorer(name, description, fn, frozenset(required), frozenset(optional))

    return build
