"""Per-request sampling parameters, shaped like vLLM's SamplingParams and validated once at construction."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from switchyard.engine.structured.params import StructuredOutputsParams
from switchyard.errors import InvalidRequestError


@dataclass
class SamplingParams:
    """How to sample one request's completion(s). Invalid values raise InvalidRequestError naming the field."""

    n: int = 1
    """Number of completions sampled from the same prompt (they share the prompt's KV blocks)."""
    temperature: float = 1.0
    """0 means greedy."""
    top_p: float = 1.0
    top_k: int = 0
    """0 or -1 disables top-k."""
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    """Divides positive logits (multiplies negative ones) of tokens seen in the prompt or output; 1 = off."""
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[int, float] | None = None
    seed: int | None = None
    """Makes this request's samples reproducible whatever else is in the batch."""
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    max_tokens: int | None = 16
    """None means up to the model's context length."""
    min_tokens: int = 0
    ignore_eos: bool = False
    logprobs: int | None = None
    """Return this many top logprobs per generated token (0 = only the sampled token's)."""
    prompt_logprobs: int | None = None
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    structured_outputs: StructuredOutputsParams | None = None
    """Constrain the output to a JSON schema, regex, choice, grammar or tool-call structure."""
    allowed_token_ids: list[int] | None = None
    """Only these tokens may be sampled; EOS ends the output early only if it is listed."""
    bad_words: list[str] = field(default_factory=list)
    """Words never generated, with or without a leading space: the engine tokenizes each, and a word's last
    token is banned wherever the output already ends with the tokens before it."""
    truncate_prompt_tokens: int | None = None
    """Keep only the prompt's last k tokens; -1 keeps as many as the context leaves room for beside
    max_tokens."""
    speculative: bool = True
    """False decodes this request without speculation even when the engine speculates (its output law is the
    same either way; this only opts it out of proposals, e.g. for latency measurements)."""

    def __post_init__(self) -> None:
        self._check_types()
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = list(self.stop or [])
        if isinstance(self.bad_words, str):
            self.bad_words = [self.bad_words]
        self.bad_words = list(self.bad_words or [])
        if self.allowed_token_ids is not None:
            self.allowed_token_ids = list(self.allowed_token_ids)
        self.stop_token_ids = list(self.stop_token_ids or [])
        if self.top_k == -1:
            self.top_k = 0
        self.validate()

    def _check_types(self) -> None:
        """Wrong types fail here with the field's name, not later as a TypeError inside a comparison."""
        for name in _REAL_FIELDS:
            _check(_is_real(getattr(self, name)), f"{name} must be a number", name)
        for name in _INT_FIELDS:
            value = getattr(self, name)
            _check(value is None or _is_int(value), f"{name} must be an integer", name)
        _check(self.n is not None, "n must be an integer", "n")
        _check(
            self.stop is None or isinstance(self.stop, (str, list, tuple)),
            "stop must be a string or a list of strings",
            "stop",
        )
        _check(
            self.stop_token_ids is None
            or (isinstance(self.stop_token_ids, (list, tuple)) and all(map(_is_int, self.stop_token_ids))),
            "stop_token_ids must be a list of integers",
            "stop_token_ids",
        )
        _check(
            self.logit_bias is None
            or (
                isinstance(self.logit_bias, dict)
                and all(_is_int(k) and _is_real(v) for k, v in self.logit_bias.items())
            ),
            "logit_bias must map token ids to numbers",
            "logit_bias",
        )
        _check(
            self.allowed_token_ids is None
            or (
                isinstance(self.allowed_token_ids, (list, tuple))
                and all(map(_is_int, self.allowed_token_ids))
            ),
            "allowed_token_ids must be a list of integers",
            "allowed_token_ids",
        )
        _check(
            self.bad_words is None or isinstance(self.bad_words, (str, list, tuple)),
            "bad_words must be a string or a list of strings",
            "bad_words",
        )

    def validate(self) -> None:
        """Raise InvalidRequestError for a bad value; the engine checks again at admission, since callers may
        set fields (structured_outputs) after construction."""
        _check(isinstance(self.n, int) and self.n >= 1, "n must be an integer >= 1", "n")
        for name in (
            "temperature",
            "top_p",
            "min_p",
            "repetition_penalty",
            "presence_penalty",
            "frequency_penalty",
        ):
            _check(math.isfinite(getattr(self, name)), f"{name} must be a finite number", name)
        _check(self.temperature >= 0, "temperature must be >= 0", "temperature")
        _check(0 < self.top_p <= 1, "top_p must be in (0, 1]", "top_p")
        _check(isinstance(self.top_k, int) and self.top_k >= 0, "top_k must be -1, 0 (off) or >= 1", "top_k")
        _check(0 <= self.min_p <= 1, "min_p must be in [0, 1]", "min_p")
        _check(self.repetition_penalty > 0, "repetition_penalty must be > 0", "repetition_penalty")
        _check(-2 <= self.presence_penalty <= 2, "presence_penalty must be in [-2, 2]", "presence_penalty")
        _check(-2 <= self.frequency_penalty <= 2, "frequency_penalty must be in [-2, 2]", "frequency_penalty")
        _check(
            self.max_tokens is None or (isinstance(self.max_tokens, int) and self.max_tokens >= 1),
            "max_tokens must be an integer >= 1",
            "max_tokens",
        )
        _check(self.min_tokens >= 0, "min_tokens must be >= 0", "min_tokens")
        _check(
            self.max_tokens is None or self.min_tokens <= self.max_tokens,
            "min_tokens must not exceed max_tokens",
            "min_tokens",
        )
        _check(self.logprobs is None or 0 <= self.logprobs <= 20, "logprobs must be in [0, 20]", "logprobs")
        _check(
            self.prompt_logprobs is None or 0 <= self.prompt_logprobs <= 20,
            "prompt_logprobs must be in [0, 20]",
            "prompt_logprobs",
        )
        _check(
            not (self.min_tokens and self.structured_outputs is not None),
            "min_tokens cannot be combined with structured outputs: the grammar decides where the output ends",
            "min_tokens",
        )
        _check(all(isinstance(s, str) and s for s in self.stop), "stop must be non-empty strings", "stop")
        _check(len(self.stop) <= 16, "at most 16 stop strings", "stop")
        _check(
            self.allowed_token_ids is None or len(self.allowed_token_ids) > 0,
            "allowed_token_ids must not be empty",
            "allowed_token_ids",
        )
        _check(
            not (self.allowed_token_ids is not None and self.structured_outputs is not None),
            "allowed_token_ids cannot be combined with structured outputs: the grammar decides the tokens",
            "allowed_token_ids",
        )
        _check(
            all(isinstance(w, str) and w.strip() for w in self.bad_words),
            "bad_words must be non-empty strings",
            "bad_words",
        )
        _check(len(self.bad_words) <= 128, "at most 128 bad words", "bad_words")
        _check(
            self.truncate_prompt_tokens is None
            or self.truncate_prompt_tokens == -1
            or self.truncate_prompt_tokens >= 1,
            "truncate_prompt_tokens must be -1 or an integer >= 1",
            "truncate_prompt_tokens",
        )
        if self.logit_bias:
            _check(
                all(-100 <= b <= 100 for b in self.logit_bias.values()),
                "logit_bias values must be in [-100, 100]",
                "logit_bias",
            )

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


_REAL_FIELDS = (
    "temperature",
    "top_p",
    "min_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
)
_INT_FIELDS = (
    "n",
    "top_k",
    "seed",
    "max_tokens",
    "min_tokens",
    "logprobs",
    "prompt_logprobs",
    "truncate_prompt_tokens",
)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value  # NaN fails


def _check(condition: bool, message: str, param: str) -> None:
    if not condition:
        raise InvalidRequestError(message, param=param)
