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
    "mixtral-8x7b": dict(
        architectures=["MixtralForCausalLM"], vocab_size=32000, hidden_size=4096, intermediate_size=14336,
        num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=32768,
        tie_word_embeddings=False, rope_theta=1000000.0, num_local_experts=8, num_experts_per_tok=2,
    ),
    "qwen1.5-moe-a2.7b": dict(
        architectures=["Qwen2MoeForCausalLM"], vocab_size=151936, hidden_size=2048, intermediate_size=5632,
        num_hidden_layers=24, num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=8192,
        tie_word_embeddings=False, rope_theta=1000000.0, num_experts=60, num_experts_per_tok=4,
        moe_intermediate_size=1408, shared_expert_intermediate_size=5632, norm_topk_prob=False,
    ),
    "qwen3-30b-a3b": dict(
        architectures=["Qwen3MoeForCausalLM"], vocab_size=151936, hidden_size=2048, intermediate_size=6144,
        num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
        max_position_embeddings=40960, tie_word_embeddings=False, rope_theta=1000000.0, num_experts=128,
        num_experts_per_tok=8, moe_intermediate_size=768, norm_topk_prob=True,
    ),
}  # fmt: skip
"""Shapes as published in each model's `config.json` on the Hugging Face hub (weights not needed)."""
