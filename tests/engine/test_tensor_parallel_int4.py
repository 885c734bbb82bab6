"""Tensor parallelism of int4 models on CPU (gloo, TP=2): GPTQ, AWQ and compressed-tensors int4 folders and
`--quantization int4` of a float32 folder give each rank an int4 shard (the checkpoint's own codes, half of one
rank's int4 bytes, not a float copy) that decodes the greedy tokens one rank does; a split that would cut an int4
group between ranks is refused, by the engine before any rank starts and by `switchyard plan`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from model_factory import build_hf_model
from prequantized_packers import awq, compressed, compressed_config, gptq, write_quantized

from switchyard.config import EngineConfig
from switchyard.engine.engine import LLMEngine
from switchyard.engine.parallel.rank_model import load_rank_model
from switchyard.engine.sampling_params import SamplingParams
from switchyard.models.llama import LlamaForCausalLM
from switchyard.models.quantization.apply import quantized_buffer_bytes
from switchyard.models.quantization.int4_formats import Int4Grid
from switchyard.models.quantization.int4_linear import Int4Linear
from switchyard.models.quantization.int4_split import Int4SplitError
from switchyard.models.quantization.quantized_experts import QuantizedExperts
from switchyard.plan.cli import main as plan_main

# head_dim 64: o_proj's 256 inputs split into 128 per rank, down_proj's 512 into 256 (whole groups of 128)
SHAPE = dict(hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=2)
PROMPTS = [[5, 17, 42, 99, 7, 61, 8], [200, 3, 3, 150, 61, 8, 12, 90, 33, 4, 18], [11, 250]]
MAX_TOKENS = 8

CASES = {
    "gptq-g128": (gptq(128), {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True}),
    "awq-g64": (awq(64), {"quant_method": "awq", "bits": 4, "group_size": 64, "version": "gemm"}),
    "ct-int4-channel": (
        compressed("channel", symmetric=False),
        compressed_config(
            {"num_bits": 4, "type": "int", "symmetric": False, "strategy": "channel"}, "pack-quantized"
        ),
    ),
    "quantize-int4": (None, None),  # `--quantization int4` of the float32 folder
}


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tp-int4-llama")
    build_hf_model("llama", folder, seed=5, **SHAPE)
    return folder


@pytest.fixture(scope="module")
def folders(source: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tp-int4-folders")
    made = {"quantize-int4": source}
    for case, (pack, config) in CASES.items():
        if pack is not None:
            made[case] = root / case
            write_quantized(source, made[case], pack, config)
    return made


def _quantization(case: str) -> str | None:
    return "int4" if case == "quantize-int4" else None


def _projections(model: LlamaForCausalLM) -> dict[str, torch.nn.Module]:
    return {
        name.replace(".block.", "."): module
        for name, module in model.named_modules()
        if name.rsplit(".", 1)[-1] in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
    }


def _weight(layer: Int4Linear) -> torch.Tensor:
    """The layer's dequantized weight [out, in], read through its own product."""
    with torch.no_grad():
        return layer(torch.eye(layer.in_features)).t()


@pytest.mark.parametrize("case", list(CASES))
def test_each_rank_holds_its_int4_shard_of_the_checkpoint_codes(folders: dict[str, Path], case: str) -> None:
    """Ranks built in this process (no collective runs while building): every projection is int4 on both
    ranks, holds half of one rank's int4 bytes, and its weight is exactly its slice of the unsplit layer's
    (q/k/v and gate/up sliced per part of the fused layer, o and down by whole input groups)."""
    folder = folders[case]
    load = dict(dtype=torch.float32, device=torch.device("cpu"), max_model_len=64)
    whole = load_rank_model(folder, quantization=_quantization(case), rank=0, world_size=1, **load)
    ranks = [
        load_rank_model(folder, quantization=_quantization(case), rank=r, world_size=2, **load)
        for r in (0, 1)
    ]
    config = whole.config
    q, kv, inter = config.q_size, config.kv_size, config.intermediate_size
    whole_layers = _projections(whole)
    for rank, shard in enumerate(ranks):
        assert quantized_buffer_bytes(shard) * 2 == quantized_buffer_bytes(whole)
        # codes at half a byte and a float32 scale and zero per group: ~1/7 of the shard's float32 weights
        float_bytes = sum(
            layer.in_features * layer.out_features * 4 for layer in _projections(shard).values()
        )
        assert quantized_buffer_bytes(shard) < 0.2 * float_bytes
        q_rows = torch.arange(rank * q // 2, (rank + 1) * q // 2)
        kv_rows = torch.arange(rank * kv // 2, (rank + 1) * kv // 2)
        inter_rows = torch.arange(rank * inter // 2, (rank + 1) * inter // 2)
        expected_rows = {
            "qkv_proj": torch.cat([q_rows, q + kv_rows, q + kv + kv_rows]),
            "gate_up_proj": torch.cat([inter_rows, inter + inter_rows]),
        }
        expected_cols = {"o_proj": q_rows, "down_proj": inter_rows}
        shard_layers = _projections(shard)
        assert shard_layers.keys() == whole_layers.keys()
        for name, layer in shard_layers.items():
            assert isinstance(layer, Int4Linear), name
            assert layer.packed_weight.dtype == torch.uint8, name
            kind = name.rsplit(".", 1)[-1]
            want = _weight(whole_layers[name])
            if kind in expected_rows:
                want = want.index_select(0, expected_rows[kind])
            else:
                want = want.index_select(1, expected_cols[kind])
            torch.testing.assert_close(_weight(layer), want, rtol=0, atol=1e-6, msg=name)


def _greedy(folder: Path, tp: int, quantization: str | None) -> tuple[list[list[int]], int]:
    """Greedy tokens of PROMPTS, and rank 0's weight bytes as the KV budget counted them."""
    engine = LLMEngine(
        EngineConfig(
            model=str(folder),
            dtype="float32",
            skip_tokenizer=True,
            kv_cache_memory=2 << 20,
            tensor_parallel_size=tp,
            quantization=quantization,
        )
    )
    try:
        params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
        for index, prompt in enumerate(PROMPTS):
            engine.add_request(str(index), prompt, params)
        tokens: dict[str, list[int]] = {}
        while engine.has_unfinished_requests():
            for output in engine.step():
                if output.finished:
                    tokens[output.request_id] = output.outputs[0].token_ids
        return [tokens[str(index)] for index in range(len(PROMPTS))], engine.kv_budget.weights_bytes
    finally:
        engine.close()


def _planned_weights(folder: Path, tp: int, quantization: str, capsys: pytest.CaptureFixture[str]) -> int:
    args = [str(folder), "--device", "80GiB", "--dtype", "float32", "--json", "--quantization", quantization]
    assert plan_main([*args, "--tensor-parallel-size", str(tp)]) == 0
    return int(json.loads(capsys.readouterr().out)["weights_bytes_per_device"])


@pytest.mark.parametrize("case", list(CASES))
def test_two_int4_ranks_decode_as_one_does(
    folders: dict[str, Path], case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = folders[case]
    single, _ = _greedy(folder, 1, _quantization(case))
    split, rank_weights = _greedy(folder, 2, _quantization(case))
    assert not dist.is_initialized()
    assert split == single
    # the KV budget counts what rank 0 holds, which is what `switchyard plan` counts per device: int4
    # projections (plus their scale tables, which the plan leaves out: ~6-12% here in float32), not float ones
    planned = _planned_weights(folder, 2, _quantization(case) or "auto", capsys)
    assert planned <= rank_weights < 1.15 * planned


def test_a_split_that_cuts_int4_groups_is_refused(
    folders: dict[str, Path], source: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # TP=4: o_proj's 256 inputs would be 64 per rank, half a GPTQ group of 128
    with pytest.raises(
        Int4SplitError, match=r"o_proj: with --tensor-parallel-size 4 each rank holds 64 .* 128"
    ):
        LLMEngine(
            EngineConfig(
                model=str(folders["gptq-g128"]), dtype="float32", skip_tokenizer=True, tensor_parallel_size=4
            )
        )
    assert not dist.is_initialized()  # refused before any rank started
    with pytest.raises(Int4SplitError, match=r"o_proj: .* group size 128"):
        LLMEngine(
            EngineConfig(
                model=str(source),
                dtype="float32",
                skip_tokenizer=True,
                tensor_parallel_size=4,
                quantization="int4",
            )
        )
    assert not dist.is_initialized()
    # a shard built directly (past the engine's check) refuses too, naming the layer
    with pytest.raises(Int4SplitError, match=r"model\.layers\.0\.self_attn\.o_proj: .* holds 64 .* 128"):
        load_rank_model(folders["gptq-g128"], torch.float32, torch.device("cpu"), 64, None, 0, 4)
    # AWQ's groups of 64 split whole over 4 ranks: the planner says so too, and refuses what the engine refuses
    assert plan_main([str(folders["awq-g64"]), "--device", "80GiB", "--tensor-parallel-size", "4"]) == 0
    assert "quantization int4" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        plan_main([str(folders["gptq-g128"]), "--device", "80GiB", "--tensor-parallel-size", "4"])
    assert "group size 128" in capsys.readouterr().err


def test_a_grid_is_sliced_by_rows_and_by_whole_groups_of_columns() -> None:
    scales = torch.arange(12.0).reshape(3, 4) + 1  # 3 rows, 4 groups of 32 inputs
    grid = Int4Grid(scales, scales / 10, 32)
    rows = grid.rows(torch.tensor([2, 0]))
    assert torch.equal(rows.scales, scales[[2, 0]]) and rows.group_size == 32
    columns = grid.columns(64, 64)
    assert torch.equal(columns.scales, scales[:, 2:4]) and torch.equal(columns.zeros, scales[:, 2:4] / 10)
    with pytest.raises(ValueError, match="do not fall on groups of 32"):
        grid.columns(16, 64)
    per_channel = Int4Grid(scales[:, :1], scales[:, :1], 128).columns(64, 64)  # one group: any slice
    assert per_channel.group_size == 64 and torch.equal(per_channel.scales, scales[:, :1])


def test_a_split_int4_mixture_keeps_each_experts_codes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A GPTQ Qwen3-MoE over 2 ranks: every expert is int4 on both ranks (half its inner width each, whole groups
    of 128), rank 0 holds half of one rank's int4 bytes, and the greedy tokens are one rank's. A mixture whose
    experts would be cut mid-group is refused before any rank starts."""
    source = tmp_path / "source"
    build_hf_model("qwen3_moe", source, seed=5, **SHAPE, moe_intermediate_size=256, head_dim=64)
    folder = tmp_path / "gptq"
    write_quantized(source, folder, gptq(128), {"quant_method": "gptq", "bits": 4, "group_size": 128})
    load = dict(dtype=torch.float32, device=torch.device("cpu"), max_model_len=64)
    whole = load_rank_model(folder, quantization=None, rank=0, world_size=1, **load)
    shard = load_rank_model(folder, quantization=None, rank=0, world_size=2, **load)
    assert quantized_buffer_bytes(shard) * 2 == quantized_buffer_bytes(whole)
    experts = [m for m in shard.modules() if isinstance(m, QuantizedExperts)]
    assert len(experts) == 2 and all(
        isinstance(layer, Int4Linear) and layer.in_features == 128 for layer in experts[0].down
    )
    single, _ = _greedy(folder, 1, None)
    split, rank_weights = _greedy(folder, 2, None)
    assert split == single
    planned = _planned_weights(folder, 2, "auto", capsys)
    assert planned <= rank_weights < 1.15 * planned

    narrow = tmp_path / "narrow"
    build_hf_model("qwen3_moe", narrow, seed=5, **SHAPE, moe_intermediate_size=128, head_dim=64)
    with pytest.raises(Int4SplitError, match=r"int4 mlp\.experts\.down_proj: .* each rank holds 64"):
        LLMEngine(
            EngineConfig(
                model=str(narrow),
                dtype="float32",
                skip_tokenizer=True,
                tensor_parallel_size=2,
                quantization="int4",
            )
        )
    assert not dist.is_initialized()
