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


QWEN3_06B = dict(
    vocab_size=151936,
    hidden_size=1024,
    intermediate_size=3072,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    max_position_embeddings=4096,
    tie_word_embeddings=True,
    rope_theta=1000000.0,
)
"""Qwen3-0.6B's body (q/k norms, head_dim 128)."""

QWEN3_MOE_SMALL = dict(
    vocab_size=8192,
    hidden_size=1024,
    intermediate_size=2816,
    moe_intermediate_size=512,
    num_experts=32,
    num_experts_per_tok=4,
    norm_topk_prob=True,
    num_hidden_layers=8,
    num_attention_heads=16,
    num_key_value_heads=4,
    head_dim=64,
    max_position_embeddings=4096,
    tie_word_embeddings=True,
)
"""A small Qwen3-MoE: 32 experts of width 512, 4 per token, q/k norms; 0.43B parameters, 0.12B active."""


def random_ids(count: int, length: int, seed: int, vocab_size: int = SMALL["vocab_size"]) -> list[list[int]]:
    """Seeded random prompts, clear of the vocabulary's first and last 100 ids (special tokens live there)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(100, vocab_size - 100, (count, length), generator=generator).tolist()


FAMILIES = {
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM"),
}
"""transformers' config and model classes of each architecture the benchmarks build."""


def build_random(
    folder: Path, family: str, shape: dict, dtype: torch.dtype = torch.bfloat16, seed: int = 0
) -> Path:
    """Save a random model of `family` (FAMILIES) and `shape` to folder (reused when already there). Random
    init has std 0.02 everywhere, which keeps activations in a realistic range without training."""
    if (folder / "config.json").is_file():
        return folder
    config_name, model_name = FAMILIES[family]
    config = getattr(transformers, config_name)(**shape)
    torch.manual_seed(seed)
    model = getattr(transformers, model_name)(config).to(dtype)
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def build_qwen2(folder: Path, shape: dict, dtype: torch.dtype = torch.bfloat16, seed: int = 0) -> Path:
    return build_random(folder, "qwen2", shape, dtype, seed)


def add_tokenizer(folder: Path, vocab_size: int) -> Path:
    """Give a random model a tokenizer whose every id decodes to text, so its streams carry one chunk per token.

    The tests' 320-token BPE tokenizer (trained, with a chat template) is padded with plain added tokens up to
    the model's vocabulary size.
    """
    import sys

    if (folder / "tokenizer.json").is_file():
        return folder
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from tokenizer_factory import build_tokenizer

    build_tokenizer(folder, vocab_size=min(vocab_size, 320))
    if vocab_size > 320:
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
        tokenizer.add_tokens([f"<t{i}>" for i in range(320, vocab_size)])
        tokenizer.save_pretrained(folder)
    return folder


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="Build a random-initialised model folder of a named shape.")
    parser.add_argument("shape", choices=("qwen25_05b", "small", "tiny"))
    parser.add_argument("folder", type=Path)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--vocab-size", type=int, default=None, help="override the shape's vocabulary")
    parser.add_argument("--tokenizer", action="store_true", help="add a tokenizer (needed to serve it)")
    args = parser.parse_args(argv)
    shape = {"qwen25_05b": QWEN25_05B, "small": SMALL, "tiny": TINY}[args.shape]
    if args.vocab_size:
        shape = {**shape, "vocab_size": args.vocab_size}
    folder = build_qwen2(args.folder, shape, dtype=getattr(torch, args.dtype))
    if args.tokenizer:
        add_tokenizer(folder, shape["vocab_size"])
    print(folder)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
