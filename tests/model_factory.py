"""Builds small random-initialised Hugging Face models in a folder, the way tests get models without a hub."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import transformers

TINY_SHAPE: dict[str, Any] = dict(
    vocab_size=320,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
)

ARCHS: dict[str, tuple[type, type]] = {
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
    "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
    "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
    "mixtral": (transformers.MixtralConfig, transformers.MixtralForCausalLM),
    "qwen2_moe": (transformers.Qwen2MoeConfig, transformers.Qwen2MoeForCausalLM),
    "qwen3_moe": (transformers.Qwen3MoeConfig, transformers.Qwen3MoeForCausalLM),
}
MOE_ARCHS = ("mixtral", "qwen2_moe", "qwen3_moe")
# Small mixtures that still route: 4 experts, 2 per token, experts narrower than the dense MLP (as in the real
# checkpoints), Qwen2-MoE with its shared expert. Widths are multiples of 4 so the float32 grouped product runs.
TINY_MOE: dict[str, dict[str, Any]] = {
    "mixtral": dict(num_local_experts=4, num_experts_per_tok=2),
    "qwen2_moe": dict(
        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=48, shared_expert_intermediate_size=96
    ),
    "qwen3_moe": dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=48, norm_topk_prob=True),
}


def build_hf_model(arch: str, folder: Path, seed: int = 0, **overrides: Any) -> transformers.PreTrainedModel:
    """Save a random model of `arch` to `folder` (safetensors) and return it in float32."""
    config_cls, model_cls = ARCHS[arch]
    shape = {**TINY_SHAPE, **TINY_MOE.get(arch, {}), **overrides}
    if arch in ("qwen3", "qwen3_moe"):
        shape.setdefault("head_dim", 32)
    if arch in ("mistral", "mixtral"):
        shape.setdefault("sliding_window", None)
    config = config_cls(**shape)
    torch.manual_seed(seed)
    model = model_cls(config).eval()
    # Random init leaves norms at 1 and biases at 0; perturb them so the tests see every term.
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name or name.endswith(".bias"):
                param.add_(torch.randn_like(param) * 0.1)
    model.save_pretrained(folder, safe_serialization=True)
    return model
