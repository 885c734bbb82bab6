"""What the engine fuzz test (`test_engine_fuzz`) generates: engine setups, mixed requests and the programs of
adds, steps, aborts and recoveries that drive them (hypothesis strategies)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from switchyard.config import EngineConfig
from switchyard.engine.sampling_params import SamplingParams
from switchyard.engine.structured.params import StructuredOutputsParams

MAX_MODEL_LEN = 128
VOCAB = 320
TARGET_KV_BYTES_PER_TOKEN = 2 * 2 * 2 * 16 * 4
"""K/V x layers x kv_heads x head_dim x float32 bytes of the tiny test model."""
DRAFT_KV_BYTES_PER_TOKEN = 2 * 1 * 2 * 16 * 4
"""The same for the one-layer draft model built below."""
MAX_STEPS = 3000
"""Steps the drain may take before the engine counts as stuck (a request is at most ~100 tokens)."""

_prefix_rng = random.Random(0)
PREFIXES: tuple[tuple[int, ...], ...] = tuple(
    tuple(_prefix_rng.randrange(3, VOCAB) for _ in range(length)) for length in (9, 20, 37)
)
"""Shared prompt prefixes, so that requests hit each other's blocks in the prefix cache."""
LOOPING = tuple([7, 8, 9, 10, 11] * 4)
"""A repetitive prefix the n-gram proposer always finds matches in."""

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"a": {"enum": [1, 2, 3]}, "b": {"type": "boolean"}},
    "required": ["a", "b"],
    "additionalProperties": False,
}
CHOICES = ("yes", "no", "maybe so")
STOP_STRINGS = ("e", "a", " t", ".", "\n", "ou")
BAD_WORDS = ("e", "in", " t", "ou", "the", "{")
"""Banned words; "e" and "{" clash with the JSON grammar's "true", "false" and opening brace."""


@dataclass(frozen=True)
class EngineSetup:
    """The engine settings one example runs under."""

    block_size: int
    num_blocks: int
    max_num_seqs: int
    max_num_batched_tokens: int
    speculative: str | None
    """None, "ngram", "draft" (a one-layer random draft, mostly wrong) or "self-draft" (the target drafts for
    itself, so greedy drafts are always accepted)."""
    num_speculative_tokens: int
    spec_max_batch_size: int
    kv_full_policy: str
    prefix_caching: bool
    max_queue_time: float | None

    def config(self, model: Path, draft: Path) -> EngineConfig:
        per_token = TARGET_KV_BYTES_PER_TOKEN
        if self.speculative == "draft":
            per_token += DRAFT_KV_BYTES_PER_TOKEN
        elif self.speculative == "self-draft":
            per_token += TARGET_KV_BYTES_PER_TOKEN
            draft = model
        return EngineConfig(
            model=str(model),
            dtype="float32",
            max_model_len=MAX_MODEL_LEN,
            block_size=self.block_size,
            kv_cache_memory=self.num_blocks * self.block_size * per_token,
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
            kv_full_policy=self.kv_full_policy,
            enable_prefix_caching=self.prefix_caching,
            speculative_method="draft" if self.speculative == "self-draft" else self.speculative,
            speculative_model=str(draft) if self.speculative in ("draft", "self-draft") else None,
            num_speculative_tokens=self.num_speculative_tokens,
            spec_max_batch_size=self.spec_max_batch_size,
            max_queue_time=self.max_queue_time,
        )


@dataclass(frozen=True)
class RequestSpec:
    """One request to add: prompt, sampling parameters (as keyword arguments), priority and tenant."""

    prompt: tuple[int, ...]
    kwargs: tuple[tuple[str, Any], ...]
    priority: int = 0
    tenant: str | None = None
    stale: bool = False
    """Arrived two hours ago: under a queue time limit it fails at the next step, unless it is still waiting
    for its grammar then (queue time counts only in the scheduler's queue)."""

    def params(self) -> SamplingParams:
        kwargs = dict(self.kwargs)
        if "logit_bias" in kwargs:
            kwargs["logit_bias"] = dict(kwargs["logit_bias"])
        for name in ("stop", "stop_token_ids", "bad_words", "allowed_token_ids"):
            if name in kwargs:
                kwargs[name] = list(kwargs[name])
        structured = kwargs.pop("structured", None)
        if structured == "json":
            kwargs["structured_outputs"] = StructuredOutputsParams(json=SCHEMA)
        elif structured == "choice":
            kwargs["structured_outputs"] = StructuredOutputsParams(choice=CHOICES)
        return SamplingParams(**kwargs)

    @property
    def structured(self) -> str | None:
        return dict(self.kwargs).get("structured")


@st.composite
def engine_setups(draw: st.DrawFn, crowded: bool = False) -> EngineSetup:
    """Engine settings; `crowded` ones have a tiny cache and speculate, so that requests fight for blocks."""
    block_size = draw(st.sampled_from([4] if crowded else [4, 16]))
    max_num_seqs = draw(st.integers(3 if crowded else 1, 6))
    choices = ["ngram", "draft", "self-draft"] if crowded else [None, None, "ngram", "draft", "self-draft"]
    speculative = draw(st.sampled_from(choices))
    return EngineSetup(
        block_size=block_size,
        num_blocks=draw(st.integers(40, 100 if crowded else 200)) // block_size,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=draw(st.integers(max_num_seqs, 48)),
        speculative=speculative,
        num_speculative_tokens=draw(st.integers(1, 4)),
        spec_max_batch_size=draw(st.sampled_from([8] if crowded else [2, 8])),
        kv_full_policy=draw(st.sampled_from(["queue", "queue", "preempt", "reject"])),
        prefix_caching=draw(st.booleans()) or draw(st.booleans()),
        max_queue_time=draw(st.sampled_from([None, None, 3600.0])),
    )


@st.composite
def request_specs(draw: st.DrawFn, crowded: bool = False) -> RequestSpec:
    """A request; `crowded` ones repeat a few prompts, so that they share blocks in the prefix cache."""
    prefix = draw(st.sampled_from([*PREFIXES, LOOPING] if crowded else [(), (), *PREFIXES, LOOPING]))
    suffix_length = 2 if crowded else 24
    suffix = draw(st.lists(st.integers(3, VOCAB - 1), min_size=0 if prefix else 1, max_size=suffix_length))
    structured = draw(st.sampled_from([None, None, None, None, "json", "choice"]))
    mode = draw(st.sampled_from(["greedy", "greedy", "seeded", "random"]))
    max_tokens = draw(st.integers(12 if structured else 1, 24))
    n = draw(st.sampled_from([1, 1, 1, 2] if crowded else [1, 1, 2, 3]))  # n > 1 never speculates
    kwargs: dict[str, Any] = {"max_tokens": max_tokens, "n": n}
    if mode == "greedy":
        kwargs["temperature"] = 0.0
    else:
        kwargs["temperature"] = draw(st.sampled_from([0.6, 1.0, 1.5]))
        if mode == "seeded":
            kwargs["seed"] = draw(st.integers(0, 1000))
        if draw(st.booleans()):
            kwargs["top_p"] = draw(st.sampled_from([0.5, 0.9]))
        if draw(st.booleans()):
            kwargs["top_k"] = draw(st.sampled_from([1, 5, 40]))
    if draw(st.booleans()):
        kwargs["ignore_eos"] = True
    if draw(st.integers(0, 3)) == 0:  # token 2 is EOS: a bias towards it makes EOS and min_tokens matter
        token = draw(st.one_of(st.just(2), st.integers(0, VOCAB - 1)))
        kwargs["logit_bias"] = ((token, draw(st.sampled_from([-50.0, 3.0, 8.0]))),)
    if draw(st.integers(0, 4)) == 0:
        kwargs["repetition_penalty"] = draw(st.sampled_from([0.7, 1.3]))
    if draw(st.integers(0, 4)) == 0:
        kwargs["presence_penalty"] = draw(st.sampled_from([-1.0, 1.0]))
    if draw(st.integers(0, 4)) == 0:
        kwargs["bad_words"] = tuple(
            draw(st.lists(st.sampled_from(BAD_WORDS), min_size=1, max_size=2, unique=True))
        )
    if structured is not None:
        kwargs["structured"] = structured
    else:
        if draw(st.booleans()):
            kwargs["min_tokens"] = draw(st.integers(0, max_tokens))
        stop = draw(st.lists(st.sampled_from(STOP_STRINGS), max_size=2, unique=True))
        if stop:
            kwargs["stop"] = tuple(stop)
            kwargs["include_stop_str_in_output"] = draw(st.booleans())
        if draw(st.integers(0, 4)) == 0:
            kwargs["skip_special_tokens"] = False
        stop_ids = draw(st.lists(st.integers(0, VOCAB - 1), max_size=2))
        if stop_ids:
            kwargs["stop_token_ids"] = tuple(stop_ids)
        if draw(st.integers(0, 5)) == 0:  # more than the two stop ids, so min_tokens leaves a token to pick
            allowed = draw(st.lists(st.integers(2, VOCAB - 1), min_size=4, max_size=12, unique=True))
            kwargs["allowed_token_ids"] = tuple(sorted(allowed))
    rare = 6 if crowded else 2  # logprobs never speculate either
    logprobs = draw(st.sampled_from([*[None] * rare, 0, 3]))
    if logprobs is not None:
        kwargs["logprobs"] = logprobs
    prompt_logprobs = draw(st.sampled_from([*[None] * (rare + 1), 0, 2]))
    if prompt_logprobs is not None:
        kwargs["prompt_logprobs"] = prompt_logprobs
    return RequestSpec(
        prompt=prefix + tuple(suffix),
        kwargs=tuple(sorted(kwargs.items())),
        priority=draw(st.sampled_from([0, 0, 1, 2])),
        tenant=draw(st.sampled_from([None, "a", "b"])),
        stale=draw(st.integers(0, 9)) == 0,
    )


ABORT_TARGETS = ("any", "awaiting", "prefill", "preempted", "forked", "decoding")
"""Which in-flight request an abort picks, so that every state gets aborted now and then."""


def operations(crowded: bool = False) -> st.SearchStrategy[tuple[Any, ...]]:
    """One operation of a program: mostly adds, steps between them, now and then an abort, a prefix-cache
    reset or a recovery as the watchdog runs it after a hung step."""
    weighted = {
        "add": (st.tuples(st.just("add"), request_specs(crowded)), 5),
        "step": (st.tuples(st.just("step"), st.integers(1, 4)), 3),
        "abort": (st.tuples(st.just("abort"), st.sampled_from(ABORT_TARGETS), st.integers(0, 7)), 1),
        "other": (st.tuples(st.sampled_from(["reset_prefix_cache", "recover_after_hang"])), 1),
    }
    kinds = [kind for kind, (_, weight) in weighted.items() for _ in range(weight)]
    return st.sampled_from(kinds).flatmap(lambda kind: weighted[kind][0])
