"""`switchyard plan` on splits and inputs vLLM would refuse or that would plan nonsense: clear errors, exit 2."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from switchyard.cli import main
from switchyard.engine.memory import plan_budget
from switchyard.models.config import ModelArchConfig
from switchyard.plan.capacity import PlanInputs, count_parameters, make_plan
from switchyard.plan.devices import parse_device
from switchyard.plan.shapes import NAMED_SHAPES

GiB = 1 << 30


def shape(name: str) -> ModelArchConfig:
    return ModelArchConfig.from_dict(NAMED_SHAPES[name])


def plan_with(config: ModelArchConfig, tp: int, device: str = "80GiB"):  # type: ignore[no-untyped-def]
    return make_plan(PlanInputs(config, "x", parse_device(device), tensor_parallel=tp, max_model_len=8192))


@pytest.mark.parametrize(
    ("name", "tp", "message"),
    [
        ("llama-3-8b", 3, "does not divide the 32 attention heads"),
        ("qwen2.5-7b", 8, "does not divide the 28 attention heads"),  # its 4 KV heads alone would replicate
        ("qwen2.5-0.5b", 4, "does not divide the 14 attention heads"),
    ],
)
def test_a_split_vllm_refuses_is_an_error(name: str, tp: int, message: str) -> None:
    """Silently flooring the heads per rank would plan a model that cannot be served that way."""
    with pytest.raises(ValueError, match=message):
        plan_with(shape(name), tp)


def test_kv_heads_split_evenly_or_replicate_evenly() -> None:
    six_kv = dataclasses.replace(shape("llama-3-8b"), num_attention_heads=24, num_key_value_heads=6)
    with pytest.raises(ValueError, match="does not divide the 6 KV heads"):
        plan_with(six_kv, 4)  # 24 heads split, 6 KV heads neither split nor replicate over 4 ranks
    twelve = dataclasses.replace(shape("llama-3-8b"), num_attention_heads=24, num_key_value_heads=8)
    with pytest.raises(ValueError, match="not a multiple of the 8 KV heads"):
        plan_with(twelve, 12)  # 8 KV heads over 12 ranks: 1.5 replicas each
    assert plan_with(shape("qwen2.5-7b"), 4).kv_heads_per_device == 1
    assert plan_with(shape("qwen2.5-7b"), 2).kv_heads_per_device == 2


def test_replicated_kv_heads_carry_their_projections() -> None:
    """Llama-3-8B on 16 ranks: 8 KV heads, so each is on 2 ranks, and so are its k and v projections."""
    params = count_parameters(shape("llama-3-8b"))
    assert params.kv_linear == 32 * 2 * 4096 * (8 * 128) == 268_435_456
    tp16 = plan_with(shape("llama-3-8b"), 16)
    # (projections + one more copy of k/v + embedding + LM head) in bf16 over 16 ranks, norms on each.
    sharded = (6_979_321_856 + 268_435_456 + 2 * 525_336_576) * 2
    assert tp16.weights_bytes_per_device == sharded // 16 + 266_240 * 2 == 1_037_836_288
    assert tp16.kv_bytes_per_token_per_device == 2 * 32 * 1 * 128 * 2
    tp8 = plan_with(shape("llama-3-8b"), 8)  # one KV head per rank, nothing replicated
    assert tp8.weights_bytes_per_device == (6_979_321_856 + 2 * 525_336_576) * 2 // 8 + 266_240 * 2


def test_a_cpu_plan_budgets_the_kv_cache_as_the_engine_does() -> None:
    """On a CPU the engine takes its fraction of the RAM left once the weights are loaded, not of all RAM."""
    config = shape("qwen2.5-0.5b")
    plan = make_plan(
        PlanInputs(
            config, "x", parse_device("cpu:24g"), max_model_len=4096, memory_utilization=0.5,
            max_num_batched_tokens=512,
        )
    )  # fmt: skip
    engine = plan_budget(
        config=config,
        dtype=torch.bfloat16,
        device=torch.device("cpu"),
        weights_bytes=plan.weights_bytes_per_device,
        activation_bytes=plan.activation_bytes,
        block_size=16,
        max_model_len=4096,
        max_num_seqs=1 << 30,
        kv_cache_memory=None,
        memory_utilization=0.5,
        available_after_profile=24 * GiB - plan.weights_bytes_per_device,
    )
    assert plan.kv_budget_bytes == engine.budget_bytes
    assert plan.num_blocks == engine.num_blocks
    # By hand: (24 GiB − 988,065,536 weights) × 0.5 − 338,034,688 activations, over 12,288 B × 16 per block.
    assert plan.kv_budget_bytes == (24 * GiB - 988_065_536) // 2 - 338_034_688 == 12_052_834_432
    assert plan.num_blocks == 12_052_834_432 // (12_288 * 16) == 61_303


def test_bad_inputs_exit_2_with_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    as_list = tmp_path / "list.json"
    as_list.write_text("[1, 2]")
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "config.json").write_text('"a string"')
    negative = tmp_path / "negative.json"
    negative.write_text(json.dumps({**NAMED_SHAPES["llama-3-8b"], "hidden_size": -4096}))
    no_layers = tmp_path / "no-layers.json"
    no_layers.write_text(json.dumps({**NAMED_SHAPES["llama-3-8b"], "num_hidden_layers": 0}))
    for args, message in [
        (["llama-3-8b", "--device", "h100-80g", "--bandwidth", "0"], "bandwidth must be a positive"),
        (["llama-3-8b", "--device", "h100-80g", "--bandwidth", "-3"], "bandwidth must be a positive"),
        (["llama-3-8b", "--device", "40GiB", "--bandwidth", "inf"], "bandwidth must be a positive"),
        ([str(as_list), "--device", "h100-80g"], "config holds a JSON list, not an object"),
        ([str(folder), "--device", "h100-80g"], "config holds a JSON str, not an object"),
        ([str(negative), "--device", "h100-80g"], "'hidden_size' must be positive"),
        ([str(no_layers), "--device", "h100-80g"], "'num_hidden_layers' must be positive"),
        (["llama-3-8b", "--device", "h100-80g", "-tp", "3"], "does not divide the 32 attention heads"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            main(["plan", *args])
        assert exit_info.value.code == 2, args
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, (args, err)
        assert err.strip().splitlines()[-1].startswith("switchyard plan: error:"), err


def test_bandwidth_zero_is_refused_not_replaced_by_the_presets() -> None:
    with pytest.raises(ValueError, match="bandwidth"):
        parse_device("h100-80g", bandwidth_gbps=0)
    assert parse_device("h100-80g", bandwidth_gbps=1000).bandwidth_bytes_per_s == 1e12


def test_running_sequences_are_capped_by_max_num_seqs(capsys: pytest.CaptureFixture[str]) -> None:
    # Qwen2.5-0.5B on a 24 GiB CPU: the KV cache holds 957 sequences of 1,024 tokens, 239 of 4,096.
    main(["plan", "qwen2.5-0.5b", "--device", "cpu:24g", "--max-num-seqs", "300", "--json"])
    plan = json.loads(capsys.readouterr().out)
    assert plan["max_num_seqs"] == 300
    assert plan["max_concurrent_seqs"]["1024"] == 957 and plan["max_running_seqs"]["1024"] == 300
    assert plan["max_concurrent_seqs"]["4096"] == plan["max_running_seqs"]["4096"] == 239
    main(["plan", "qwen2.5-0.5b", "--device", "cpu:24g"])
    table = capsys.readouterr().out
    assert "the engine runs 256 at once: --max-num-seqs" in table
