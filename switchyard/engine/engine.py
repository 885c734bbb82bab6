"""The engine step loop: admit requests, schedule, run the model, sample, detokenize, report.

`LLMEngine` is synchronous and single-threaded; the offline `LLM` drives it in a loop and the server drives it
from an asyncio task. Bad requests raise InvalidRequestError at `add_request` and never reach the loop; a failure
inside one request's processing fails that request only.
"""

from __future__ import annotations

import itertools
import logging
import time
from concurrent.futures import FIRST_COMPLETED, Future
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from pathlib import Path

import torch

from switchyard.config import EngineConfig
from switchyard.engine.block_manager import BlockManager
from switchyard.engine.detokenizer import IncrementalDetokenizer
from switchyard.engine.memory import (
    KVCacheBudget,
    analytic_activation_bytes,
    available_bytes,
    model_bytes,
    peak_rss_bytes,
    plan_budget,
)
from switchyard.engine.model_runner import ForwardResult, ModelRunner
from switchyard.engine.policy import PriorityFairPolicy, SchedulingPolicy
from switchyard.engine.sampler import Sampler, SamplingBatch, SamplingRow, check_token_ids, new_generator
from switchyard.engine.sampling_params import SamplingParams
from switchyard.engine.scheduler import Scheduler, SchedulerOutput
from switchyard.engine.sequence import (
    CompletionOutput,
    FinishReason,
    Request,
    RequestMetrics,
    RequestOutput,
    RequestTiming,
    Sequence,
    SequenceStatus,
    TokenLogprob,
    now,
)
from switchyard.engine.spec.decoder import PendingVerification, SpecDecodeConfig, SpecDecoder
from switchyard.engine.spec.draft import DraftModelProposer, DraftProposal
from switchyard.engine.spec.governor import SpeculationGovernor
from switchyard.engine.spec.ngram import NgramProposer
from switchyard.engine.spec.speculator import SpeculatorProposer
from switchyard.engine.structured.backend import CompiledGrammar, GrammarMatcher, create_backend
from switchyard.engine.structured.manager import StructuredOutputManager
from switchyard.errors import CapacityError, InvalidRequestError, ModelLoadError
from switchyard.models.config import ModelArchConfig
from switchyard.models.cpu_bf16 import auto_dtype, cpu_has_native_bf16
from switchyard.models.kv_cache_dtype import resolve_kv_cache_dtype
from switchyard.models.loader import load_model, parse_dtype
from switchyard.models.packed_linear import can_pack, pack_linear_layers
from switchyard.models.registry import DRAFT_MODEL, MAIN_MODEL, SPECULATOR_MODEL, resolve_model
from switchyard.models.speculator import Speculator, is_speculator_folder, load_speculator
from switchyard.models.tokenizer import (
    eos_token_ids,
    load_chat_template,
    load_generation_defaults,
    load_tokenizer,
)

logger = logging.getLogger(__name__)


def default_draft_model(model: str, method: str = "draft") -> str | None:
    """The bundled draft (or speculator) for the bundled main model; other models need --speculative-model."""
    if model != MAIN_MODEL:
        return None
    return SPECULATOR_MODEL if method == "speculator" else DRAFT_MODEL


def resolve_model_path(name_or_path: str) -> Path:
    """A bundled model name or a folder path -> the folder; ModelLoadError (typed) when neither."""
    return resolve_model(name_or_path)


@dataclass
class EngineStats:
    """A snapshot of the engine's counters, taken on the engine thread (cumulative values since start)."""

    num_running: int
    num_waiting: int
    kv_cache_usage: float
    num_preemptions: int
    num_free_blocks: int
    prefix_cache_queries: int = 0
    """Prompt tokens looked up in the prefix cache."""
    prefix_cache_hits: int = 0
    """Of those, tokens found cached."""
    preemptions_by_priority: dict[int, int] = field(default_factory=dict)
    kv_full_decisions: dict[str, int] = field(default_factory=dict)
    tenant_tokens: dict[str, int] = field(default_factory=dict)
    """Tokens computed for each tenant (prefill and decode)."""
    num_hung_steps: int = 0
    grammar_events: dict[str, int] = field(default_factory=dict)
    """Structured outputs: grammars compiled, compile cache hits, compile failures, rejected tokens."""
    grammar_seconds: dict[str, float] = field(default_factory=dict)
    """Structured outputs: seconds spent compiling grammars and filling/applying token masks."""
    spec_decode: dict[str, int] = field(default_factory=dict)
    """Speculative decoding: verifying sequence-steps, proposed, accepted and emitted tokens."""


class LLMEngine:
    def __init__(self, config: EngineConfig, policy: SchedulingPolicy | None = None) -> None:
        self.config = config
        self.device = config.resolved_device()
        folder = resolve_model_path(config.model)
        self.model_path = folder
        arch = ModelArchConfig.from_folder(folder)
        self.model_config = arch
        if config.dtype == "auto":
            self.dtype = parse_dtype(auto_dtype(arch.torch_dtype, self.device))
        else:
            self.dtype = parse_dtype(config.dtype)
            if self.device.type == "cpu" and self.dtype != torch.float32 and not cpu_has_native_bf16():
                logger.warning(
                    "dtype %s on a CPU without native bf16/fp16 matrix products: every product is emulated "
                    "(tens of times slower than float32; --dtype auto picks float32 here)",
                    config.dtype,
                )
        self.kv_dtype = resolve_kv_cache_dtype(config.kv_cache_dtype, self.dtype)
        self.max_model_len = min(
            config.max_model_len or arch.max_position_embeddings, arch.max_position_embeddings
        )
        if config.max_model_len and config.max_model_len > arch.max_position_embeddings:
            raise ValueError(
                f"max_model_len {config.max_model_len} exceeds the model's max_position_embeddings "
                f"{arch.max_position_embeddings}"
            )
        self.tokenizer = None
        if not config.skip_tokenizer:
            self.tokenizer = load_tokenizer(Path(config.tokenizer) if config.tokenizer else folder)
            if config.chat_template is not None:
                self.tokenizer.chat_template = load_chat_template(config.chat_template)
        generation = load_generation_defaults(folder)
        self.eos_token_ids = eos_token_ids(self.tokenizer, arch.eos_token_ids, generation)
        self.generation_defaults = generation

        rss_before = peak_rss_bytes()
        self.model = load_model(folder, self.dtype, self.device, max_positions=self.max_model_len)
        weights = model_bytes(self.model)
        pack = config.pack_weights and can_pack(self.device, self.dtype)
        if pack:
            pack_linear_layers(self.model)
        spec_config = None
        draft_model = None
        speculator: Speculator | None = None
        draft_weights = 0
        if config.speculative_method is not None:
            spec_config = SpecDecodeConfig(
                method=config.speculative_method,
                draft_model=config.speculative_model
                or default_draft_model(config.model, config.speculative_method),
                num_speculative_tokens=config.num_speculative_tokens,
                max_batch_size=config.spec_max_batch_size,
                adaptive=config.spec_adaptive,
                mask_drafts=config.spec_mask_drafts,
                lookup_below=config.spec_lookup_below,
                ngram_min=config.spec_ngram_min,
                ngram_max=config.spec_ngram_max,
            )
            if spec_config.method == "draft":
                assert spec_config.draft_model is not None
                if is_speculator_folder(resolve_model_path(spec_config.draft_model)):
                    raise ModelLoadError(
                        "this is a speculator, not a draft model: use --speculative-method speculator",
                        spec_config.draft_model,
                    )
                # Loaded before the cache is sized: its weights and its cache share the memory budget.
                draft_model = load_model(
                    resolve_model_path(spec_config.draft_model),
                    self.dtype,
                    self.device,
                    max_positions=self.max_model_len,
                )
                draft_weights = model_bytes(draft_model)
                if pack:
                    pack_linear_layers(draft_model)  # the draft's steps are as memory-bound as the target's
            elif spec_config.method == "speculator":
                assert spec_config.draft_model is not None
                speculator = load_speculator(
                    resolve_model_path(spec_config.draft_model), self.dtype, self.device
                )
                if speculator.config.hidden_size != arch.hidden_size:
                    raise ModelLoadError(
                        f"the speculator reads hidden states of size {speculator.config.hidden_size}, but the "
                        f"model's are {arch.hidden_size}: it was trained for another model",
                        spec_config.draft_model,
                    )
                draft_weights = model_bytes(speculator)
                if pack:
                    pack_linear_layers(speculator, every_linear=True)  # its steps are a few small products
        self.scheduler_config = config.scheduler_config(self.device)
        self.kv_budget = self._size_kv_cache(
            weights, rss_before, draft_model.config if draft_model is not None else None, draft_weights
        )
        logger.info(
            "dtype %s, KV cache entries %s; KV cache budget: %s",
            str(self.dtype).removeprefix("torch."),
            str(self.kv_dtype).removeprefix("torch."),
            self.kv_budget.describe(),
        )

        self.block_manager = BlockManager(
            self.kv_budget.num_blocks, config.block_size, enable_prefix_cache=config.enable_prefix_caching
        )
        self.runner = ModelRunner(
            self.model, self.kv_budget.num_blocks, config.block_size, self.dtype, self.device, self.kv_dtype
        )
        self.policy = policy if policy is not None else PriorityFairPolicy(config.tenant_weights)
        self.scheduler = Scheduler(self.scheduler_config, self.block_manager, self.policy)
        self.sampler = Sampler(generator=torch.Generator(device="cpu").manual_seed(config.seed))
        self.requests: dict[str, Request] = {}
        self._seq_ids = itertools.count()
        self._pending: list[RequestOutput] = []
        self._epoch = 0
        """Bumped by recover_after_hang: a step still running from an older epoch must not touch state."""
        self.current_step_requests: set[str] = set()
        """Request ids in the step being run (what a watchdog blames when the step hangs)."""
        self.num_hung_steps = 0
        self.num_generated_tokens = 0
        self.num_prompt_tokens = 0
        self.spec_decoder: SpecDecoder | None = None
        self._proposals: dict[int, DraftProposal] = {}
        """This step's proposals being verified: their draft distributions (draft-model method, sampled
        requests) and the grammar masks filled while drafting."""
        if spec_config is not None:
            draft = None
            if draft_model is not None:
                draft = DraftModelProposer(
                    draft_model,
                    target_vocab_size=arch.vocab_size,
                    dtype=self.dtype,
                    device=self.device,
                    num_blocks=self.kv_budget.num_blocks,
                    kv_dtype=self.kv_dtype,
                    block_size=config.block_size,
                    sampler=self.sampler,
                )
            speculating = None
            if speculator is not None:
                lookup = None
                if spec_config.lookup_below > 0:
                    lookup = NgramProposer(spec_config.ngram_min, spec_config.ngram_max)
                speculating = SpeculatorProposer(
                    speculator, arch.vocab_size, self.sampler, lookup, spec_config.lookup_below
                )
            self.spec_decoder = SpecDecoder(spec_config, self.sampler, draft, speculating)
        self.spec_governor = (
            SpeculationGovernor() if spec_config is not None and spec_config.adaptive else None
        )
        self._structured: StructuredOutputManager | None = None
        self._awaiting_grammar: dict[str, tuple[Request, Future[CompiledGrammar]]] = {}
        """Requests whose grammar is compiling; they enter the scheduler when it is ready."""

    # ----------------------------------------------------------------- set-up
    def _size_kv_cache(
        self, weights: int, rss_before: int, draft_config: ModelArchConfig | None, draft_weights: int
    ) -> KVCacheBudget:
        arch = self.model_config
        tokens = self.scheduler_config.max_num_batched_tokens
        bs = self.config.block_size
        probe = ModelRunner(self.model, -(-tokens // bs), bs, self.dtype, self.device, self.kv_dtype)
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            base = torch.cuda.memory_allocated(self.device)
            probe.profile_forward(tokens)
            measured = torch.cuda.max_memory_allocated(self.device) - base
        else:
            before = max(peak_rss_bytes(), rss_before + weights)
            probe.profile_forward(tokens)
            measured = max(0, peak_rss_bytes() - before)
        del probe
        activations = max(measured, analytic_activation_bytes(arch, tokens, self.dtype))
        return plan_budget(
            config=arch,
            dtype=self.kv_dtype,
            device=self.device,
            weights_bytes=weights,
            activation_bytes=activations,
            block_size=bs,
            max_model_len=self.max_model_len,
            max_num_seqs=self.scheduler_config.max_num_seqs,
            kv_cache_memory=self.config.kv_cache_memory,
            memory_utilization=self.config.memory_utilization,
            available_after_profile=available_bytes(self.device),
            draft_config=draft_config,
            draft_weights_bytes=draft_weights,
        )

    @property
    def structured_outputs(self) -> StructuredOutputManager:
        """The grammar backend and compiled-grammar cache, created on first use (it indexes the vocabulary)."""
        if self._structured is None:
            if self.tokenizer is None:
                raise InvalidRequestError(
                    "structured outputs need a tokenizer; this engine has none", param="structured_outputs"
                )
            backend = create_backend(
                self.config.structured_outputs_backend,
                self.tokenizer,
                self.model_config.vocab_size,
                self.eos_token_ids,
            )
            self._structured = StructuredOutputManager(backend)
        return self._structured

    # --------------------------------------------------------------- requests
    def tokenize(self, prompt: str) -> list[int]:
        if self.tokenizer is None:
            raise InvalidRequestError("this engine has no tokenizer: pass prompt token ids", param="prompt")
        return list(self.tokenizer.encode(prompt, add_special_tokens=True))

    def add_request(
        self,
        request_id: str,
        prompt: str | list[int],
        params: SamplingParams | None = None,
        *,
        arrival_time: float | None = None,
        priority: int = 0,
        tenant: str | None = None,
    ) -> None:
        """Validate and queue a request. Raises InvalidRequestError for a request that can never be served."""
        params = params or SamplingParams()
        if request_id in self.requests:
            raise InvalidRequestError(f"request id {request_id!r} is already in use", param="request_id")
        prompt_text = prompt if isinstance(prompt, str) else None
        token_ids = self.tokenize(prompt) if isinstance(prompt, str) else list(prompt)
        if params.truncate_prompt_tokens is not None:
            token_ids = self.truncate_prompt(token_ids, params)
        self._validate(token_ids, params)
        if self.config.kv_full_policy == "reject":
            self._reject_if_kv_full(len(token_ids))
        max_tokens = self._resolve_max_tokens(len(token_ids), params)
        request = Request(
            request_id=request_id,
            prompt_token_ids=token_ids,
            params=params,
            max_tokens=max_tokens,
            eos_token_ids=self.eos_token_ids,
            timing=RequestTiming(arrival=arrival_time if arrival_time is not None else now()),
            prompt=prompt_text,
            priority=priority,
            tenant=tenant,
            bad_words_token_ids=self._bad_words_token_ids(params),
        )
        if params.prompt_logprobs is not None:
            request.prompt_logprobs = [None] * len(token_ids)
        future = None
        if params.structured_outputs is not None:
            future = self.structured_outputs.submit(params.structured_outputs)
            if future.done():
                request.compiled_grammar = future.result()  # raises InvalidRequestError for a bad grammar
        seq = self._new_sequence(request, 0, list(token_ids))
        request.sequences.append(seq)
        self.requests[request_id] = request
        self.num_prompt_tokens += len(token_ids)
        if future is not None and request.compiled_grammar is None:
            seq.status = SequenceStatus.AWAITING_GRAMMAR
            self._awaiting_grammar[request_id] = (request, future)
        else:
            self.scheduler.add(seq)

    def truncate_prompt(self, token_ids: list[int], params: SamplingParams) -> list[int]:
        """The prompt's last `truncate_prompt_tokens` tokens; for -1, as many as fit beside max_tokens."""
        keep = params.truncate_prompt_tokens
        if keep is None:
            return token_ids
        if keep == -1:
            room = self.max_model_len - (params.max_tokens if params.max_tokens is not None else 1)
            keep = max(1, room)
        return token_ids[-keep:]

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

    def _validate(self, token_ids: list[int], params: SamplingParams) -> None:
        params.validate()
        if not token_ids:
            raise InvalidRequestError("prompt is empty", param="prompt")
        vocab = self.model_config.vocab_size
        if min(token_ids) < 0 or max(token_ids) >= vocab:
            raise InvalidRequestError(f"prompt token ids must be in [0, {vocab})", param="prompt")
        if len(token_ids) >= self.max_model_len:
            raise InvalidRequestError(
                f"prompt has {len(token_ids)} tokens; the maximum context length is {self.max_model_len}, "
                "which must also leave room for at least one generated token",
                param="prompt",
            )
        max_tokens = self._resolve_max_tokens(len(token_ids), params)
        total = len(token_ids) + max_tokens
        if total > self.max_model_len:
            raise InvalidRequestError(
                f"prompt ({len(token_ids)} tokens) + max_tokens ({max_tokens}) = {total} exceeds the maximum "
                f"context length {self.max_model_len}",
                param="max_tokens",
            )
        if self.block_manager.blocks_for_tokens(total) > self.block_manager.num_blocks:
            raise InvalidRequestError(
                f"prompt + max_tokens = {total} tokens can never fit in the KV cache "
                f"({self.block_manager.num_blocks * self.block_manager.block_size} tokens)",
                param="max_tokens",
            )
        if params.n > self.scheduler_config.max_num_seqs:
            raise InvalidRequestError(f"n must be <= {self.scheduler_config.max_num_seqs}", param="n")
        check_token_ids(params, vocab)
        allowed = params.allowed_token_ids
        ends = set(self.eos_token_ids) | set(params.stop_token_ids)
        if allowed is not None and params.min_tokens and set(allowed) <= ends:
            raise InvalidRequestError(
                "allowed_token_ids holds only end-of-sequence and stop tokens, which min_tokens forbids",
                param="allowed_token_ids",
            )

    def _resolve_max_tokens(self, prompt_len: int, params: SamplingParams) -> int:
        """max_tokens as asked, or, when unset, as many as the context and the whole KV cache allow."""
        if params.max_tokens is not None:
            return params.max_tokens
        capacity = self.block_manager.num_blocks * self.block_manager.block_size
        return max(1, min(self.max_model_len, capacity) - prompt_len)

    def _reject_if_kv_full(self, prompt_len: int) -> None:
        """In reject mode, refuse a request whose prompt would not find blocks behind those already waiting."""
        manager = self.block_manager
        queued = sum(manager.blocks_for_tokens(seq.num_tokens) for seq in self.scheduler.waiting)
        if manager.blocks_for_tokens(prompt_len) + queued > manager.num_free_blocks:
            self.scheduler.kv_full_decisions["rejected"] += 1
            raise CapacityError("the KV cache is full; retry later")

    def _new_sequence(self, request: Request, index: int, token_ids: list[int]) -> Sequence:
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
            grammar=self._new_matcher(request),
        )

    def _new_matcher(self, request: Request) -> GrammarMatcher | None:
        if request.compiled_grammar is None:
            return None
        return self.structured_outputs.new_matcher(request.compiled_grammar)

    def _admit_compiled(self) -> list[RequestOutput]:
        """Move requests whose grammar finished compiling into the scheduler; fail those that did not compile."""
        outputs: list[RequestOutput] = []
        for request_id, (request, future) in list(self._awaiting_grammar.items()):
            if not future.done():
                continue
            del self._awaiting_grammar[request_id]
            try:
                request.compiled_grammar = future.result()
            except Exception as exc:
                outputs.append(self._fail(request, str(exc), code="invalid_grammar"))
                continue
            for seq in request.sequences:
                seq.grammar = self._new_matcher(request)
                self.scheduler.add(seq)
        return outputs

    def abort_request(self, request_id: str) -> None:
        """Stop a request now and free its blocks; its final output comes from the next step()."""
        request = self.requests.get(request_id)
        if request is None:
            return
        self._awaiting_grammar.pop(request_id, None)
        for seq in request.sequences:
            if not seq.is_finished:
                self._finish(seq, FinishReason.ABORT)
        self._pending.append(self._request_output(request))
        self._forget_if_done(request)

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests) or bool(self._pending)

    def reset_prefix_cache(self) -> int:
        """Drop the cached prefixes no request is using, so the next identical prompt is computed again (as
        benchmarks that repeat a workload need); returns the number of blocks freed."""
        return self.block_manager.reset_prefix_cache()

    def stats(self) -> EngineStats:
        cache = self.block_manager.prefix_cache
        scheduler = self.scheduler
        return EngineStats(
            num_running=scheduler.num_running,
            num_waiting=scheduler.num_waiting,
            kv_cache_usage=self.block_manager.usage,
            num_preemptions=scheduler.num_preemptions,
            num_free_blocks=self.block_manager.num_free_blocks,
            prefix_cache_queries=cache.num_queried_tokens if cache else 0,
            prefix_cache_hits=cache.num_hit_tokens if cache else 0,
            preemptions_by_priority=dict(scheduler.preemptions_by_priority),
            kv_full_decisions=dict(scheduler.kv_full_decisions),
            tenant_tokens=dict(getattr(self.policy, "tokens_served", {})),
            num_hung_steps=self.num_hung_steps,
            **self._grammar_stats(),
            spec_decode=self._spec_stats(),
        )

    def _spec_stats(self) -> dict[str, int]:
        if self.spec_decoder is None:
            return {}
        stats = self.spec_decoder.stats
        return {
            "steps": stats.steps,
            "proposed": stats.proposed,
            "accepted": stats.accepted,
            "emitted": stats.emitted,
        }

    def _grammar_stats(self) -> dict[str, dict]:  # type: ignore[type-arg]
        if self._structured is None:
            return {}
        stats = self._structured.stats
        return {
            "grammar_events": {
                "compiled": stats.compiled,
                "cache_hit": stats.cache_hits,
                "failed": stats.failed,
                "rejected_token": stats.rejected_tokens,
            },
            "grammar_seconds": {"compile": stats.compile_seconds, "mask": stats.mask_seconds},
        }

    # ------------------------------------------------------------------- step
    def step(self) -> list[RequestOutput]:
        """Run one iteration; return outputs of requests that produced tokens, finished, or failed."""
        epoch = self._epoch
        outputs, self._pending = self._pending, []
        if self.config.max_queue_time is not None:
            outputs += self._expire_queued(now() - self.config.max_queue_time)
        if self._awaiting_grammar:
            outputs += self._admit_compiled()
        step_started = now()
        governor = self.spec_governor
        governed = self._governed_batch_size() if governor is not None else None
        speculate = self.spec_decoder is not None and (
            governor is None or governed is None or governor.should_speculate(governed)
        )
        speculating = self._propose_drafts() if speculate else []
        plan = self.scheduler.schedule()
        verifying = self._keep_scheduled_drafts(plan, speculating) if speculating else frozenset()
        self.current_step_requests = {seq.request.request_id for seq, _ in plan.scheduled}
        if plan.is_empty and self._awaiting_grammar and not outputs:
            # Nothing to run but grammars compiling: wait for one briefly instead of spinning.
            pending = [future for _, future in self._awaiting_grammar.values()]
            wait_futures(pending, timeout=0.05, return_when=FIRST_COMPLETED)
            return self._admit_compiled()
        if plan.is_empty:
            stalled = self.scheduler.waiting.peek() if not self.scheduler.running else None
            if stalled is not None:
                # Admission checks make this unreachable; fail the head request rather than spin forever.
                outputs.append(
                    self._fail(stalled.request, "request could not be scheduled: KV cache too small")
                )
            return outputs
        start = now()
        for seq, _ in plan.scheduled:
            if seq.request.timing.first_scheduled is None:
                seq.request.timing.first_scheduled = start
        wants_prompt = {
            seq.seq_id
            for seq, _ in plan.scheduled
            if seq.request.prompt_logprobs is not None and seq.num_computed_tokens < seq.num_prompt_tokens - 1
        }
        # The governor compares pure-decode steps only: a prefill chunk in the step would count as its cost.
        emitted_before = None
        if governed is not None and all(
            s.num_computed_tokens >= s.num_prompt_tokens for s, _ in plan.scheduled
        ):
            emitted_before = sum(seq.num_output_tokens - seq.num_draft_tokens for seq, _ in plan.scheduled)
        try:
            self.runner.copy_blocks(plan.block_copies)
            result = self.runner.execute(plan.scheduled, wants_prompt, verifying)
        except Exception as exc:  # the forward failed: fail this step's requests, keep the engine alive
            logger.exception("forward pass failed")
            failed = {seq.request.request_id: seq.request for seq, _ in plan.scheduled}
            for request in failed.values():
                outputs.append(self._fail(request, f"internal error during forward pass: {exc}"))
            return outputs
        if epoch != self._epoch:
            return []  # a watchdog gave up on this step and rebuilt the engine meanwhile: touch nothing

        for seq, num_new in plan.scheduled:
            seq.num_computed_tokens += num_new
            if seq.seq_id not in verifying:  # drafts are not cached before they are verified
                self.block_manager.cache_full_blocks(seq)
        self._record_prompt_logprobs(result)
        touched = self._sample(result)
        if verifying:
            touched += [r for r in self._verify_drafts(result) if r not in touched]
        if self.spec_decoder is not None and self.spec_decoder.wants_hidden_states:
            self._observe_sampled_hidden(result)
        for request in touched:
            outputs.append(self._request_output(request))
            self._forget_if_done(request)
        if governor is not None and governed is not None and emitted_before is not None:
            emitted = sum(seq.num_output_tokens for seq, _ in plan.scheduled) - emitted_before
            governor.record(governed, speculate, emitted, now() - step_started)
        return outputs

    def _sample(self, result: ForwardResult) -> list[Request]:
        rows: list[Sequence] = []
        row_logits: list[int] = []
        for i, seq in enumerate(result.sampled_seqs):
            request = seq.request
            if not request.forked and seq.sample_index == 0:
                for index in range(1, request.params.n):
                    child = self._new_sequence(request, index, list(seq.token_ids))
                    child.num_computed_tokens = seq.num_computed_tokens
                    self.block_manager.fork(seq, child)
                    request.sequences.append(child)
                    self.scheduler.add_running(child)
                    rows.append(child)
                    row_logits.append(i)
            rows.append(seq)
            row_logits.append(i)
        if not rows:
            return []
        logits = result.logits
        if len(row_logits) != logits.shape[0] or row_logits != list(range(len(row_logits))):
            logits = logits[torch.tensor(row_logits, device=logits.device)]
        if self._structured is not None and any(seq.grammar is not None for seq in rows):
            self._structured.mask_logits(logits, [seq.grammar for seq in rows])
        batch = SamplingBatch.build(
            [
                SamplingRow(
                    params=seq.request.params,
                    prompt_token_ids=seq.request.prompt_token_ids,
                    output_token_ids=seq.output_token_ids,
                    generator=seq.generator,
                    eos_token_ids=seq.request.eos_token_ids,
                    bad_words_token_ids=seq.request.bad_words_token_ids,
                )
                for seq in rows
            ],
            vocab_size=logits.shape[-1],
            device=logits.device,
        )
        sampled = self.sampler(logits, batch)
        token_ids = sampled.token_ids.tolist()
        token_logprobs = sampled.logprobs.tolist()
        top = None
        if sampled.top_logprobs is not None:
            top = (sampled.top_logprobs[0].tolist(), sampled.top_logprobs[1].tolist())
        stamp = now()
        touched: dict[str, Request] = {}
        epoch = self._epoch
        for row, seq in enumerate(rows):
            if epoch != self._epoch:
                return []
            request = seq.request
            touched[request.request_id] = request
            if request.timing.first_token is None:
                request.timing.first_token = stamp
            try:
                self._append_token(seq, token_ids[row], token_logprobs[row], top, row)
            except Exception as exc:  # one request's post-processing failing must not stop the others
                logger.exception("post-processing failed for request %s", request.request_id)
                self._fail(request, f"internal error while processing output: {exc}")
        return list(touched.values())

    def _append_token(
        self,
        seq: Sequence,
        token: int,
        logprob: float,
        top: tuple[list[list[float]], list[list[int]]] | None,
        row: int,
    ) -> None:
        if seq.is_finished:
            return
        params = seq.request.params
        if seq.grammar is not None and not seq.grammar.accept_token(token):
            if self._structured is not None:
                self._structured.stats.rejected_tokens += 1
            raise RuntimeError(f"sampled token {token} violates the request's grammar")
        seq.token_ids.append(token)
        self.num_generated_tokens += 1
        if params.logprobs is not None:
            seq.cumulative_logprob += logprob
            alternatives = []
            if top is not None and params.logprobs:
                values, ids = top
                alternatives = list(
                    zip(ids[row][: params.logprobs], values[row][: params.logprobs], strict=True)
                )
            seq.logprobs.append(TokenLogprob(token, logprob, alternatives))
        past_min = seq.num_output_tokens >= params.min_tokens
        # A finishing EOS or stop token is kept in token_ids but never shown as text.
        if past_min and not params.ignore_eos and token in seq.request.eos_token_ids:
            self._finish(seq, FinishReason.STOP)
            return
        if past_min and token in params.stop_token_ids:
            self._finish(seq, FinishReason.STOP, token)
            return
        if seq.grammar is not None and seq.grammar.is_terminated():
            self._finish(seq, FinishReason.STOP)  # the grammar is complete: only its stop token was allowed
            return
        if seq.detokenizer is not None:
            stop_string = seq.detokenizer.add_tokens([token]).stop_string
            if stop_string is not None:
                self._finish(seq, FinishReason.STOP, stop_string)
                return
        if seq.num_output_tokens >= seq.request.max_tokens or seq.num_tokens >= self.max_model_len:
            self._finish(seq, FinishReason.LENGTH)

    # ------------------------------------------------------ speculative decoding
    def _governed_batch_size(self) -> int | None:
        """The running count the governor keys this step by; None where speculation is off regardless."""
        spec = self.spec_decoder
        running = len(self.scheduler.running)
        if spec is None or not running or running > spec.config.max_batch_size:
            return None
        return running

    def _propose_drafts(self) -> list[Sequence]:
        """Append proposed tokens to eligible decoding sequences, within the step's token and block budget."""
        spec = self.spec_decoder
        assert spec is not None
        running = self.scheduler.running
        if not running or len(running) > spec.config.max_batch_size:
            return []
        manager = self.block_manager
        spare_tokens = self.scheduler_config.max_num_batched_tokens - sum(
            seq.num_tokens - seq.num_computed_tokens for seq in running
        )
        spare_blocks = manager.num_free_blocks - sum(manager.blocks_needed(seq, 1) for seq in running)
        candidates = []
        for seq in running:
            if not spec.eligible(seq):
                continue
            room = min(
                seq.request.max_tokens - seq.num_output_tokens - 1,  # leave room for the bonus token
                self.max_model_len - seq.num_tokens - 1,
            )
            candidates.append((seq, room))
        proposals = (
            spec.propose(candidates, {seq.seq_id for seq in running}, self._structured) if candidates else {}
        )
        speculating = []
        for seq, _ in candidates:
            if seq.seq_id not in proposals or spare_tokens <= 0:
                continue
            proposal = proposals[seq.seq_id].truncated(spare_tokens)
            drafts = proposal.tokens
            extra_blocks = manager.blocks_needed(seq, 1 + len(drafts)) - manager.blocks_needed(seq, 1)
            if extra_blocks > spare_blocks:
                continue  # speculation must never cause a preemption
            seq.token_ids.extend(drafts)
            seq.num_draft_tokens = len(drafts)
            self._proposals[seq.seq_id] = proposal
            spare_tokens -= len(drafts)
            spare_blocks -= extra_blocks
            speculating.append(seq)
        return speculating

    def _keep_scheduled_drafts(self, plan: SchedulerOutput, speculating: list[Sequence]) -> frozenset[int]:
        """Drop the drafts of sequences not scheduled in full (preempted, paused, cut by the budget)."""
        scheduled = {seq.seq_id: index for index, (seq, _) in enumerate(plan.scheduled)}
        verifying = set()
        for seq in speculating:
            drafts = seq.num_draft_tokens
            index = scheduled.get(seq.seq_id)
            if index is not None and plan.scheduled[index][1] == drafts + 1:
                verifying.add(seq.seq_id)
                continue
            del seq.token_ids[-drafts:]
            seq.num_draft_tokens = 0
            self._proposals.pop(seq.seq_id, None)
            if index is not None:
                plan.scheduled[index] = (seq, 1)
        return frozenset(verifying)

    def _verify_drafts(self, result: ForwardResult) -> list[Request]:
        """Accept or reject each sequence's drafts, emit the verified tokens, roll the rest back.

        The grammar masks are per sequence; the verdicts come from one batched `SpecDecoder.verify`. If that
        batch fails, each sequence is verified alone, so only the one that cannot be verified fails."""
        spec = self.spec_decoder
        assert spec is not None
        touched: list[Request] = []
        pending: list[PendingVerification] = []
        stamp = now()
        running = {seq.seq_id: seq for seq in self.scheduler.running}
        for seq_id, logits in result.verify_logits.items():
            seq = running[seq_id]
            num_drafts = seq.num_draft_tokens
            drafts = seq.token_ids[-num_drafts:]
            del seq.token_ids[-num_drafts:]
            seq.num_draft_tokens = 0
            request = seq.request
            touched.append(request)
            if request.timing.first_token is None:
                request.timing.first_token = stamp
            proposal = self._proposals.pop(seq_id, None)
            try:
                if seq.grammar is not None and self._structured is not None:
                    masks = None if proposal is None else proposal.masks
                    self._mask_verified_positions(seq.grammar, drafts, logits, masks)
                probs = None if proposal is None else proposal.probs
                pending.append(PendingVerification(seq, drafts, logits, probs))
            except Exception as exc:  # one request's verification failing must not stop the others
                self._fail_verification(request, exc)
        try:
            verdicts = list(zip(pending, spec.verify(pending), strict=True))
        except Exception:
            logger.exception("batched verification failed; verifying each sequence alone")
            verdicts = []
            for item in pending:
                try:
                    verdicts.append((item, spec.verify([item])[0]))
                except Exception as exc:
                    self._fail_verification(item.seq.request, exc)
        for item, (emitted, accepted) in verdicts:
            seq = item.seq
            try:
                # KV is valid up to the last accepted draft; the bonus token is computed next step.
                seq.num_computed_tokens = seq.num_tokens + accepted
                for token in emitted:
                    self._append_token(seq, token, float("nan"), None, 0)
                    if seq.is_finished:
                        break
                if not seq.is_finished:
                    self.block_manager.trim(seq, seq.num_tokens)
                    self.block_manager.cache_full_blocks(seq)
                    if spec.wants_hidden_states:  # row `accepted` gave the newest token
                        spec.observe(seq, result.verify_hidden[seq.seq_id][accepted])
            except Exception as exc:
                self._fail_verification(seq.request, exc)
        return touched

    def _observe_sampled_hidden(self, result: ForwardResult) -> None:
        """Hand the speculator the hidden state behind each sampled sequence's newest token."""
        spec = self.spec_decoder
        assert spec is not None and result.sampled_hidden is not None
        for row, seq in enumerate(result.sampled_seqs):
            if not seq.is_finished and seq.sample_index == 0 and seq.request.params.n == 1:
                spec.observe(seq, result.sampled_hidden[row])

    def _fail_verification(self, request: Request, exc: Exception) -> None:
        logger.exception("verification failed for request %s", request.request_id, exc_info=exc)
        self._fail(request, f"internal error while verifying speculative tokens: {exc}")

    def _mask_verified_positions(
        self,
        grammar: GrammarMatcher,
        drafts: list[int],
        logits: torch.Tensor,
        drafted_masks: torch.Tensor | None = None,
    ) -> None:
        """Row i of `logits` gets the grammar's mask after drafts[:i] (drafts were checked at proposal time).
        `drafted_masks` are those rows as the draft model filled them under the same grammar state, so only
        the rows after them (the bonus row) are filled here.

        When the last draft is the grammar's stop token, the bonus row after it stays unmasked: a terminated
        grammar has no mask, and the sequence finishes on the stop token before a bonus token is used. A last
        draft the grammar forbids (a sampled draft-model proposal keeps one: `SpecDecoder.propose`) is masked
        out by its own row, so it is rejected and the row after it is never used.
        """
        assert self._structured is not None
        start = time.perf_counter()
        backend = self._structured.backend
        bitmask = backend.allocate_bitmask(len(drafts) + 1)
        reused = 0 if drafted_masks is None else min(len(drafted_masks), len(drafts))
        if reused:
            bitmask[:reused] = drafted_masks[:reused]  # type: ignore[index]
        rows: list[int] = []
        accepted = 0
        for i, token in enumerate([*drafts, None]):
            if grammar.is_terminated():
                break
            if i >= reused:
                backend.fill_bitmask([grammar], bitmask, [i])
            rows.append(i)
            if token is None:
                break
            if not grammar.accept_token(token):
                if i < len(drafts) - 1:
                    raise RuntimeError(f"draft token {token} violates the request's grammar")
                break
            accepted += 1
        grammar.rollback(accepted)
        backend.apply_bitmask(logits, bitmask, rows)
        stats = self._structured.stats
        stats.masked_rows += len(rows)
        stats.reused_rows += min(reused, len(rows))
        stats.mask_seconds += time.perf_counter() - start

    def _record_prompt_logprobs(self, result: ForwardResult) -> None:
        for seq_id, (first, logits) in result.prompt_logits.items():
            seq = next(s for s in self.scheduler.running if s.seq_id == seq_id)
            request = seq.request
            assert request.prompt_logprobs is not None
            k = request.params.prompt_logprobs or 0
            logprobs = torch.log_softmax(logits, dim=-1)
            targets = torch.tensor(request.prompt_token_ids[first + 1 : first + 1 + logits.shape[0]])
            chosen_values = logprobs.gather(1, targets[:, None])
            ranks = ((logprobs > chosen_values).sum(dim=1) + 1).tolist()
            chosen = chosen_values.squeeze(1).tolist()
            top_values = top_ids = None
            if k:
                top_values, top_ids = (t.tolist() for t in logprobs.topk(k, dim=-1))
            for j, value in enumerate(chosen):
                position = first + 1 + j
                if request.prompt_logprobs[position] is None:
                    alternatives = (
                        list(zip(top_ids[j], top_values[j], strict=True)) if top_ids and top_values else []
                    )
                    request.prompt_logprobs[position] = TokenLogprob(
                        targets[j].item(), value, alternatives, rank=ranks[j]
                    )

    # --------------------------------------------------------------- recovery
    def recover_after_hang(self, max_hangs: int = 1) -> list[RequestOutput]:
        """Rebuild the scheduling state after a step hung (a watchdog gave up waiting for it).

        The hung step may still be running on its thread and holds the old block manager, KV cache and
        queues, so fresh ones replace them and the old epoch's step discards its results if it ever returns.
        Every unfinished request is queued again with its tokens so far: waiting ones resume their wait,
        running ones are recomputed from prompt + generated tokens, and their streams continue where they
        were, without repeats. A request that was in more than `max_hangs` hung steps is failed instead, so
        one poisonous request cannot hang the engine over and over.
        """
        self._epoch += 1
        self.num_hung_steps += 1
        blamed = self.current_step_requests
        self.current_step_requests = set()
        config = self.config
        self.block_manager = BlockManager(
            self.kv_budget.num_blocks, config.block_size, enable_prefix_cache=config.enable_prefix_caching
        )
        self.runner = ModelRunner(
            self.model, self.kv_budget.num_blocks, config.block_size, self.dtype, self.device, self.kv_dtype
        )
        self.policy = self.policy.clone_empty()
        self.scheduler = Scheduler(self.scheduler_config, self.block_manager, self.policy)
        outputs: list[RequestOutput] = []
        for request in sorted(self.requests.values(), key=lambda r: r.timing.arrival):
            if request.request_id in self._awaiting_grammar:
                continue  # never scheduled: nothing of it was in the hung step
            for seq in request.sequences:
                if seq.num_draft_tokens:  # the hung step's unverified proposals are not output
                    del seq.token_ids[-seq.num_draft_tokens :]
                    seq.num_draft_tokens = 0
                seq.block_table, seq.prefix_node, seq.num_cached_blocks = [], None, 0
                seq.num_computed_tokens = 0
                if not seq.is_finished:
                    seq.status = SequenceStatus.WAITING
            if request.request_id in blamed:
                request.num_hangs += 1
            if request.num_hangs > max_hangs:
                outputs.append(
                    self._fail(
                        request, f"the request was in {request.num_hangs} engine steps that hung; failed"
                    )
                )
                continue
            for seq in request.sequences:
                if not seq.is_finished:
                    self.scheduler.add(seq)
        logger.error("engine step hung: state rebuilt, %d requests re-queued", len(self.requests))
        return outputs

    # --------------------------------------------------------------- finishing
    def _finish(self, seq: Sequence, reason: FinishReason, stop_reason: str | int | None = None) -> None:
        if seq.status in (SequenceStatus.WAITING, SequenceStatus.RUNNING):
            self.scheduler.remove(seq)
        if self.spec_decoder is not None:
            self.spec_decoder.release(seq.seq_id)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
        seq.stop_reason = stop_reason
        stopped_on_string = isinstance(stop_reason, str)
        if seq.detokenizer is not None and not stopped_on_string:
            seq.detokenizer.flush()  # release text held back as a possible stop-string prefix
        if seq.request.timing.finished is None and all(s.is_finished for s in seq.request.sequences):
            seq.request.timing.finished = now()

    def _expire_queued(self, arrived_before: float) -> list[RequestOutput]:
        """Fail requests still waiting for their first step that arrived before the cutoff."""
        expired = {
            seq.request.request_id: seq.request
            for seq in self.scheduler.waiting
            if seq.request.timing.first_scheduled is None and seq.request.timing.arrival < arrived_before
        }
        limit = self.config.max_queue_time
        return [
            self._fail(
                request, f"the request waited more than {limit:g} s in the queue", code="queue_timeout"
            )
            for request in expired.values()
        ]

    def _fail(self, request: Request, message: str, code: str = "internal") -> RequestOutput:
        request.error = message
        request.error_code = code
        for seq in request.sequences:
            if not seq.is_finished:
                self._finish(seq, FinishReason.ERROR)
        output = self._request_output(request)
        self._forget_if_done(request)
        return output

    def _forget_if_done(self, request: Request) -> None:
        if request.is_finished:
            self.requests.pop(request.request_id, None)

    def _request_output(self, request: Request) -> RequestOutput:
        completions = []
        for seq in request.sequences:
            text = seq.detokenizer.text if seq.detokenizer is not None else ""
            output_ids = seq.output_token_ids
            want_logprobs = request.params.logprobs is not None
            completions.append(
                CompletionOutput(
                    index=seq.sample_index,
                    text=text,
                    token_ids=output_ids,
                    delta_text=text[seq.num_emitted_chars :],
                    delta_token_ids=output_ids[seq.num_emitted_tokens :],
                    logprobs=list(seq.logprobs) if want_logprobs else None,
                    delta_logprobs=seq.logprobs[seq.num_emitted_tokens :] if want_logprobs else None,
                    cumulative_logprob=seq.cumulative_logprob if want_logprobs else None,
                    finish_reason=seq.finish_reason.value if seq.finish_reason else None,
                    stop_reason=seq.stop_reason,
                )
            )
            seq.num_emitted_chars = len(text)
            seq.num_emitted_tokens = len(output_ids)
        timing = request.timing
        return RequestOutput(
            request_id=request.request_id,
            prompt=request.prompt,
            prompt_token_ids=request.prompt_token_ids,
            outputs=completions,
            finished=request.is_finished,
            num_cached_tokens=request.num_cached_tokens,
            prompt_logprobs=request.prompt_logprobs,
            tenant=request.tenant,
            priority=request.priority,
            error_code=request.error_code,
            metrics=RequestMetrics(
                timing.arrival, timing.first_scheduled, timing.first_token, timing.finished
            ),
            error=request.error,
        )
