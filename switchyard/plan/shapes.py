"""Named shapes of common models (their `config.json` fields), so `switchyard plan` needs no download."""

from __future__ import annotations

from typing import Any

NAMED_SHAPES: dict[str, dict[str, Any]] = {
    "llama-3-8b": dict(
        architectures=["LlamaForCausalLM"], vocab_size=128256, hidden_size=4096, intermediate_size=14336,
        num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192,
        tie_word_embeddings=False, rope_theta=500000.0,
    ),
    "llama-3-70b": dict(
        architectures=["LlamaForCausalLM"], vocab_size=128256, hidden_size=8192, intermediate_size=28672,
        num_hidden_layers=80, num_attention_heads=64, num_key_value_heads=8, max_position_embeddings=8192,
        tie_word_embeddings=False, rope_theta=500000.0,
    ),
    "llama-3.2-1b": dict(
        architectures=["LlamaForCausalLM"], vocab_size=128256, hidden_size=2048, intermediate_size=8192,
        num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8, head_dim=64,
        max_position_embeddings=131072, tie_word_embeddings=True, rope_theta=500000.0,
    ),
    "mistral-7b": dict(
        architectures=["MistralForCausalLM"], vocab_size=32000, hidden_size=4096, intermediate_size=14336,
        num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=32768,
        tie_word_embeddings=False, rope_theta=1000000.0,
    ),
    "qwen2.5-0.5b": dict(
        architectures=["Qwen2ForCausalLM"], vocab_size=151936, hidden_size=896, intermediate_size=4864,
        num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
        tie_word_embeddings=True, rope_theta=1000000.0,
    ),
    "qwen2.5-7b": dict(
        architectures=["Qwen2ForCausalLM"], vocab_size=152064, hidden_size=3584, intermediate_size=18944,
        num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=32768,
        tie_word_embeddings=False, rope_theta=1000000.0,
    ),
    "qwen3-8b": dict(
        architectures=["Qwen3ForCausalLM"], vocab_size=151936, hidden_size=4096, intermediate_size=12288,
        num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
        max_position_embeddings=40960, tie_word_embeddings=False, rope_theta=1000000.0,
    ),
}  # fmt: skip
"""Shapes as published in each model's `config.json` on the Hugging Face hub (weights not needed)."""
