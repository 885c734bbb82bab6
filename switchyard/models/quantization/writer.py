"""`switchyard quantize`: a Hugging Face folder in, an int8 or w8a8 checkpoint (compressed-tensors layout) out.

The weights of the decoder's projections are stored as int8 with a float32 scale per output channel; for w8a8
they are first smoothed (smoothing.py) on calibration text, so the checkpoint carries the smoothing folded in
and loads with no extra step. Everything else (embeddings, norms, LM head, tokenizer files) is copied as is.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from switchyard.errors import ModelLoadError
from switchyard.models.config import ModelArchConfig
from switchyard.models.quantization.checkpoint import checkpoint_scheme, compressed_tensors_config
from switchyard.models.quantization.int8_linear import quantize_per_channel
from switchyard.models.quantization.smoothing import activation_maxima, smooth, smoothed_groups

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
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
    if ModelArchConfig.from_folder(job.source).moe is not None:
        # transformers holds the experts fused in memory; written back they would not be the per-expert
        # tensors a checkpoint (and Switchyard's loader) names. Quantizing at load (--quantization) quantizes
        # every expert (quantized_experts.py).
        raise ValueError("switchyard quantize does not write mixture-of-experts checkpoints yet")
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
    for name, tensor in model.state_dict().items():
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
    config["quantization_config"] = compressed_tensors_config(job.method)
    (job.output / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return job.output


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
