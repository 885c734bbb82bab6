"""Model shapes the benchmarks build as random-initialised Hugging Face folders (no hub needed)."""

from __future__ import annotations

from pathlib import Path

import torch
import transformers

QWEN25_05B = dict(
    vocab_size=151936,
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    max_position_embeddings=4096,
    tie_word_embeddings=True,
    rope_theta=1000000.0,
)

SMALL = dict(
    vocab_size=32000,
    hidden_size=512,
    intermediate_size=1536,
    num_hidden_layers=8,
    num_attention_heads=8,
    num_key_value_heads=2,
    max_position_embeddings=4096,
    tie_word_embeddings=True,
)

TINY = dict(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=4096,
    tie_word_embeddings=True,
)


def build_qwen2(folder: Path, shape: dict, dtype: torch.dtype = torch.bfloat16, seed: int = 0) -> Path:
    """Save a random Qwen2-architecture model of `shape` to folder (reused when already there)."""
    if (folder / "config.json").is_file():
        return folder
    config = transformers.Qwen2Config(**shape)
    torch.manual_seed(seed)
    with torch.device("cpu"):
        model = transformers.Qwen2ForCausalLM(config).to(dtype)
    # Random init has std 0.02 everywhere; this keeps activations in a realistic range without training.
    model.save_pretrained(folder, safe_serialization=True)
    return folder
