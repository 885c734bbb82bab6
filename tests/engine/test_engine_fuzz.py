"""Fuzzing the engine's step loop: random interleavings of mixed requests, aborts and steps (hypothesis).

Each example builds a small engine (tiny KV cache, tiny token budget, speculation on or off), drives it
through `add_request` / `abort_request` / `step()` as hypothesis dictates, and checks the engine's invariants
after every step and once it is idle. Greedy and seeded requests must then produce what they produce alone in
a fresh engine with default settings: batching, chunked prefill, preemption, prefix-cache hits, forking and
speculation may change when tokens come, never which.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from engine_fuzz_strategies import (
    CHOICES,
    MAX_MODEL_LEN,
    MAX_STEPS,
    SCHEMA,
    VOCAB,
    EngineSetup,
    RequestSpec,
    engine_setups,
    operations,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from model_factory import build_hf_model

from switchyard.config import EngineConfig
from switchyard.engine.engine import LLMEngine
from switchyard.engine.sequence import RequestOutput, Sequence, SequenceStatus, now
from switchyard.errors import CapacityError, InvalidRequestError


def _can_fit(spec: RequestSpec, engine: LLMEngine) -> bool:
    params = dict(spec.kwargs)
    manager = engine.block_manager
    total = len(spec.prompt) + params["max_tokens"]
    return (
        len(spec.prompt) < MAX_MODEL_LEN
        and total <= MAX_MODEL_LEN
        and manager.blocks_for_tokens(total) <= manager.num_blocks
        and params["n"] <= engine.scheduler_config.max_num_seqs
    )


@dataclass
class Harness:
    """Drives one engine and records everything needed to check it."""

    engine: LLMEngine
    specs: dict[str, RequestSpec] = field(default_factory=dict)
    finished: dict[str, RequestOutput] = field(default_factory=dict)
    aborted: set[str] = field(default_factory=set)
    streamed: dict[tuple[str, int], tuple[list[int], str]] = field(default_factory=dict)
    num_steps: int = 0
    hangs: dict[str, int] = field(default_factory=dict)
    """Recoveries each request was blamed in (in the step before them); past one it may fail."""

    def add(self, spec: RequestSpec) -> None:
        request_id = f"r{len(self.specs)}"
        try:
            self.engine.add_request(
                request_id,
                list(spec.prompt),
                spec.params(),
                arrival_time=now() - 7200 if spec.stale else None,
                priority=spec.priority,
                tenant=spec.tenant,
            )
        except InvalidRequestError:
            assert not _can_fit(spec, self.engine), f"refused a request that fits: {spec}"
            return
        except CapacityError:
            assert self.engine.config.kv_full_policy == "reject"
            return
        assert _can_fit(spec, self.engine), f"accepted a request that cannot fit: {spec}"
        self.specs[request_id] = spec

    def in_flight(self, target: str) -> list[str]:
        """Request ids not finished yet whose state matches `target`."""
        engine = self.engine
        live = [r for r in self.specs if r not in self.finished and r not in self.aborted]

        def matches(request_id: str) -> bool:
            request = engine.requests.get(request_id)
            if request is None:
                return False
            seqs = request.sequences
            if target == "awaiting":
                return request_id in engine.grammar_admission.waiting_ids
            if target == "prefill":
                return any(s.status is SequenceStatus.RUNNING and s.in_prefill for s in seqs)
            if target == "preempted":
                return any(s.status is SequenceStatus.WAITING and s.num_output_tokens > 0 for s in seqs)
            if target == "forked":
                return len(seqs) > 1
            if target == "decoding":
                return any(s.status is SequenceStatus.RUNNING and not s.in_prefill for s in seqs)
            return True

        chosen = [r for r in live if matches(r)]
        return chosen or live

    def abort(self, target: str, index: int) -> None:
        candidates = self.in_flight(target)
        if not candidates:
            return
        request_id = candidates[index % len(candidates)]
        self.engine.abort_request(request_id)
        self.aborted.add(request_id)

    def recover_after_hang(self) -> None:
        """What the watchdog does once a step hangs; here the last step is the one that 'hung'."""
        for request_id in self.engine.current_step_requests:
            self.hangs[request_id] = self.hangs.get(request_id, 0) + 1
        for output in self.engine.recover_after_hang():
            self._record(output)
        check_engine_state(self.engine)

    def step(self) -> None:
        outputs = self.engine.step()  # any exception escaping step() fails the example
        self.num_steps += 1
        for output in outputs:
            self._record(output)
        check_engine_state(self.engine)

    def drain(self) -> None:
        while self.engine.has_unfinished_requests():
            assert self.num_steps < MAX_STEPS, "the engine does not finish its requests"
            self.step()

    def _record(self, output: RequestOutput) -> None:
        request_id = output.request_id
        assert request_id in self.specs, f"output for unknown request {request_id}"
        assert request_id not in self.finished, f"output for {request_id} after its final one"
        for completion in output.outputs:
            tokens, text = self.streamed.get((request_id, completion.index), ([], ""))
            tokens = tokens + list(completion.delta_token_ids)
            text = text + completion.delta_text
            assert tokens == completion.token_ids, "delta tokens do not add up to the tokens"
            assert text == completion.text, "delta text does not add up to the text"
            self.streamed[(request_id, completion.index)] = (tokens, text)
        if output.finished:
            self.finished[request_id] = output


def _live_sequences(engine: LLMEngine) -> list[Sequence]:
    return [*engine.scheduler.running, *engine.scheduler.waiting]


def check_engine_state(engine: LLMEngine) -> None:
    """Invariants that hold between any two steps."""
    scheduler = engine.scheduler
    manager = engine.block_manager
    live = _live_sequences(engine)
    manager.check_invariants(live)
    for seq in scheduler.running:
        assert seq.status is SequenceStatus.RUNNING
        assert seq.num_draft_tokens == 0, "unverified drafts outside a step"
        assert seq.num_computed_tokens < seq.num_tokens
        assert len(seq.block_table) * manager.block_size >= seq.num_computed_tokens
        assert len(seq.block_table) <= manager.blocks_for_tokens(seq.num_tokens), "blocks past the end"
        assert not seq.request.is_finished
    for seq in scheduler.waiting:
        assert seq.status is SequenceStatus.WAITING
        assert seq.num_draft_tokens == 0
    assert len(scheduler.running) <= engine.scheduler_config.max_num_seqs
    for request in engine.requests.values():
        for seq in request.sequences:
            if seq.is_finished:
                assert not seq.block_table, "a finished sequence holds blocks"
            else:
                in_queue = seq in scheduler.running or seq in list(scheduler.waiting)
                awaiting = request.request_id in engine.grammar_admission.waiting_ids
                assert in_queue != awaiting, "an unfinished sequence is lost or queued twice"
    draft = engine.spec_decoder.draft if engine.spec_decoder is not None else None
    if draft is not None:
        draft.block_manager.check_invariants(draft._shadows.values())


def check_idle(engine: LLMEngine) -> None:
    """Once every request has finished, nothing is left behind."""
    assert not engine.requests and not engine.grammar_admission.waiting_ids and not engine._pending
    assert not engine.scheduler.running and not len(engine.scheduler.waiting)
    manager = engine.block_manager
    assert manager.num_free_blocks == manager.num_blocks
    assert all(count == 0 for count in manager.ref_counts)
    manager.check_invariants([])
    draft = engine.spec_decoder.draft if engine.spec_decoder is not None else None
    if draft is not None:
        assert draft.num_shadows == 0
        assert draft.block_manager.num_free_blocks == draft.block_manager.num_blocks


def check_output(spec: RequestSpec, output: RequestOutput, aborted: bool, eos: tuple[int, ...]) -> None:
    """What any finished output must satisfy, whatever the engine settings."""
    params = spec.params()
    assert output.error is None, output.error
    assert output.prompt_token_ids == list(spec.prompt)
    assert 0 <= output.num_cached_tokens < len(spec.prompt)
    metrics = output.metrics
    assert metrics is not None and metrics.finished_time is not None
    marks = [
        metrics.arrival_time,
        metrics.first_scheduled_time,
        metrics.first_token_time,
        metrics.finished_time,
    ]
    present = [mark for mark in marks if mark is not None]
    assert present == sorted(present), "timing marks out of order"
    assert [c.index for c in output.outputs] == list(range(len(output.outputs)))
    if not aborted:
        assert len(output.outputs) == params.n
    else:
        assert 1 <= len(output.outputs) <= params.n
        assert any(c.finish_reason == "abort" for c in output.outputs)
    stop_ids = set(params.stop_token_ids) | set(eos)
    assert params.max_tokens is not None
    for completion in output.outputs:
        tokens = completion.token_ids
        reason = completion.finish_reason
        assert reason in ("stop", "length", "abort"), reason
        assert reason != "abort" or aborted
        assert len(tokens) <= params.max_tokens
        if reason == "length":
            assert len(tokens) == params.max_tokens
        assert all(0 <= t < VOCAB for t in tokens)
        # min_tokens: EOS and stop token ids are suppressed until the output has min_tokens tokens.
        early = tokens[: params.min_tokens] if spec.structured is None else []
        assert not stop_ids & set(early), f"a stop token before min_tokens: {tokens}"
        if reason == "stop" and spec.structured is None:
            assert len(tokens) >= params.min_tokens
            if isinstance(completion.stop_reason, int):
                assert tokens[-1] == completion.stop_reason in params.stop_token_ids
            elif completion.stop_reason is None:
                assert tokens[-1] in eos and not params.ignore_eos
            else:
                assert completion.stop_reason in params.stop
        if params.logprobs is not None:
            assert completion.logprobs is not None and len(completion.logprobs) == len(tokens)
            for token, entry in zip(tokens, completion.logprobs, strict=True):
                assert entry.token_id == token
                assert math.isfinite(entry.logprob) and entry.logprob <= 1e-5, entry
                assert len(entry.top) == params.logprobs
                assert all(not math.isnan(value) and value <= 1e-5 for _, value in entry.top)
            assert completion.cumulative_logprob is not None
            total = sum(entry.logprob for entry in completion.logprobs)
            assert math.isclose(completion.cumulative_logprob, total, rel_tol=1e-5, abs_tol=1e-4)
        if reason == "stop" and spec.structured == "json":
            jsonschema.validate(json.loads(completion.text), SCHEMA)
        if reason == "stop" and spec.structured == "choice":
            assert completion.text in CHOICES
    if params.prompt_logprobs is not None and not (aborted and output.prompt_logprobs is None):
        entries = output.prompt_logprobs
        assert entries is not None and len(entries) == len(spec.prompt) and entries[0] is None
        if not aborted:
            for position, entry in enumerate(entries[1:], start=1):
                assert entry is not None and entry.token_id == spec.prompt[position]
                assert math.isfinite(entry.logprob) and entry.logprob <= 1e-5
                assert len(entry.top) == params.prompt_logprobs


def is_reproducible(spec: RequestSpec, setup: EngineSetup) -> bool:
    """Whether the request's tokens are fixed by its prompt and parameters alone.

    Greedy ones always are. Seeded sampled ones are too, except where speculation samples them: acceptance
    draws from the request's generator differently than plain sampling (the law is the same, not the draws).
    """
    params = dict(spec.kwargs)
    if params["temperature"] == 0:
        return True
    if "seed" not in params:
        return False
    speculated = (
        setup.speculative is not None
        and params["n"] == 1
        and "logprobs" not in params
        and "prompt_logprobs" not in params
    )
    return not speculated


class Reference:
    """Each request run alone in an engine with default settings (prefix cache off, so each run is fresh)."""

    def __init__(self, model: Path) -> None:
        self.engine = LLMEngine(
            EngineConfig(
                model=str(model),
                dtype="float32",
                max_model_len=MAX_MODEL_LEN,
                kv_cache_memory=8 << 20,
                enable_prefix_caching=False,
            )
        )
        self._cache: dict[RequestSpec, RequestOutput] = {}

    def __call__(self, spec: RequestSpec) -> RequestOutput:
        key = RequestSpec(spec.prompt, spec.kwargs)  # priority, tenant and arrival do not matter alone
        if key not in self._cache:
            self.engine.add_request("alone", list(spec.prompt), spec.params())
            final = None
            while self.engine.has_unfinished_requests():
                for output in self.engine.step():
                    if output.finished:
                        final = output
            assert final is not None
            self._cache[key] = final
        return self._cache[key]


def compare_with_reference(
    spec: RequestSpec, output: RequestOutput, aborted: bool, alone: RequestOutput
) -> None:
    for completion in output.outputs:
        expected = alone.outputs[completion.index]
        if aborted and completion.finish_reason == "abort":
            assert completion.token_ids == expected.token_ids[: len(completion.token_ids)], (
                f"aborted sample {completion.index} is no prefix of the output alone"
            )
            continue
        assert completion.token_ids == expected.token_ids, f"sample {completion.index} differs from alone"
        assert completion.text == expected.text
        assert completion.finish_reason == expected.finish_reason
        assert completion.stop_reason == expected.stop_reason
        if completion.logprobs is not None and expected.logprobs is not None:
            for got, want in zip(completion.logprobs, expected.logprobs, strict=True):
                assert math.isclose(got.logprob, want.logprob, abs_tol=1e-3)
    if output.prompt_logprobs is not None and alone.prompt_logprobs is not None and not aborted:
        for got, want in zip(output.prompt_logprobs[1:], alone.prompt_logprobs[1:], strict=True):
            assert got is not None and want is not None
            assert math.isclose(got.logprob, want.logprob, abs_tol=1e-3)


def run_program(
    setup: EngineSetup, program: list[tuple[Any, ...]], model: Path, draft: Path, reference: Reference
) -> Harness:
    """Run one random program against a fresh engine and check everything; returns the harness."""
    engine = LLMEngine(setup.config(model, draft))
    harness = Harness(engine)
    for op in program:
        if op[0] == "add":
            harness.add(op[1])
        elif op[0] == "abort":
            harness.abort(op[1], op[2])
        elif op[0] == "reset_prefix_cache":
            engine.reset_prefix_cache()
            check_engine_state(engine)
        elif op[0] == "recover_after_hang":
            harness.recover_after_hang()
        else:
            for _ in range(op[1]):
                harness.step()
    harness.drain()
    check_idle(engine)
    assert set(harness.finished) == set(harness.specs), "a request never finished"
    for request_id, spec in harness.specs.items():
        output = harness.finished[request_id]
        aborted = request_id in harness.aborted
        if output.error is not None and harness.hangs.get(request_id, 0) > 1:
            assert output.error_code == "internal" and "hung" in output.error
            assert all(c.finish_reason in ("error", "stop", "length") for c in output.outputs)
            continue
        if output.error_code == "queue_timeout":
            assert spec.stale and setup.max_queue_time is not None
            assert all(c.finish_reason == "error" and not c.token_ids for c in output.outputs)
            continue
        check_output(spec, output, aborted, engine.eos_token_ids)
        if is_reproducible(spec, setup):
            compare_with_reference(spec, output, aborted, reference(spec))
    return harness


@pytest.fixture(scope="module")
def draft_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-layer random model with the tiny tokenizer's vocabulary: a draft that is often wrong."""
    folder = tmp_path_factory.mktemp("fuzz-draft")
    build_hf_model("llama", folder, seed=7, num_hidden_layers=1)
    return folder


@pytest.fixture(scope="module")
def reference(tiny_model_dir: Path) -> Reference:
    return Reference(tiny_model_dir)


def _fuzz(
    tiny_model_dir: Path,
    draft_dir: Path,
    reference: Reference,
    *,
    max_examples: int,
    min_ops: int,
    max_ops: int,
    derandomize: bool,
    crowded: bool = False,
) -> None:
    """Run the fuzz on programs of `min_ops` to `max_ops` operations; `min_ops` keeps every program busy
    enough to batch, preempt and speculate."""

    @settings(
        max_examples=max_examples,
        deadline=None,
        derandomize=derandomize,
        database=None if derandomize else settings.default.database,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(
        setup=engine_setups(crowded),
        program=st.lists(operations(crowded), min_size=min_ops, max_size=max_ops),
    )
    def fuzz(setup: EngineSetup, program: list[tuple[Any, ...]]) -> None:
        run_program(setup, program, tiny_model_dir, draft_dir, reference)

    fuzz()


def test_engine_fuzz(tiny_model_dir: Path, draft_dir: Path, reference: Reference) -> None:
    _fuzz(tiny_model_dir, draft_dir, reference, max_examples=8, min_ops=12, max_ops=24, derandomize=True)


@pytest.mark.slow
@pytest.mark.parametrize("crowded", [False, True], ids=["mixed", "crowded"])
def test_engine_fuzz_long(tiny_model_dir: Path, draft_dir: Path, reference: Reference, crowded: bool) -> None:
    _fuzz(
        tiny_model_dir,
        draft_dir,
        reference,
        max_examples=400,
        min_ops=10,
        max_ops=50,
        derandomize=False,
        crowded=crowded,
    )
