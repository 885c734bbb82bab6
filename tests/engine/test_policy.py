"""Scheduling policy: priorities that preempt, weighted fair share between tenants, KV-full handling."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from switchyard import LLM, SamplingParams
from switchyard.engine.engine import LLMEngine
from switchyard.errors import CapacityError

KV_BYTES_PER_BLOCK = 16 * 2 * 2 * 2 * 16 * 4  # tokens x K/V x layers x kv_heads x head_dim x fp32


def prompts(count: int, length: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, 320) for _ in range(length)] for _ in range(count)]


def make_llm(folder: Path, **kwargs: object) -> LLM:
    defaults: dict[str, object] = dict(dtype="float32", max_model_len=256, max_num_batched_tokens=64)
    return LLM(str(folder), **{**defaults, **kwargs})


def run_until_done(engine: LLMEngine) -> dict[str, list[int]]:
    done: dict[str, list[int]] = {}
    while engine.has_unfinished_requests():
        for output in engine.step():
            if output.finished:
                done[output.request_id] = output.outputs[0].token_ids
    return done


def test_urgent_request_preempts_low_priority_work_within_one_step(tiny_model_dir: Path) -> None:
    llm = make_llm(
        tiny_model_dir, kv_cache_memory=12 * KV_BYTES_PER_BLOCK, max_num_seqs=8, kv_full_policy="preempt"
    )
    engine = llm.engine
    params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    low = prompts(6, 30, seed=1)
    for i, prompt in enumerate(low):
        engine.add_request(f"low-{i}", prompt, params, priority=5)
    for _ in range(4):
        engine.step()
    assert engine.block_manager.num_free_blocks <= 2  # the cache is full of low-priority work
    urgent = prompts(1, 40, seed=2)[0]
    engine.add_request("urgent", urgent, params, priority=-1)
    engine.step()
    running = {seq.request.request_id for seq in engine.scheduler.running}
    assert "urgent" in running
    assert engine.scheduler.preemptions_by_priority[5] >= 1
    assert engine.scheduler.kv_full_decisions["preempted"] >= 1
    done = run_until_done(engine)
    # Everyone completes, and the preempted requests' outputs are what they are without any contention.
    reference = make_llm(tiny_model_dir, kv_cache_memory=256 * KV_BYTES_PER_BLOCK)
    expected = reference.generate([*low, urgent], params)
    for i in range(len(low)):
        assert done[f"low-{i}"] == expected[i].outputs[0].token_ids
    assert done["urgent"] == expected[-1].outputs[0].token_ids


def test_queue_mode_does_not_preempt_for_priority(tiny_model_dir: Path) -> None:
    llm = make_llm(tiny_model_dir, kv_cache_memory=12 * KV_BYTES_PER_BLOCK, max_num_seqs=8)
    engine = llm.engine
    params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    for i, prompt in enumerate(prompts(6, 30, seed=1)):
        engine.add_request(f"low-{i}", prompt, params, priority=5)
    for _ in range(4):
        engine.step()
    engine.add_request("urgent", prompts(1, 40, seed=2)[0], params, priority=-1)
    engine.step()
    assert engine.scheduler.preemptions_by_priority[5] == 0 or "urgent" not in {
        s.request.request_id for s in engine.scheduler.running
    }
    assert engine.scheduler.kv_full_decisions["queued"] >= 1
    run_until_done(engine)


def test_waiting_queue_orders_by_priority_then_arrival(tiny_model_dir: Path) -> None:
    llm = make_llm(tiny_model_dir, kv_cache_memory=64 * KV_BYTES_PER_BLOCK, max_num_seqs=1)
    engine = llm.engine
    params = SamplingParams(temperature=0, max_tokens=2, ignore_eos=True)
    for request_id, priority in [("a", 3), ("b", 1), ("c", 3), ("d", -2), ("e", 1)]:
        engine.add_request(request_id, [5, 6, 7], params, priority=priority)
    order = []
    while engine.has_unfinished_requests():
        order += [o.request_id for o in engine.step() if o.finished]
    assert order == ["d", "b", "e", "a", "c"]


@pytest.mark.parametrize("weights", [{}, {"light": 3.0}])
def test_fair_share_between_a_heavy_and_a_light_tenant(
    tiny_model_dir: Path, weights: dict[str, float]
) -> None:
    llm = make_llm(
        tiny_model_dir, kv_cache_memory=256 * KV_BYTES_PER_BLOCK, max_num_seqs=4, tenant_weights=weights
    )
    engine = llm.engine
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    # The heavy tenant sends 10x the requests of the light one, all at once.
    for i, prompt in enumerate(prompts(200, 8, seed=3)):
        engine.add_request(f"heavy-{i}", prompt, params, tenant="heavy")
    for i, prompt in enumerate(prompts(20, 8, seed=4)):
        engine.add_request(f"light-{i}", prompt, params, tenant="light")
    policy = engine.policy
    served = {"heavy": 0, "light": 0}
    while True:
        waiting = {engine.policy.tenant_of(seq) for seq in engine.scheduler.waiting}
        if waiting != {"heavy", "light"}:
            break  # one tenant is no longer backlogged
        before = dict(policy.tokens_served)
        engine.step()
        for tenant in served:
            served[tenant] += policy.tokens_served.get(tenant, 0) - before.get(tenant, 0)
    light_weight = weights.get("light", 1.0)
    expected_light_share = light_weight / (light_weight + 1.0)
    light_share = served["light"] / (served["light"] + served["heavy"])
    assert sum(served.values()) > 200
    assert abs(light_share / expected_light_share - 1) <= 0.2, served
    for request_id in list(engine.requests):
        engine.abort_request(request_id)
    engine.step()


def test_reject_mode_refuses_when_the_kv_cache_is_full(tiny_model_dir: Path) -> None:
    llm = make_llm(tiny_model_dir, kv_cache_memory=12 * KV_BYTES_PER_BLOCK, kv_full_policy="reject")
    engine = llm.engine
    params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    admitted = 0
    with pytest.raises(CapacityError):
        for i, prompt in enumerate(prompts(20, 30, seed=5)):
            engine.add_request(f"r-{i}", prompt, params)
            admitted += 1
    assert 0 < admitted < 20
    assert engine.scheduler.kv_full_decisions["rejected"] == 1
    assert len(run_until_done(engine)) == admitted


def test_urgent_prefill_step_excludes_less_urgent_work(tiny_model_dir: Path) -> None:
    """In preempt mode the step that prefills an urgent prompt runs only urgent work, so its time to first
    token is not stretched by the decodes it outranks; the paused sequences resume right after."""
    llm = make_llm(tiny_model_dir, kv_cache_memory=256 * KV_BYTES_PER_BLOCK, kv_full_policy="preempt")
    engine = llm.engine
    params = SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)
    for i, prompt in enumerate(prompts(4, 20, seed=6)):
        engine.add_request(f"low-{i}", prompt, params, priority=3)
    for _ in range(3):
        engine.step()
    engine.add_request("urgent", prompts(1, 100, seed=7)[0], params, priority=-1)
    first_tokens_seen = False
    while not first_tokens_seen:
        plan = engine.scheduler.schedule()
        assert {seq.request.priority for seq, _ in plan.scheduled} == {-1}
        urgent = plan.scheduled[0][0]
        result = engine.runner.execute(plan.scheduled, set())
        for seq, num_new in plan.scheduled:
            seq.num_computed_tokens += num_new
        engine._sample(result)
        first_tokens_seen = urgent.num_output_tokens > 0
    plan = engine.scheduler.schedule()  # the urgent prompt is done: everyone decodes together again
    assert {seq.request.priority for seq, _ in plan.scheduled} == {-1, 3}


def test_requests_waiting_past_max_queue_time_fail_with_a_queue_timeout(tiny_model_dir: Path) -> None:
    import time

    llm = make_llm(
        tiny_model_dir, kv_cache_memory=64 * KV_BYTES_PER_BLOCK, max_num_seqs=1, max_queue_time=0.05
    )
    engine = llm.engine
    params = SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)
    engine.add_request("running", [5, 6, 7], params)
    engine.step()
    engine.add_request("queued", [8, 9], params)
    time.sleep(0.1)
    outputs = {o.request_id: o for o in engine.step()}
    failed = outputs["queued"]
    assert failed.finished and failed.error_code == "queue_timeout" and "queue" in (failed.error or "")
    done = run_until_done(engine)
    assert len(done["running"]) == 30  # the request already running is not affected
