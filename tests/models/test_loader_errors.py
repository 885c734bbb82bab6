"""Bad model folders fail with a typed Switchyard error whose message names the file and the problem.

A user pointing `switchyard serve` at a wrong folder should learn what to fix without a traceback into
safetensors or torch, and the server maps these types to one error response. Each test copies one good tiny
checkpoint and breaks one thing about it. Unsupported-but-readable models raise UnsupportedModelError, broken
ones ModelLoadError (its base class), so tests of breakage also make sure it is not reported as unsupported.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers
from model_factory import build_hf_model
from paged_runner import PagedRunner
from safetensors.torch import load_file, save_file

from switchyard.errors import ModelLoadError, UnsupportedModelError
from switchyard.models import load_model

pytestmark = pytest.mark.usefixtures("single_thread")  # tests/models/conftest.py


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, transformers.PreTrainedModel]:
    """One good Llama checkpoint, built once; tests copy it before breaking it."""
    folder = tmp_path_factory.mktemp("good")
    return folder, build_hf_model("llama", folder)


@pytest.fixture
def folder(saved: tuple[Path, transformers.PreTrainedModel], tmp_path: Path) -> Path:
    """A private copy of the good checkpoint for one test to break."""
    return Path(shutil.copytree(saved[0], tmp_path / "model"))


def edit_config(folder: Path, drop: tuple[str, ...] = (), **changes: Any) -> None:
    config = json.loads((folder / "config.json").read_text())
    for key in drop:
        config.pop(key, None)
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))


def broken_load(folder: Path, error: type[ModelLoadError] = ModelLoadError) -> str:
    """Load, expecting exactly `error` (not a subclass, so breakage is never reported as unsupported)."""
    with pytest.raises(error) as info:
        load_model(folder)
    assert type(info.value) is error, f"{type(info.value).__name__}: {info.value}"
    return str(info.value)


def test_unknown_architecture_is_unsupported(folder: Path) -> None:
    edit_config(folder, architectures=["GPT2LMHeadModel"], model_type="gpt2")
    message = broken_load(folder, UnsupportedModelError)
    assert "config.json" in message and "GPT2LMHeadModel" in message


def test_unknown_model_type_without_architectures_is_unsupported(folder: Path) -> None:
    edit_config(folder, drop=("architectures",), model_type="falcon")
    message = broken_load(folder, UnsupportedModelError)
    assert "config.json" in message and "falcon" in message


def test_truncated_safetensors(folder: Path) -> None:
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    message = broken_load(folder)
    assert "model.safetensors" in message and "truncated" in message


def test_missing_tensor(folder: Path) -> None:
    weights = folder / "model.safetensors"
    tensors = load_file(weights)
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, weights, metadata={"format": "pt"})
    message = broken_load(folder)
    assert str(folder) in message and "model.layers.1.mlp.up_proj.weight" in message and "missing" in message


def test_tensor_shape_mismatch(folder: Path) -> None:
    """config.json says intermediate_size 96 while the checkpoint's MLP was saved with 128."""
    edit_config(folder, intermediate_size=96)
    message = broken_load(folder)
    assert "model.safetensors" in message and "mlp" in message
    assert "(128, 64)" in message and "(96, 64)" in message


def test_empty_folder(tmp_path: Path) -> None:
    message = broken_load(tmp_path)
    assert str(tmp_path) in message and "config.json not found" in message


def test_missing_folder(tmp_path: Path) -> None:
    message = broken_load(tmp_path / "nowhere")
    assert "nowhere" in message and "not found" in message


def test_unparseable_config(folder: Path) -> None:
    (folder / "config.json").write_text("{not json")
    message = broken_load(folder)
    assert "config.json" in message and "cannot parse" in message


def test_config_missing_required_field(folder: Path) -> None:
    edit_config(folder, drop=("hidden_size",))
    message = broken_load(folder)
    assert "config.json" in message and "hidden_size" in message


def test_config_that_is_not_an_object(folder: Path) -> None:
    (folder / "config.json").write_text("[1, 2]")
    message = broken_load(folder)
    assert "config.json" in message and "not an object" in message


@pytest.mark.parametrize("field", ["hidden_size", "num_hidden_layers", "num_key_value_heads", "head_dim"])
def test_config_with_a_size_below_one(folder: Path, field: str) -> None:
    edit_config(folder, **{field: -64 if field != "num_hidden_layers" else 0})
    message = broken_load(folder)
    assert field in message and "positive" in message


def test_only_pytorch_model_bin(folder: Path) -> None:
    """Pickled checkpoints are refused (loading them runs arbitrary code); the message says to convert."""
    state = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    torch.save(state, folder / "pytorch_model.bin")
    message = broken_load(folder)
    assert "pytorch_model.bin" in message and "safetensors" in message


def test_sharded_checkpoint_loads_and_matches(
    saved: tuple[Path, transformers.PreTrainedModel], tmp_path: Path
) -> None:
    """save_pretrained with a small max_shard_size writes model-0000x-of-0000y.safetensors and an index; the
    loader follows the index to the same parameters and logits as the single-file checkpoint."""
    single, hf = saved
    hf.save_pretrained(tmp_path, max_shard_size="100KB")
    shards = sorted(tmp_path.glob("model-*-of-*.safetensors"))
    assert len(shards) > 1 and (tmp_path / "model.safetensors.index.json").is_file()
    assert not (tmp_path / "model.safetensors").exists()

    sharded, reference = load_model(tmp_path), load_model(single)
    reference_params = dict(reference.named_parameters())
    for name, param in sharded.named_parameters():
        assert torch.equal(param, reference_params[name]), name
    prompt = torch.randint(0, 320, (17,), generator=torch.Generator().manual_seed(0)).tolist()
    runner = PagedRunner(sharded)
    logits = runner.prefill([runner.add(prompt)])[0]
    with torch.no_grad():
        expected = hf(torch.tensor([prompt])).logits[0, -1]
    assert (logits - expected).abs().max().item() < 1e-4


def test_sharded_checkpoint_with_missing_shard(
    saved: tuple[Path, transformers.PreTrainedModel], tmp_path: Path
) -> None:
    saved[1].save_pretrained(tmp_path, max_shard_size="100KB")
    missing = sorted(tmp_path.glob("model-*-of-*.safetensors"))[-1]
    missing.unlink()
    message = broken_load(tmp_path)
    assert missing.name in message and "missing" in message


def test_longrope_is_unsupported(folder: Path) -> None:
    edit_config(
        folder,
        rope_parameters={
            "rope_type": "longrope",
            "rope_theta": 10000.0,
            "factor": 4.0,
            "original_max_position_embeddings": 128,
        },
    )
    message = broken_load(folder, UnsupportedModelError)
    assert "config.json" in message and "longrope" in message


def test_legacy_longrope_scaling_is_unsupported(folder: Path) -> None:
    edit_config(
        folder,
        drop=("rope_parameters",),
        rope_theta=10000.0,
        rope_scaling={"type": "longrope", "factor": 4.0},
    )
    message = broken_load(folder, UnsupportedModelError)
    assert "config.json" in message and "longrope" in message


def test_gelu_activation_is_unsupported(folder: Path) -> None:
    edit_config(folder, hidden_act="gelu")
    message = broken_load(folder, UnsupportedModelError)
    assert "config.json" in message and "gelu" in message


def test_qwen_sliding_window_without_a_window_is_an_error(folder: Path) -> None:
    edit_config(folder, architectures=["Qwen2ForCausalLM"], model_type="qwen2", use_sliding_window=True)
    message = broken_load(folder, ModelLoadError)
    assert "config.json" in message and "use_sliding_window" in message


def test_unknown_layer_types_are_unsupported(folder: Path) -> None:
    edit_config(
        folder,
        architectures=["Qwen2ForCausalLM"],
        model_type="qwen2",
        use_sliding_window=True,
        sliding_window=8,
        layer_types=["chunked_attention", "full_attention"],
    )
    message = broken_load(folder, UnsupportedModelError)
    assert "config.json" in message and "layer_types" in message


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [
        ("float32", torch.float32),
        ("bfloat16", torch.bfloat16),
        ("float16", torch.float16),
        ("bf16", torch.bfloat16),
        (torch.float16, torch.float16),
    ],
)
def test_dtype_argument_sets_parameter_dtype(
    saved: tuple[Path, transformers.PreTrainedModel], dtype: str | torch.dtype, expected: torch.dtype
) -> None:
    """Every parameter (fused or not, tied lm_head included) takes the requested dtype, and a forward in that
    dtype runs and gives finite float32 logits."""
    model = load_model(saved[0], dtype=dtype)
    assert {param.dtype for param in model.parameters()} == {expected}
    assert model.lm_head.weight.dtype == expected
    runner = PagedRunner(model)
    logits = runner.prefill([runner.add([1, 2, 3, 4, 5])])[0]
    assert logits.dtype == torch.float32 and torch.isfinite(logits).all()


def test_unknown_dtype_is_rejected(saved: tuple[Path, transformers.PreTrainedModel]) -> None:
    with pytest.raises(ValueError, match="int8"):
        load_model(saved[0], dtype="int8")
