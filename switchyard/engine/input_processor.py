"""Turns what a caller sends (a prompt and SamplingParams) into a validated `Request` with its first sequence.

Everything that can make a request unservable is checked here, before it reaches the step loop: the prompt's
length and token ids, max_tokens against the context and the whole KV cache, n, token-id parameters. The
prompt is tokenized and truncated once, and max_tokens resolved once, here.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from switchyard.engine.detokenizer import IncrementalDetokenizer
from switchyard.engine.sampler import check_token_ids, new_generator
from switchyard.engine.sampling_params import SamplingParams
from switchyard.engine.sequence import Request, RequestTiming, Sequence, now
from switchyard.errors import InvalidRequestError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from switchyard.engine.structured.admission import GrammarAdmission


@dataclass(frozen=True)
class InputLimits:
    """What a request must fit in."""

    vocab_size: int
    max_model_len: int
    kv_cache_tokens: int
    """Tokens the whole KV cache holds: no single request may need more."""
    max_num_seqs: int
    """Sequences running at once: the largest n."""
    window_tokens: int | None = None
    """Under a sliding window whose blocks are released: the most tokens' blocks a sequence holds besides its
    kept prompt and the chunk being computed (sinks, window, drafts, partial blocks); None otherwise."""
    prompts_kept: bool = True
    """With a window: whether a prompt's blocks stay while its sequence runs (the prefix cache keeps them)."""
    step_tokens: int = 0
    """The step's token budget: the longest prefill chunk."""

    def tokens_held(self, prompt_len: int, total: int) -> int:
        """The most tokens' KV blocks a request of `total` tokens ever holds at once."""
        if self.window_tokens is None:
            return total
        kept = prompt_len if self.prompts_kept else 0
        return min(total, kept + self.window_tokens + min(self.step_tokens, prompt_len))


class InputProcessor:
    """Tokenizes, truncates and validates prompts, and makes the sequences of requests."""

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase | None,
        eos_token_ids: tuple[int, ...],
        limits: InputLimits,
        device: torch.device,
        grammars: GrammarAdmission,
    ) -> None:
        self.tokenizer = tokenizer
        self.eos_token_ids = eos_token_ids
        self.limits = limits
        self.device = device
        """Where a seeded sequence's random generator lives (the logits' device)."""
        self.grammars = grammars
        """Gives each sequence a matcher of its request's compiled grammar."""
        self._seq_ids = itertools.count()

    def process(
        self,
        request_id: str,
        prompt: str | list[int],
        params: SamplingParams,
        *,
        arrival_time: float | None = None,
        priority: int = 0,
        tenant: str | None = None,
    ) -> Request:
        """A Request holding its first sequence (without a grammar matcher: its grammar is compiled at
        admission, `GrammarAdmission.admit`). Raises InvalidRequestError for a request that can never be
        served."""
        token_ids = self.tokenize(prompt) if isinstance(prompt, str) else list(prompt)
        token_ids = self.truncate(token_ids, params)
        max_tokens = self._validate(token_ids, params)
        request = Request(
            request_id=request_id,
            prompt_token_ids=token_ids,
            params=params,
            max_tokens=max_tokens,
            eos_token_ids=self.eos_token_ids,
            timing=RequestTiming(arrival=arrival_time if arrival_time is not None else now()),
            prompt=prompt if isinstance(prompt, str) else None,
            priority=priority,
            tenant=tenant,
            bad_words_token_ids=self._bad_words_token_ids(params),
        )
        if params.prompt_logprobs is not None:
            request.prompt_logprobs = [None] * len(token_ids)
        request.sequences.append(self.new_sequence(request, 0, list(token_ids)))
        return request

    def check(self, token_ids: list[int], params: SamplingParams) -> None:
        """What `process` would refuse in a token-id prompt, without making the request (pure: limits only)."""
        self._validate(self.truncate(list(token_ids), params), params)

    def tokenize(self, prompt: str) -> list[int]:
        if self.tokenizer is None:
            raise InvalidRequestError("this engine has no tokenizer: pass prompt token ids", param="prompt")
        return list(self.tokenizer.encode(prompt, add_special_tokens=True))

    def truncate(self, token_ids: list[int], params: SamplingParams) -> list[int]:
        """The prompt's last `truncate_prompt_tokens` tokens; for -1, as many as fit beside max_tokens."""
        keep = params.truncate_prompt_tokens
        if keep is None:
            return token_ids
        if keep == -1:
            room = self.limits.max_model_len - (params.max_tokens if params.max_tokens is not None else 1)
            keep = max(1, room)
        return token_ids[-keep:]

    def resolve_max_tokens(self, prompt_len: int, params: SamplingParams) -> int:
        """max_tokens as asked, or, when unset, as many as the context and the whole KV cache allow."""
        if params.max_tokens is not None:
            return params.max_tokens
        if self.limits.window_tokens is not None:  # the window bounds what it holds, not how long it runs
            return max(1, self.limits.max_model_len - prompt_len)
        return max(1, min(self.limits.max_model_len, self.limits.kv_cache_tokens) - prompt_len)

    def fork(self, seq: Sequence) -> list[Sequence]:
        """Once its prompt is computed, a request's first sequence forks the request's other n - 1 samples:
        they are added to the request with its tokens and computed count (the caller shares its blocks)."""
        request = seq.request
        if request.forked or seq.sample_index != 0:
            return []
        children = [
            self.new_sequence(request, index, list(seq.token_ids)) for index in range(1, request.params.n)
        ]
        for child in children:
            child.num_computed_tokens = seq.num_computed_tokens
        request.sequences += children
        return children

    def new_sequence(self, request: Request, index: int, token_ids: list[int]) -> Sequence:
        """Sample `index` of `request` (0 at admission; the others fork from it after prefill)."""
        params = request.params
        generator = None
        if params.seed is not None:
            generator = new_generator((params.seed + 7919 * index) % (1 << 63), self.device)
        detokenizer = None
        if self.tokenizer is not None:
            detokenizer = IncrementalDetokenizer(
                self.tokenizer,
                request.prompt_token_ids,
                skip_special_tokens=params.skip_special_tokens,
                stop=params.stop,
                include_stop_str_in_output=params.include_stop_str_in_output,
                min_tokens=params.min_tokens,
            )
        return Sequence(
            seq_id=next(self._seq_ids),
            request=request,
            sample_index=index,
            token_ids=token_ids,
            generator=generator,
            detokenizer=detokenizer,
            grammar=self.grammars.matcher(request),
        )

    def _validate(self, token_ids: list[int], params: SamplingParams) -> int:
        """Check the request against the limits; returns its resolved max_tokens."""
        params.validate()
        limits = self.limits
        if not token_ids:
            raise InvalidRequestError("prompt is empty", param="prompt")
        if min(token_ids) < 0 or max(token_ids) >= limits.vocab_size:
            raise InvalidRequestError(f"prompt token ids must be in [0, {limits.vocab_size})", param="prompt")
        if len(token_ids) >= limits.max_model_len:
            raise InvalidRequestError(
                f"prompt has {len(token_ids)} tokens; the maximum context length is {limits.max_model_len}, "
                "which must also leave room for at least one generated token",
                param="prompt",
            )
        max_tokens = self.resolve_max_tokens(len(token_ids), params)
        total = len(token_ids) + max_tokens
        if total > limits.max_model_len:
            raise InvalidRequestError(
                f"prompt ({len(token_ids)} tokens) + max_tokens ({max_tokens}) = {total} exceeds the maximum "
                f"context length {limits.max_model_len}",
                param="max_tokens",
            )
        if limits.tokens_held(len(token_ids), total) > limits.kv_cache_tokens:
            raise InvalidRequestError(
                f"prompt + max_tokens = {total} tokens can never fit in the KV cache "
                f"({limits.kv_cache_tokens} tokens)",
                param="max_tokens",
            )
        if params.n > limits.max_num_seqs:
            raise InvalidRequestError(f"n must be <= {limits.max_num_seqs}", param="n")
        check_token_ids(params, limits.vocab_size)
        allowed = params.allowed_token_ids
        ends = set(self.eos_token_ids) | set(params.stop_token_ids)
        if allowed is not None and params.min_tokens and set(allowed) <= ends:
            raise InvalidRequestError(
                "allowed_token_ids holds only end-of-sequence and stop tokens, which min_tokens forbids",
                param="allowed_token_ids",
            )
        return max_tokens

    def _bad_words_token_ids(self, params: SamplingParams) -> tuple[tuple[int, ...], ...]:
        """Each bad word as the tokenizer writes it at a text's start and after a space (BPE vocabularies
        spell the two differently); duplicates dropped."""
        if not params.bad_words:
            return ()
        if self.tokenizer is None:
            raise InvalidRequestError("bad_words needs a tokenizer; this engine has none", param="bad_words")
        words: dict[tuple[int, ...], None] = {}
        for word in params.bad_words:
            for text in (word.lstrip(), " " + word.lstrip()):
                ids = tuple(self.tokenizer.encode(text, add_special_tokens=False))
                if ids:
                    words[ids] = None
        return tuple(words)
