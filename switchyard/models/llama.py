"""One implementation of the Llama family: Llama, Qwen2 (q/k/v bias), Qwen3 (q/k RMSNorm), Mistral, and their
mixture-of-experts siblings Mixtral, Qwen2-MoE and Qwen3-MoE (the feed-forward is `moe.SparseMoeBlock`).

Parameter names follow the Hugging Face checkpoints except the fusions made at load time for fewer, larger
matrix products: q/k/v projections into `qkv_proj`, gate/up into `gate_up_proj`, and every expert's
gate/up and down into the stacked `experts_gate_up` and `experts_down`. The forward pass takes a
flat batch of tokens with explicit positions and attention metadata; it knows nothing of sequences.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from switchyard.models.attention import AttentionMetadata, paged_attention, write_kv
from switchyard.models.config import ModelArchConfig, MoEConfig
from switchyard.models.cpu_kernels import skinny_matmul
from switchyard.models.cpu_kernels.native_library import native_kernels
from switchyard.models.cpu_kernels.skinny_matmul import NATIVE_DTYPES
from switchyard.models.moe import DenseMLP, SparseMoeBlock
from switchyard.models.native_decode import NativeDecoder
from switchyard.models.rope import RotaryEmbedding, apply_rotary

KVCaches = list[tuple[torch.Tensor, torch.Tensor]]
ShardIndex = int | tuple[int, int] | None
"""Where a checkpoint tensor goes in a fused parameter: see `LlamaForCausalLM.checkpoint_names`."""


NATIVE_NORM_MAX_ELEMENTS = 1 << 16
"""Up to this many elements (decode's few rows) the norm is one native call; PyTorch's kernel, which F.rms_norm
runs as thirteen operators on CPU, costs more in dispatch than in arithmetic there (20-30 us against ~5)."""


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
        if x.device.type == "cpu" and x.numel() <= NATIVE_NORM_MAX_ELEMENTS and x.is_contiguous():
            kernels = native_kernels()
            if kernels is not None and x.dtype in NATIVE_DTYPES and self.weight.dtype in NATIVE_DTYPES:
                size = x.shape[-1]
                return skinny_matmul.rms_norm(kernels, x.view(-1, size), self.weight, self.eps).view(x.shape)
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


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelArchConfig, index: int) -> None:
        super().__init__()
        self.self_attn = Attention(config)
        sparse = config.moe is not None and index in config.moe.sparse_layers
        self.mlp: nn.Module = (
            SparseMoeBlock(config) if sparse else DenseMLP(config.hidden_size, config.intermediate_size)
        )
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
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_hidden_layers))
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
        self.native_decode = True
        """Whether CPU decode steps may run every layer in one native call (native_decode.py); False keeps
        the operator-by-operator path (for comparisons)."""
        self._native_decoder: NativeDecoder | None = None
        self._native_decoder_checked = False
        """The decoder is made at the first forward on the CPU (after load-time quantization and packing);
        it stays None where the model does not qualify."""

    @torch.inference_mode()
    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_caches: KVCaches,
        metadata: AttentionMetadata | list[AttentionMetadata],
    ) -> torch.Tensor:
        """input_ids and positions: [T]; returns final normalised hidden states [T, hidden].

        `metadata` is one for every layer, or a list with one per layer where layers' windows differ
        (`attention.metadata_per_layer`)."""
        hidden = self.model.embed_tokens(input_ids)
        cos, sin = self.rotary.cos_sin(positions, hidden.dtype)
        decoder = self._decoder() if self.native_decode and hidden.device.type == "cpu" else None
        if decoder is not None and decoder.accepts(hidden, kv_caches, metadata):
            assert isinstance(metadata, AttentionMetadata)
            if decoder.run(hidden, cos, sin, metadata):
                return self.model.norm(hidden)
            hidden = self.model.embed_tokens(input_ids)  # declined: the operators redo it from the start
        per_layer = metadata if isinstance(metadata, list) else [metadata] * len(self.model.layers)
        for layer, kv_cache, layer_metadata in zip(self.model.layers, kv_caches, per_layer, strict=True):
            hidden = layer(hidden, cos, sin, kv_cache, layer_metadata)
        return self.model.norm(hidden)

    def _decoder(self) -> NativeDecoder | None:
        if not self._native_decoder_checked:
            self._native_decoder = NativeDecoder.for_model(self)
            self._native_decoder_checked = True
        return self._native_decoder

    @torch.inference_mode()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[N, hidden] -> float32 logits [N, vocab]."""
        return self.lm_head(hidden).float()

    def routed_tokens(self) -> torch.Tensor | None:
        """[sparse layers, experts] tokens the routers sent to each expert since load, on the CPU; None for a
        dense model. Reading it waits for the device, so it is meant for metrics scrapes, not every step."""
        counters = [m.routed_tokens for m in self.modules() if isinstance(m, SparseMoeBlock)]
        return torch.stack(counters).cpu() if counters else None

    def reset_routed_tokens(self) -> None:
        """Zero the routers' counters (after the builder's profiling pass, whose tokens are not traffic)."""
        for module in self.modules():
            if isinstance(module, SparseMoeBlock):
                module.routed_tokens.zero_()

    def checkpoint_names(self) -> Iterator[tuple[str, str, ShardIndex]]:
        """(checkpoint name, parameter name, shard index) for every tensor the checkpoint must provide.

        The shard index places a checkpoint tensor inside a fused parameter (q=0, k=1, v=2; gate=0, up=1); for
        the stacked expert weights it is (expert, part): part 0 or 1 of gate/up, 0 for down.
        """
        moe = self.config.moe
        for name, _ in self.named_parameters():
            if moe is not None and ".mlp." in name and (".experts_" in name or ".mlp.gate." in name):
                yield from _expert_checkpoint_names(name, moe)
            elif ".qkv_proj." in name:
                for index, part in enumerate(("q_proj", "k_proj", "v_proj")):
                    yield name.replace("qkv_proj", part), name, index
            elif ".gate_up_proj." in name:
                for index, part in enumerate(("gate_proj", "up_proj")):
                    yield name.replace("gate_up_proj", part), name, index
            elif name == "lm_head.weight" and self.config.tie_word_embeddings:
                continue
            else:
                yield name, name, None


def _expert_checkpoint_names(name: str, moe: MoEConfig) -> Iterator[tuple[str, str, ShardIndex]]:
    """Checkpoint names of a router or a stacked expert parameter, per expert, in each family's naming."""
    layer = name[: name.index(".mlp.")]
    block = f"{layer}.block_sparse_moe" if moe.checkpoint_style == "mixtral" else f"{layer}.mlp"
    parts = ("w1", "w3", "w2") if moe.checkpoint_style == "mixtral" else ("gate_proj", "up_proj", "down_proj")
    if name.endswith(".mlp.gate.weight"):
        yield f"{block}.gate.weight", name, None
        return
    for expert in range(moe.num_experts):
        prefix = f"{block}.experts.{expert}"
        if name.endswith(".experts_gate_up"):
            yield f"{prefix}.{parts[0]}.weight", name, (expert, 0)
            yield f"{prefix}.{parts[1]}.weight", name, (expert, 1)
        else:
            yield f"{prefix}.{parts[2]}.weight", name, (expert, 0)
