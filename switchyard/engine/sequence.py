"""The state of requests and of their sequences (one per sample) as they move through the engine."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from switchyard.engine.sampling_params import SamplingParams

if TYPE_CHECKING:
    from switchyard.engine.detokenizer import IncrementalDetokenizer
    from switchyard.engine.prefix_cache import PrefixNode
    from switchyard.engine.structured.backend import CompiledGrammar, GrammarMatcher
    from switchyard.engine.structured.output_check import OutputCheck


class SequenceStatus(enum.Enum):
    AWAITING_GRAMMAR = "awaiting_grammar"
    """Held outside the scheduler until the request's grammar has compiled."""
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class FinishReason(enum.StrEnum):
    """Why a sequence ended; the values are the OpenAI API's finish_reason strings (plus abort/error)."""

    STOP = "stop"
    LENGTH = "length"
    ABORT = "abort"
    ERROR = "error"


@dataclass
class RequestTiming:
    """Wall-clock marks of one request (time.monotonic seconds), recorded for metrics."""

    arrival: float
    first_scheduled: float | None = None
    first_token: float | None = None
    finished: float | None = None


@dataclass
class TokenLogprob:
    """The sampled token's logprob and, when asked, the top alternatives (id, logprob), best first."""

    token_id: int
    logprob: float
    top: list[tuple[int, float]] = field(default_factory=list)
    rank: int | None = None
    """1 + how many tokens were more likely (prompt tokens only; None where not computed)."""


@dataclass(eq=False)
class Sequence:
    """One sample of a request: its tokens, its KV blocks and how many of its tokens are in the cache.

    Prefill, decode and recompute after preemption are the same thing here: each step computes some of the
    tokens in `token_ids[num_computed_tokens:]`; once all are computed the next token is sampled.
    """

    seq_id: int
    request: Request
    sample_index: int
    token_ids: list[int]
    status: SequenceStatus = SequenceStatus.WAITING
    block_table: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    generator: torch.Generator | None = None
    detokenizer: IncrementalDetokenizer | None = None
    logprobs: list[TokenLogprob] = field(default_factory=list)
    cumulative_logprob: float = 0.0
    finish_reason: FinishReason | None = None
    stop_reason: str | int | None = None
    prefix_node: PrefixNode | None = None
    """The last block of this sequence registered in the prefix cache (None: none yet)."""
    num_cached_blocks: int = 0
    """Leading blocks of block_table registered in the prefix cache."""
    num_emitted_tokens: int = 0
    """Output tokens already handed to the caller in a RequestOutput (for deltas)."""
    num_emitted_chars: int = 0
    grammar: GrammarMatcher | None = None
    """The structured-output matcher, advanced with every accepted output token (None: unconstrained)."""
    num_draft_tokens: int = 0
    """Speculative tokens at the end of token_ids this step, not yet verified (0 outside a step)."""

    @property
    def num_prompt_tokens(self) -> int:
        return self.request.num_prompt_tokens

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.request.num_prompt_tokens :]

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.request.num_prompt_tokens

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    @property
    def in_prefill(self) -> bool:
        """True until the prompt (or the recomputed history) is fully in the cache."""
        return self.num_computed_tokens < len(self.token_ids) - 1

    def take_drafts(self) -> list[int]:
        """Remove this step's unverified speculative tokens from the end of token_ids and return them."""
        if not self.num_draft_tokens:
            return []
        drafts = self.token_ids[-self.num_draft_tokens :]
        del self.token_ids[-self.num_draft_tokens :]
        self.num_draft_tokens = 0
        return drafts


@dataclass(eq=False)
class Request:
    """A user's request: one prompt, its sampling parameters, and its `n` sequences (forked after prefill)."""

    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    max_tokens: int
    """params.max_tokens resolved against the model's context length."""
    eos_token_ids: tuple[int, ...]
    timing: RequestTiming
    prompt: str | None = None
    priority: int = 0
    tenant: str | None = None
    sequences: list[Sequence] = field(default_factory=list)
    prompt_logprobs: list[TokenLogprob | None] | None = None
    num_cached_tokens: int = 0
    error: str | None = None
    num_hangs: int = 0
    """Engine steps this request was in that a watchdog found hung."""
    error_code: str | None = None
    compiled_grammar: CompiledGrammar | None = None
    output_check: OutputCheck | None = None
    """Checks each finished constrained output against its spec (None: unconstrained or uncheckable)."""
    """Set once params.structured_outputs has compiled; every sequence gets a matcher of it."""
    bad_words_token_ids: tuple[tuple[int, ...], ...] = ()
    """params.bad_words tokenized at admission, each with and without a leading space."""

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def is_finished(self) -> bool:
        return (
            bool(self.sequences)
            and all(s.is_finished for s in self.sequences)
            and (len(self.sequences) == self.params.n or self.error is not None or self.aborted)
        )

    @property
    def aborted(self) -> bool:
        return any(s.finish_reason is FinishReason.ABORT for s in self.sequences)

    @property
    def forked(self) -> bool:
        return len(self.sequences) > 1 or self.params.n == 1


@dataclass
class CompletionOutput:
    """One sample's output so far; `delta_*` is what is new since the previous RequestOutput."""

    index: int
    text: str
    token_ids: list[int]
    delta_text: str
    delta_token_ids: list[int]
    logprobs: list[TokenLogprob] | None
    delta_logprobs: list[TokenLogprob] | None
    cumulative_logprob: float | None
    finish_reason: str | None
    stop_reason: str | int | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestMetrics:
    arrival_time: float
    first_scheduled_time: float | None
    first_token_time: float | None
    finished_time: float | None

    @property
    def time_to_first_token(self) -> float | None:
        return None if self.first_token_time is None else self.first_token_time - self.arrival_time

    @property
    def queue_time(self) -> float | None:
        return None if self.first_scheduled_time is None else self.first_scheduled_time - self.arrival_time


@dataclass
class RequestOutput:
    """What the engine reports for a request after a step (vLLM's RequestOutput shape)."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    num_cached_tokens: int = 0
    prompt_logprobs: list[TokenLogprob | None] | None = None
    metrics: RequestMetrics | None = None
    error: str | None = None
    tenant: str | None = None
    priority: int = 0
    error_code: str | None = None
    """Machine-readable kind of `error` ('queue_timeout', 'internal'), for the server's status mapping."""


def now() -> float:
    return time.monotonic()
