"""One implementation of the Llama family: Llama, Qwen2 (q/k/v bias), Qwen3 (q/k RMSNorm), Mistral.

Parameter names follow the Hugging Face checkpoints except two fusions made at load time for fewer, larger
matrix products: q/k/v projections into `qkv_proj` and gate/up into `gate_up_proj`. The forward pass takes a
flat batch of tokens with explicit positions and attention metadata; it knows nothing of sequences.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from switchyard.models.attention import AttentionMetadata, paged_attention, write_kv
from switchyard.models.config import ModelArchConfig
from switchyard.models.rope import RotaryEmbedding, apply_rotary

KVCaches = list[tuple[torch.Tensor, torch.Tensor]]


class RMSNorm(nn.Module):
    """RMS normalisation as one fused kernel.

    transformers normalises in float32, rounds to the activation dtype, then scales by the weight; the fused
    kernel accumulates in float32 too but rounds once, after the scaling. In float32 the two agree to
    rounding; in bfloat16 they differ by at most one rounding step, inside the documented bf16 tolerance, and
    the fused form saves three elementwise passes per norm, which is measurable in batch-1 decode.
    """

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


class Attention(nn.Module):
    def __init__(self, config: ModelArchConfig) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.q_size = config.q_size
        self.kv_size = config.kv_size
        self.scale = self.head_dim**-0.5
        self.qkv_proj = nn.Linear(
            config.hidden_size, self.q_size + 2 * self.kv_size, bias=config.attention_bias
        )
        self.o_proj = nn.Linear(self.q_size, config.hidden_size, bias=False)
        if config.qk_norm:
            self.q_norm: RMSNorm | None = RMSNorm(self.head_dim, config.rms_norm_eps)
            self.k_norm: RMSNorm | None = RMSNorm(self.head_dim, config.rms_norm_eps)
        else:
            self.q_norm = self.k_norm = None

    def forward(
        self,
        hidden: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        kv_cache: tuple[torch.Tensor, torch.Tensor],
        metadata: AttentionMetadata,
    ) -> torch.Tensor:
        num_tokens = hidden.shape[0]
        qkv = self.qkv_proj(hidden)
        v = qkv[:, self.q_size + self.kv_size :].view(num_tokens, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = qkv[:, : self.q_size], qkv[:, self.q_size : self.q_size + self.kv_size]
            q = apply_rotary(self.q_norm(q.view(num_tokens, self.num_heads, self.head_dim)), cos, sin)
            k = apply_rotary(self.k_norm(k.view(num_tokens, self.num_kv_heads, self.head_dim)), cos, sin)
        else:
            # q and k heads sit side by side in qkv: rotate them in one pass.
            qk = qkv[:, : self.q_size + self.kv_size].view(
                num_tokens, self.num_heads + self.num_kv_heads, self.head_dim
            )
            q, k = apply_rotary(qk, cos, sin).split([self.num_heads, self.num_kv_heads], dim=1)
        k_cache, v_cache = kv_cache
        write_kv(k, v, k_cache, v_cache, metadata.slot_mapping)
        out = paged_attention(q, k, v, k_cache, v_cache, metadata, self.scale)
        return self.o_proj(out.view(num_tokens, self.q_size))


class MLP(nn.Module):
    def __init__(self, config: ModelArchConfig) -> None:
        super().__init__()
        self.intermediate_size = config.intermediate_size
        self.gate_up_proj = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).split(self.intermediate_size, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelArchConfig) -> None:
        super().__init__()
        self.self_attn = Attention(config)
        self.mlp = MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(
        self,
        hidden: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        kv_cache: tuple[torch.Tensor, torch.Tensor],
        metadata: AttentionMetadata,
    ) -> torch.Tensor:
        hidden = hidden + self.self_attn(self.input_layernorm(hidden), cos, sin, kv_cache, metadata)
        return hidden + self.mlp(self.post_attention_layernorm(hidden))


class LlamaBackbone(nn.Module):
    def __init__(self, config: ModelArchConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class LlamaForCausalLM(nn.Module):
    """The causal LM: `forward` gives final hidden states, `compute_logits` projects only the rows asked for."""

    def __init__(self, config: ModelArchConfig, max_positions: int | None = None) -> None:
        super().__init__()
        self.config = config
        self.model = LlamaBackbone(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.rotary = RotaryEmbedding(
            config.rope,
            config.head_dim,
            max_positions or config.max_position_embeddings,
            config.max_position_embeddings,
        )

    @torch.inference_mode()
    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_caches: KVCaches,
        metadata: AttentionMetadata,
    ) -> torch.Tensor:
        """input_ids and positions: [T]; returns final normalised hidden states [T, hidden]."""
        hidden = self.model.embed_tokens(input_ids)
        cos, sin = self.rotary.cos_sin(positions, hidden.dtype)
        for layer, kv_cache in zip(self.model.layers, kv_caches, strict=True):
            hidden = layer(hidden, cos, sin, kv_cache, metadata)
        return self.model.norm(hidden)

    @torch.inference_mode()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[N, hidden] -> float32 logits [N, vocab]."""
        return self.lm_head(hidden).float()

    def checkpoint_names(self) -> Iterator[tuple[str, str, int | None]]:
        """(checkpoint name, parameter name, shard index) for every tensor the checkpoint must provide.

        The shard index places a checkpoint tensor inside a fused parameter (q=0, k=1, v=2; gate=0, up=1).
        """
        for name, _ in self.named_parameters():
            if ".qkv_proj." in name:
                for index, part in enumerate(("q_proj", "k_proj", "v_proj")):
                    yield name.replace("qkv_proj", part), name, index
            elif ".gate_up_proj." in name:
                for index, part in enumerate(("gate_proj", "up_proj")):
                    yield name.replace("gate_up_proj", part), name, index
            elif name == "lm_head.weight" and self.config.tie_word_embeddings:
                continue
            else:
                yield name, name, None
