"""The engine step loop: admit requests, then each step schedule, run the model, sample, report.

`LLMEngine` is synchronous and single-threaded; the offline `LLM` drives it in a loop and the server drives it
from an asyncio task. Bad requests raise InvalidRequestError at `add_request` and never reach the loop; a failure
inside one request's processing fails that request only. One file per concern around the loop: `builder`
(model, KV cache, the parts below), `input_processor` (requests in), `output_processor` (tokens and outputs
out), `spec.step` (speculative decoding's phases), `structured.admission` (requests waiting for their grammar),
`recovery` (after a hung step) and `stats`.
"""

from __future__ import annotations

import logging

from switchyard.config import EngineConfig
from switchyard.engine.builder import SchedulingState, build_engine_parts, build_scheduling_state
from switchyard.engine.expert_load import ExpertLoadMeter
from switchyard.engine.model_runner import ForwardResult
from switchyard.engine.output_processor import Finish
from switchyard.engine.policy import SchedulingPolicy
from switchyard.engine.recovery import recover_after_hang
from switchyard.engine.sampling_params import SamplingParams
from switchyard.engine.sequence import FinishReason, Request, RequestOutput, Sequence, now
from switchyard.engine.stats import EngineStats, collect_stats
from switchyard.engine.structured.manager import StructuredOutputManager
from switchyard.engine.structured.output_check import ConstrainedOutputError
from switchyard.errors import InvalidRequestError

logger = logging.getLogger(__name__)


class LLMEngine:
    def __init__(self, config: EngineConfig, policy: SchedulingPolicy | None = None) -> None:
        """Load the model folder `config.model` (a bundled name is resolved before: `resolve_model_folders`);
        `policy` orders waiting requests (default: priorities, then fair share between tenants)."""
        self.config = config
        self._parts = parts = build_engine_parts(config)
        self.model_path, self.model_config, self.model = parts.model_path, parts.model_config, parts.model
        self.device, self.dtype, self.kv_dtype = parts.device, parts.dtype, parts.kv_dtype
        self.quantization = parts.quantization
        self.max_model_len, self.kv_budget = parts.max_model_len, parts.kv_budget
        self.tokenizer, self.eos_token_ids = parts.tokenizer, parts.eos_token_ids
        self.generation_defaults, self.scheduler_config = parts.generation_defaults, parts.scheduler_config
        self.sampler, self.spec_decoder, self.speculation = (
            parts.sampler,
            parts.spec_decoder,
            parts.speculation,
        )
        self._inputs, self._outputs, self.grammar_admission = parts.inputs, parts.outputs, parts.grammars
        self._use(build_scheduling_state(config, parts, policy))
        self.requests: dict[str, Request] = {}
        self._pending: list[RequestOutput] = []
        """Outputs of aborted requests, reported by the next step."""
        self._epoch = 0
        """Bumped by recover_after_hang: a step still running from an older epoch must not touch state."""
        self.current_step_requests: set[str] = set()
        """Request ids in the step being run (what a watchdog blames when the step hangs)."""
        self.num_hung_steps = 0
        self.num_prompt_tokens = 0
        self.expert_load = ExpertLoadMeter(self.model)

    def close(self) -> None:
        """Stop the tensor-parallel worker ranks, if any (idempotent; nothing to do with one rank)."""
        if self._parts.tensor_parallel is not None:
            self._parts.tensor_parallel.close()

    def _use(self, state: SchedulingState) -> None:
        self.block_manager, self.runner = state.block_manager, state.runner
        self.scheduler, self.policy = state.scheduler, state.policy

    @property
    def structured_outputs(self) -> StructuredOutputManager:
        """The grammar backend and compiled-grammar cache, created on first use (it indexes the vocabulary)."""
        return self.grammar_admission.manager

    @property
    def vocab_size(self) -> int:
        """Token ids the model accepts are [0, vocab_size): the one bound for prompts, token-id parameters and
        /detokenize (the tokenizer may know fewer; ids past it decode to nothing)."""
        return self._inputs.limits.vocab_size

    @property
    def num_generated_tokens(self) -> int:
        return self._outputs.num_generated_tokens

    # --------------------------------------------------------------- requests
    def tokenize(self, prompt: str) -> list[int]:
        return self._inputs.tokenize(prompt)

    def check_prompt(self, token_ids: list[int], params: SamplingParams) -> None:
        """The admission checks of a token-id prompt that need neither the tokenizer nor engine state (length,
        ids, max_tokens, sampling values): InvalidRequestError before any expensive work such as a grammar
        compile. Safe off the engine thread: it reads only fixed limits."""
        self._inputs.check(token_ids, params)

    def truncate_prompt(self, token_ids: list[int], params: SamplingParams) -> list[int]:
        """The prompt's last `truncate_prompt_tokens` tokens; for -1, as many as fit beside max_tokens."""
        return self._inputs.truncate(token_ids, params)

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
        """Validate and queue a request. Raises InvalidRequestError for a request that can never be served
        (a bad grammar included) and, in reject mode, CapacityError when the KV cache is full."""
        if request_id in self.requests:
            raise InvalidRequestError(f"request id {request_id!r} is already in use", param="request_id")
        params = params or SamplingParams()
        request = self._inputs.process(
            request_id, prompt, params, arrival_time=arrival_time, priority=priority, tenant=tenant
        )
        if self.config.kv_full_policy == "reject":
            self.scheduler.reject_if_full(request.num_prompt_tokens)
        ready = self.grammar_admission.admit(request)
        self.requests[request_id] = request
        self.num_prompt_tokens += request.num_prompt_tokens
        if ready:
            self.scheduler.add(request.sequences[0])

    def _admit_compiled(self) -> list[RequestOutput]:
        """Schedule requests whose grammar finished compiling; fail those whose grammar did not compile."""
        ready, failed = self.grammar_admission.take_ready()
        for seq in (seq for request in ready for seq in request.sequences):
            self.scheduler.add(seq)
        return [self._fail(request, str(exc), code="invalid_grammar") for request, exc in failed]

    def abort_request(self, request_id: str) -> None:
        """Stop a request now and free its blocks; its final output comes from the next step()."""
        request = self.requests.get(request_id)
        if request is None:
            return
        self.grammar_admission.discard(request_id)
        for seq in request.sequences:
            if not seq.is_finished:
                self._outputs.finish(seq, Finish(FinishReason.ABORT), self.scheduler)
        self._pending.append(self._outputs.request_output(request))
        self._forget_if_done(request)

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests) or bool(self._pending)

    def reset_prefix_cache(self) -> int:
        """Drop the cached prefixes no request is using, so the next identical prompt is computed again (as
        benchmarks that repeat a workload need); returns the number of blocks freed."""
        return self.block_manager.reset_prefix_cache()

    def stats(self) -> EngineStats:
        return collect_stats(
            self.scheduler,
            self.num_hung_steps,
            self.grammar_admission.built,
            self.spec_decoder,
            self.expert_load,
        )

    # ------------------------------------------------------------------- step
    def step(self) -> list[RequestOutput]:
        """Run one iteration; return outputs of requests that produced tokens, finished, or failed."""
        epoch = self._epoch
        outputs, self._pending = self._pending, []
        if (limit := self.config.max_queue_time) is not None:
            for request in self.scheduler.never_scheduled_since(now() - limit):
                message = f"the request waited more than {limit:g} s in the queue"
                outputs.append(self._fail(request, message, code="queue_timeout"))
        if self.grammar_admission.waiting_ids:
            outputs += self._admit_compiled()
        spec, grammars = self.speculation, self.grammar_admission.built
        draft_round = spec.propose(self.scheduler.running, self.block_manager, grammars) if spec else None
        plan = self.scheduler.schedule()
        verifying = spec.keep_scheduled(plan, draft_round) if spec and draft_round else frozenset[int]()
        self.current_step_requests = {seq.request.request_id for seq, _ in plan.scheduled}
        if plan.is_empty and self.grammar_admission.waiting_ids and not outputs:
            self.grammar_admission.wait(timeout=0.05)  # nothing to run but grammars compiling: do not spin
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
        wants_prompt = self._outputs.wants_prompt_logprobs(plan.scheduled)
        try:
            self.runner.copy_blocks(plan.block_copies)
            result = self.runner.execute(plan.scheduled, wants_prompt, verifying)
        except Exception as exc:  # the forward failed: fail this step's requests, keep the engine alive
            logger.exception("forward pass failed")
            failed = {seq.request.request_id: seq.request for seq, _ in plan.scheduled}
            return outputs + [
                self._fail(r, f"internal error during forward pass: {exc}") for r in failed.values()
            ]
        if epoch != self._epoch:
            return []  # a watchdog gave up on this step and rebuilt the engine meanwhile: touch nothing
        for seq, num_new in plan.scheduled:
            seq.num_computed_tokens += num_new
            if seq.seq_id not in verifying:  # drafts are not cached before they are verified
                self.block_manager.cache_full_blocks(seq)
                self.block_manager.release_outside_window(seq)
        self._outputs.record_prompt_logprobs(result, self.scheduler.running)
        touched = self._sample(result)
        if verifying:
            touched += [r for r in self._verify(result) if r not in touched]
        if spec is not None:
            spec.observe_sampled(result)
        for request in touched:
            outputs.append(self._outputs.request_output(request))
            self._forget_if_done(request)
        if spec is not None and draft_round is not None:
            spec.record(draft_round, plan)
        return outputs

    def _sample(self, result: ForwardResult) -> list[Request]:
        """Sample the next token of each sequence whose chunk completed; returns the requests that got one."""
        rows: list[Sequence] = []
        logit_rows: list[int] = []
        for i, seq in enumerate(result.sampled_seqs):
            children = self._inputs.fork(seq)
            for child in children:
                self.scheduler.add_fork(seq, child)
            rows += [*children, seq]
            logit_rows += [i] * (len(children) + 1)
        if not rows:
            return []
        sampled = self.sampler.sample_sequences(result.logits, rows, logit_rows, self.grammar_admission.built)
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
                token, logprob = sampled.token_ids[row], sampled.logprobs[row]
                self._outputs.append_token(seq, token, self.scheduler, logprob, sampled.top, row)
            except ConstrainedOutputError as exc:  # a grammar backend bug, counted: fail only this request
                logger.error("request %s: %s", request.request_id, exc)
                self._fail(request, str(exc), code="constrained_output_invalid")
            except Exception as exc:  # one request's post-processing failing must not stop the others
                logger.exception("post-processing failed for request %s", request.request_id)
                self._fail(request, f"internal error while processing output: {exc}")
        return list(touched.values())

    def _verify(self, result: ForwardResult) -> list[Request]:
        """Apply the verdicts on this step's drafts: append the emitted tokens, roll the rest back."""
        assert self.speculation is not None
        verification = self.speculation.verify(result, self.scheduler.running, self.grammar_admission.built)
        for request, exc in verification.failed:
            self._fail_verification(request, exc)
        for verdict in verification.verified:
            seq = verdict.seq
            try:
                # KV is valid up to the last accepted draft; the bonus token is computed next step.
                seq.num_computed_tokens = seq.num_tokens + verdict.accepted
                self._outputs.append_tokens(seq, verdict.emitted, self.scheduler)
                if not seq.is_finished:
                    self.speculation.settle(seq, verdict.accepted, self.block_manager, result)
            except Exception as exc:
                self._fail_verification(seq.request, exc)
        return verification.touched

    def _fail_verification(self, request: Request, exc: Exception) -> None:
        logger.exception("verification failed for request %s", request.request_id, exc_info=exc)
        self._fail(request, f"internal error while verifying speculative tokens: {exc}")

    # --------------------------------------------------------------- finishing
    def _fail(self, request: Request, message: str, code: str = "internal") -> RequestOutput:
        request.error, request.error_code = message, code
        for seq in request.sequences:
            if not seq.is_finished:
                self._outputs.finish(seq, Finish(FinishReason.ERROR), self.scheduler)
        output = self._outputs.request_output(request)
        self._forget_if_done(request)
        return output

    def _forget_if_done(self, request: Request) -> None:
        if request.is_finished:
            self.requests.pop(request.request_id, None)

    def recover_after_hang(self, max_hangs: int = 1) -> list[RequestOutput]:
        """Rebuild the scheduling state after a step hung (a watchdog gave up waiting for it) and queue every
        unfinished request again; one in more than `max_hangs` hung steps fails instead (`recovery`)."""
        self._epoch += 1
        self.num_hung_steps += 1
        blamed, self.current_step_requests = self.current_step_requests, set()
        waiting = self.grammar_admission.waiting_ids
        recovery = recover_after_hang(
            self.config, self._parts, self.policy, self.requests.values(), waiting, blamed, max_hangs
        )
        self._use(recovery.state)
        outputs = [self._fail(request, message) for request, message in recovery.failed]
        logger.error("engine step hung: state rebuilt, %d requests re-queued", len(self.requests))
        return outputs
