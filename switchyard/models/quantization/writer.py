"""`switchyard quantize`: a Hugging Face folder in, an int8 or w8a8 checkpoint (compressed-tensors layout) out.

The weights of the decoder's projections are stored as int8 with a float32 scale per output channel; for w8a8
they are first smoothed (smoothing.py) on calibration text, so the checkpoint carries the smoothing folded in
and loads with no extra step. Everything else (embeddings, norms, LM head, routers, tokenizer files) is copied
as is. A mixture's experts are written per expert under the checkpoint's own names (Mixtral's w1/w3/w2,
Qwen's gate/up/down_proj): transformers holds them fused in memory, and its `save_pretrained` writes them back
in the checkpoint's layout, which is read again to quantize each expert's matrices.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from switchyard.errors import ModelLoadError
from switchyard.models.config import ModelArchConfig
from switchyard.models.quantization.checkpoint import checkpoint_scheme, compressed_tensors_config
from switchyard.models.quantization.int8_linear import quantize_per_channel
from switchyard.models.quantization.smoothing import activation_maxima, smooth, smoothed_groups

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "w1", "w2", "w3")
"""The checkpoint names of quantized projections (Mixtral's experts are w1 gate, w2 down, w3 up)."""
MIXTURE_IGNORE = ("re:.*mlp\\.gate$", "re:.*block_sparse_moe\\.gate$", "re:.*shared_expert_gate$")
"""A mixture's routers, left unquantized: named in the config's `ignore` list, as llm-compressor names them."""
WEIGHT_FILES = {"model.safetensors", "model.safetensors.index.json"}


@dataclass(frozen=True)
class QuantizeJob:
    source: Path
    output: Path
    method: str = "w8a8"
    """int8 (weights only) or w8a8 (smoothed, for per-token int8 activations)."""
    calibration: Path | None = None
    """Text (one sample per line, or JSONL with a "text" field); required for w8a8."""
    alpha: float = 0.5
    samples: int = 64
    max_tokens: int = 512


def quantize_checkpoint(job: QuantizeJob) -> Path:
    """Write the quantized checkpoint to `job.output` (which must not exist yet) and return it."""
    if job.method not in ("int8", "w8a8"):
        raise ValueError(f"switchyard quantize writes int8 or w8a8 checkpoints, not {job.method!r}")
    if job.method == "w8a8" and job.calibration is None:
        raise ValueError("w8a8 needs calibration text (--calib FILE) for its smoothing factors")
    if job.output.exists():
        raise FileExistsError(f"{job.output} already exists")
    if checkpoint_scheme(job.source) is not None:
        raise ModelLoadError("the checkpoint is already quantized", str(job.source))
    mixture = ModelArchConfig.from_folder(job.source).moe is not None
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(job.source, dtype=torch.float32).eval()
    stored_dtype = _stored_dtype(job.source)
    if job.method == "w8a8":
        assert job.calibration is not None
        from switchyard.models.tokenizer import load_tokenizer

        groups = smoothed_groups(model)
        tokenizer = load_tokenizer(job.source)
        batches = _calibration_batches(tokenizer, job.calibration, job.samples, job.max_tokens)
        smooth(groups, activation_maxima(model, groups, batches), job.alpha)
    tensors: dict[str, torch.Tensor] = {}
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    job.output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=job.output.parent) as scratch:
        for name, tensor in _checkpoint_tensors(model, mixture, Path(scratch)):
            if tied and name == "lm_head.weight":
                continue
            if name.endswith(".weight") and name.rsplit(".", 2)[-2] in PROJECTIONS:
                quantized, scales = quantize_per_channel(tensor)
                tensors[name] = quantized
                tensors[name + "_scale"] = scales.reshape(-1, 1)
            else:
                tensors[name] = tensor.to(stored_dtype).contiguous()
    job.output.mkdir(parents=True)
    save_file(tensors, str(job.output / "model.safetensors"), metadata={"format": "pt"})
    for path in job.source.iterdir():
        if path.is_file() and path.name not in WEIGHT_FILES and not path.name.endswith(".safetensors"):
            shutil.copy2(path, job.output / path.name)
    config = json.loads((job.source / "config.json").read_text())
    quantization = compressed_tensors_config(job.method)
    if mixture:
        quantization["ignore"] = [*quantization["ignore"], *MIXTURE_IGNORE]
    config["quantization_config"] = quantization
    (job.output / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return job.output


def _checkpoint_tensors(
    model: torch.nn.Module, mixture: bool, scratch: Path
) -> Iterator[tuple[str, torch.Tensor]]:
    """The (smoothed) model's tensors under the checkpoint's names. A dense model's state dict has them; a
    mixture's experts are fused in transformers' memory, so it is saved to `scratch` in the checkpoint layout
    (`save_pretrained` splits them per expert) and read back one tensor at a time."""
    if not mixture:
        yield from model.state_dict().items()
        return
    model.save_pretrained(scratch, safe_serialization=True)  # type: ignore[operator]
    for path in sorted(scratch.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as handle:
            for name in handle.keys():  # noqa: SIM118 (a safetensors handle is not a dict)
                yield name, handle.get_tensor(name)


def _stored_dtype(folder: Path) -> torch.dtype:
    raw = json.loads((folder / "config.json").read_text())
    name = raw.get("dtype") or raw.get("torch_dtype") or "float32"
    return {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(name, torch.float32)


def _calibration_batches(tokenizer, path: Path, samples: int, max_tokens: int) -> Iterator[torch.Tensor]:  # type: ignore[no-untyped-def]
    taken = 0
    for text in _texts(path):
        ids = tokenizer.encode(text, add_special_tokens=False)[:max_tokens]
        if not ids:
            continue
        yield torch.tensor([ids])
        taken += 1
        if taken >= samples:
            return


def _texts(path: Path) -> Iterator[str]:
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("{"):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                yield line
                continue
            text = record.get("text") if isinstance(record, dict) else None
            if isinstance(text, str):
                yield text
            continue
        yield line
