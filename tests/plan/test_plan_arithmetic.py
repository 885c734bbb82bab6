"""`switchyard plan` against numbers worked out by hand for two published shapes."""

from __future__ import annotations

import dataclasses
import json

import pytest

from switchyard.cli import main
from switchyard.models.config import ModelArchConfig
from switchyard.plan.capacity import PlanInputs, count_parameters, make_plan
from switchyard.plan.devices import parse_device, parse_size
from switchyard.plan.shapes import NAMED_SHAPES

MiB, GiB = 1 << 20, 1 << 30


def shape(name: str) -> ModelArchConfig:
    return ModelArchConfig.from_dict(NAMED_SHAPES[name])


def test_llama3_8b_by_hand() -> None:
    # Llama-3-8B: 32 layers, hidden 4096, 32 heads x 128, 8 KV heads, intermediate 14336, vocab 128256, untied.
    embedding = 128256 * 4096  # 525,336,576, and the same again for the untied LM head
    per_layer = 4096 * 4096 + 2 * 4096 * (8 * 128) + 4096 * 4096 + 3 * 4096 * 14336  # q, k+v, o, gate+up+down
    assert per_layer == 218_103_808
    norms = 32 * 2 * 4096 + 4096  # two RMSNorms per layer + the final one
    params = count_parameters(shape("llama-3-8b"))
    assert (params.embedding, params.lm_head, params.linear, params.other) == (
        embedding,
        embedding,
        32 * per_layer,
        norms,
    )
    assert params.total == 8_030_261_248  # the published "8.03B"

    plan = make_plan(
        PlanInputs(shape("llama-3-8b"), "llama-3-8b", parse_device("h100-80g"), max_model_len=8192)
    )
    assert plan.dtype == "bfloat16"
    assert plan.weights_bytes_per_device == 2 * 8_030_261_248 == 16_060_522_496
    assert plan.kv_bytes_per_token_per_device == 2 * 32 * 8 * 128 * 2 == 131_072
    usable = int(81559 * MiB * 0.9)  # H100 80GB reports 81559 MiB
    assert plan.usable_bytes == usable == 76_968_728_985
    # Activation floor of engine/memory.py at 4096 tokens: per-layer widths in bf16 + fp32 logits.
    activation = 4096 * (4096 * 4 + 4096 * 3 + 1024 * 4 + 14336 * 4) * 2 + 4096 * 128256 * 4
    assert plan.activation_bytes == activation == 2_839_543_808
    kv_budget = usable - 16_060_522_496 - activation
    assert plan.kv_budget_bytes == kv_budget == 58_068_662_681
    assert plan.num_blocks == kv_budget // (131_072 * 16) == 27_689
    assert (
        plan.concurrency
        == {1024: 27_689 // 64, 4096: 27_689 // 256, 8192: 27_689 // 512}
        == {
            1024: 432,
            4096: 108,
            8192: 54,
        }
    )
    batch1 = plan.decode[0]
    assert (batch1.batch_size, batch1.context_len) == (1, 4096)
    # The untied embedding (128,256 x 4,096 x 2 bytes) is a lookup: a step reads one row per sequence of it.
    embedding_bytes = 128_256 * 4096 * 2
    assert batch1.bytes_per_step == 16_060_522_496 - embedding_bytes + 4096 * 2 + 4096 * 131_072
    assert batch1.step_seconds == pytest.approx(15_546_728_448 / 3.35e12)
    assert plan.decode[1].bytes_per_step == 16_060_522_496 - embedding_bytes + 8 * (4096 * 2 + 4096 * 131_072)
    assert [d.fits for d in plan.decode] == [True, True, True, False]  # 128 x 256 blocks > 27,689


def test_llama3_8b_int4_and_tensor_parallel() -> None:
    config = shape("llama-3-8b")
    int4 = make_plan(PlanInputs(config, "x", parse_device("80GiB"), quantization="int4", max_model_len=8192))
    # projections at half a byte, embedding + LM head + norms in bf16
    assert int4.weights_bytes_per_device == 6_979_321_856 // 2 + 2 * 525_336_576 * 2 + 266_240 * 2
    tp2 = make_plan(PlanInputs(config, "x", parse_device("80GiB"), tensor_parallel=2, max_model_len=8192))
    assert tp2.kv_heads_per_device == 4
    assert tp2.kv_bytes_per_token_per_device == 2 * 32 * 4 * 128 * 2
    assert tp2.weights_bytes_per_device == (16_060_522_496 - 266_240 * 2) // 2 + 266_240 * 2
    tp16 = make_plan(PlanInputs(config, "x", parse_device("80GiB"), tensor_parallel=16, max_model_len=8192))
    assert tp16.kv_heads_per_device == 1  # fewer KV heads than ranks: one replicated head each


def test_qwen25_05b_by_hand() -> None:
    # Qwen2.5-0.5B: 24 layers, hidden 896, 14 heads x 64, 2 KV heads, intermediate 4864, vocab 151936, tied,
    # q/k/v biases.
    embedding = 151936 * 896
    per_layer = 896 * 896 + 2 * 896 * 128 + 896 * 896 + 3 * 896 * 4864
    other = 24 * (2 * 896 + 896 + 2 * 128) + 896  # norms + q/k/v biases, final norm
    params = count_parameters(shape("qwen2.5-0.5b"))
    assert (params.embedding, params.lm_head, params.linear, params.other) == (
        embedding,
        0,
        24 * per_layer,
        other,
    )
    assert params.total == 494_032_768  # the published "0.49B"

    plan = make_plan(
        PlanInputs(
            shape("qwen2.5-0.5b"),
            "qwen2.5-0.5b",
            parse_device("cpu:24g", bandwidth_gbps=40),
            max_model_len=4096,
            memory_utilization=0.5,
            max_num_batched_tokens=512,
        )
    )
    assert plan.weights_bytes_per_device == 2 * 494_032_768
    assert plan.kv_bytes_per_token_per_device == 2 * 24 * 2 * 64 * 2 == 12_288
    activation = 512 * (896 * 4 + 896 * 3 + 128 * 4 + 4864 * 4) * 2 + 512 * 151936 * 4
    assert plan.activation_bytes == activation == 338_034_688
    # On a CPU the engine's fraction is of the RAM the weights leave: (24 GiB − weights) × 0.5.
    kv_budget = (24 * GiB - 988_065_536) // 2 - activation
    assert plan.num_blocks == kv_budget // (12_288 * 16) == 61_303
    assert plan.concurrency[1024] == 61_303 // 64 == 957
    assert plan.decode[-1].bytes_per_step == 988_065_536 + 128 * 2048 * 12_288
    assert plan.decode[-1].tokens_per_s == pytest.approx(128 / (plan.decode[-1].bytes_per_step / 40e9))

    fp8 = make_plan(PlanInputs(shape("qwen2.5-0.5b"), "x", parse_device("a10g-24g"), kv_dtype="fp8"))
    assert fp8.kv_bytes_per_token_per_device == 2 * 24 * 2 * 64 * 1
    e5m2 = make_plan(PlanInputs(shape("qwen2.5-0.5b"), "x", parse_device("a10g-24g"), kv_dtype="fp8_e5m2"))
    assert e5m2.kv_bytes_per_token_per_device == 2 * 24 * 2 * 64 * 1 and e5m2.kv_dtype == "fp8_e5m2"


def test_sizes_and_devices() -> None:
    assert parse_size("24g") == parse_size("24GiB") == 24 * GiB
    assert parse_size("80GB") == 80 * 10**9
    assert parse_size("512MiB") == 512 * MiB
    assert parse_device("cpu:8g").is_cpu and parse_device("cpu:8g").bandwidth_bytes_per_s is None
    assert parse_device("h200-141g", bandwidth_gbps=1000).bandwidth_bytes_per_s == 1e12
    with pytest.raises(ValueError, match="unknown device"):
        parse_device("tpu-v9")


def test_cli_table_json_and_errors(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    assert main(["plan", "qwen2.5-0.5b", "--device", "h100-80g"]) == 0
    table = capsys.readouterr().out
    assert "494,032,768" in table and "KV bytes per token per device" in table and "tokens/s" in table
    config = tmp_path / "config.json"
    config.write_text(json.dumps(NAMED_SHAPES["llama-3-8b"]))
    assert main(["plan", str(config), "--device", "80GiB", "--json", "--max-model-len", "8192"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["params"]["total"] == 8_030_261_248 and data["kv_bytes_per_token_per_device"] == 131_072
    assert data["decode_bounds"][0]["tokens_per_s"] is None  # a bare size has no bandwidth
    # The engine's flag name works too: an fp8 cache holds twice the tokens of the bf16 one.
    assert main(["plan", str(config), "--device", "80GiB", "--json", "--kv-cache-dtype", "fp8_e4m3"]) == 0
    assert json.loads(capsys.readouterr().out)["kv_bytes_per_token_per_device"] == 131_072 // 2
    for bad, message in [
        (["qwen2.5-0.5b", "--device", "tpu-v9"], "unknown device"),
        (["nowhere-model", "--device", "h100-80g"], "cannot read model"),
        (["qwen2.5-0.5b", "--device", "h100-80g", "-tp", "0"], "positive"),
        (["qwen2.5-0.5b", "--device", "h100-80g", "--memory-utilization", "2"], "(0, 1]"),
        (["qwen2.5-7b", "--device", "h100-80g", "--speculative-model", "nowhere"], "cannot read speculative"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            main(["plan", *bad])
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err


def test_a_draft_model_shares_the_memory(capsys: pytest.CaptureFixture[str]) -> None:
    """Like the engine: the draft's weights come off the budget and every block also holds the draft's KV."""
    inputs = PlanInputs(shape("qwen2.5-7b"), "qwen2.5-7b", parse_device("h100-80g"), max_model_len=8192)
    plain = make_plan(inputs)
    draft = shape("qwen2.5-0.5b")
    spec = make_plan(dataclasses.replace(inputs, draft_config=draft))
    assert spec.draft_weights_bytes == 988_065_536  # 494,032,768 parameters in bf16
    assert spec.draft_kv_bytes_per_token == 2 * 24 * 2 * 64 * 2 == 12_288
    assert spec.kv_budget_bytes == plain.kv_budget_bytes - 988_065_536
    per_block = (plain.kv_bytes_per_token_per_device + 12_288) * 16
    assert spec.num_blocks == spec.kv_budget_bytes // per_block < plain.num_blocks
    assert main(["plan", "qwen2.5-7b", "--device", "h100-80g", "--speculative-model", "qwen2.5-0.5b"]) == 0
    assert "draft weights (speculative)" in capsys.readouterr().out


def test_a_speculator_adds_its_weights_and_no_cache(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    """A speculator folder as --speculative-model: its weights come off the budget, the blocks stay the
    target's alone."""
    from switchyard.models.speculator import Speculator, SpeculatorConfig

    config = SpeculatorConfig(hidden_size=896, vocab_size=151936, num_steps=3)
    assert config.num_parameters == sum(p.numel() for p in Speculator(config).parameters())
    inputs = PlanInputs(shape("qwen2.5-7b"), "qwen2.5-7b", parse_device("h100-80g"), max_model_len=8192)
    plain = make_plan(inputs)
    spec = make_plan(dataclasses.replace(inputs, speculator_parameters=config.num_parameters))
    assert spec.draft_weights_bytes == 2 * config.num_parameters and spec.draft_kv_bytes_per_token == 0
    assert spec.kv_budget_bytes == plain.kv_budget_bytes - 2 * config.num_parameters
    folder = tmp_path / "speculator"
    Speculator(SpeculatorConfig(hidden_size=64, vocab_size=320)).save(folder)
    assert main(["plan", "qwen2.5-7b", "--device", "h100-80g", "--speculative-model", str(folder)]) == 0
    assert "speculator weights (speculative)" in capsys.readouterr().out


def test_mixtral_8x7b_active_and_total_by_hand() -> None:
    # Mixtral-8x7B: 32 layers, every MLP 8 experts of intermediate 14336, top 2; published as 46.7B parameters,
    # 12.9B active per token.
    hidden, layers = 4096, 32
    attention = 4096 * 4096 + 2 * 4096 * 1024 + 4096 * 4096
    expert = 3 * hidden * 14336
    params = count_parameters(shape("mixtral-8x7b"))
    assert params.experts == layers * 8 * expert
    assert params.active_experts == layers * 2 * expert
    assert params.linear == layers * (attention + 8 * expert)
    assert params.other == layers * (2 * hidden + 8 * hidden) + hidden  # norms, routers, final norm
    assert params.total == 46_702_792_704
    assert params.active == params.total - 6 * layers * expert == 12_879_925_248


def test_qwen_moe_counts_shared_experts_and_dense_layers() -> None:
    # Qwen3-30B-A3B: 48 sparse layers of 128 experts (intermediate 768), top 8: 30.5B held, 3.3B active.
    qwen3 = count_parameters(shape("qwen3-30b-a3b"))
    assert round(qwen3.total / 1e9, 1) == 30.5 and round(qwen3.active / 1e9, 1) == 3.4
    # Qwen1.5-MoE-A2.7B: 60 experts (1408), top 4, and a shared expert (5632) always on: 14.3B held, 2.7B active.
    qwen2 = count_parameters(shape("qwen1.5-moe-a2.7b"))
    assert round(qwen2.total / 1e9, 1) == 14.3 and round(qwen2.active / 1e9, 1) == 2.7
    # A layer listed in mlp_only_layers keeps a dense MLP of intermediate_size and has no experts.
    mixed = ModelArchConfig.from_dict({**NAMED_SHAPES["qwen1.5-moe-a2.7b"], "mlp_only_layers": [0]})
    fewer = count_parameters(mixed)
    per_layer_experts = 60 * 3 * 2048 * 1408
    assert qwen2.experts - fewer.experts == per_layer_experts
    shared_expert, dense_mlp = 3 * 2048 * 5632, 3 * 2048 * 5632  # shared_expert_ and intermediate_size
    assert fewer.linear == qwen2.linear - per_layer_experts - shared_expert + dense_mlp
    assert fewer.other == qwen2.other - 60 * 2048 - 2048  # its router and shared-expert gate


def test_a_mixture_decode_step_reads_only_the_routed_experts() -> None:
    """Batch 1 reads its top-2 of 8 experts per layer; large batches approach all of them (uniform routing)."""
    plan = make_plan(
        PlanInputs(
            config=shape("mixtral-8x7b"),
            model_name="mixtral-8x7b",
            device=parse_device("h100-80g"),
            batch_sizes=(1, 512),
            context_len=16,
        )
    )
    params, element = plan.params, 2
    kv = plan.kv_bytes_per_token_per_device * 16
    one, many = plan.decode
    # Batch 1: everything but the 6 experts per layer it was not routed to, and one embedding row.
    unread_experts = params.experts * element * 6 // 8
    assert one.bytes_per_step == pytest.approx(
        plan.weights_bytes_per_device - unread_experts - params.embedding * element + 4096 * element + kv,
        rel=1e-9,
    )
    assert many.bytes_per_step > plan.weights_bytes_per_device - params.embedding * element
    assert one.bytes_per_step < 0.3 * plan.weights_bytes_per_device
