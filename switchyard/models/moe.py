"""The mixture-of-experts feed-forward of Mixtral, Qwen2-MoE and Qwen3-MoE.

A softmax router picks `top_k` experts per token. The experts' weights are stacked at load into two
[experts, out, in] tensors, so one step's (token, expert) pairs are sorted by expert and each expert multiplies
one contiguous slice of rows: a single grouped matrix product on the CPU where the layout allows, else one
product per expert that received tokens (`_grouped_mm_fits`). Nothing loops over tokens in Python.

Tensor parallelism splits each expert's inner width over the ranks (tensor_parallel.py). Expert parallelism
(whole experts spread over devices, tokens exchanged all-to-all) would replace `_run_experts`: the sort by
expert already gives each device its contiguous slice; it is not implemented.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from switchyard.models.config import ModelArchConfig, MoEConfig


class DenseMLP(nn.Module):
    """SwiGLU feed-forward with gate and up fused into one product (`gate_up_proj`)."""

    def __init__(self, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.intermediate_size = intermediate_size
        self.gate_up_proj = nn.Linear(hidden_size, 2 * intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).split(self.intermediate_size, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class SparseMoeBlock(nn.Module):
    """Router + stacked experts (+ Qwen2-MoE's gated shared expert) for one decoder layer."""

    def __init__(self, config: ModelArchConfig) -> None:
        super().__init__()
        moe = config.moe
        if moe is None:
            raise ValueError("SparseMoeBlock needs a config with an expert mixture")
        self.moe: MoEConfig = moe
        hidden, inner = config.hidden_size, moe.expert_intermediate_size
        self.gate = nn.Linear(hidden, moe.num_experts, bias=False)
        self.experts_gate_up: nn.Parameter | None = nn.Parameter(
            torch.empty(moe.num_experts, 2 * inner, hidden)
        )
        self.experts_down: nn.Parameter | None = nn.Parameter(torch.empty(moe.num_experts, hidden, inner))
        # Set by `use_quantized_experts`: (rows sorted by expert, each expert's end row) -> their outputs.
        self.quantized_experts: nn.Module | None = None
        if moe.has_shared_expert:
            self.shared_expert: DenseMLP | None = DenseMLP(hidden, moe.shared_expert_intermediate_size)
            self.shared_expert_gate: nn.Linear | None = nn.Linear(hidden, 1, bias=False)
        else:
            self.shared_expert = self.shared_expert_gate = None
        # Tokens routed to each expert since load, summed on the device and read only when metrics are
        # scraped, so the hot path never waits on a device-to-host copy for them.
        self.register_buffer(
            "routed_tokens", torch.zeros(moe.num_experts, dtype=torch.long), persistent=False
        )

    def reset_routed_tokens(self, device: torch.device) -> None:
        """Start the per-expert counters from zero on `device` (the loader builds the module on meta)."""
        self.routed_tokens = torch.zeros(self.moe.num_experts, dtype=torch.long, device=device)

    def use_quantized_experts(self, experts: nn.Module) -> None:
        """Run the experts through `experts` (a `QuantizedExperts`) and drop the stacked float weights."""
        self.quantized_experts = experts
        self.experts_gate_up = self.experts_down = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [tokens, hidden] -> [tokens, hidden]. Mutates `routed_tokens` (a counter, not an input)."""
        weights, experts = self.route(x)
        out = self._run_experts(x, experts, weights)
        if self.shared_expert is not None and self.shared_expert_gate is not None:
            out = out + torch.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)
        return out

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-k routing weights (in x's dtype) and expert ids, each [tokens, top_k]; softmax in float32."""
        probs = torch.softmax(self.gate(x), dim=-1, dtype=torch.float32)
        weights, experts = torch.topk(probs, self.moe.top_k, dim=-1)
        if self.moe.normalize_topk:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights.to(x.dtype), experts

    def _run_experts(self, x: torch.Tensor, experts: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        top_k = experts.shape[1]
        flat_experts = experts.reshape(-1)
        # Stable sort keeps each expert's rows in token order; the weighted outputs are summed back per token
        # in expert order, the order transformers sums them in.
        order = torch.argsort(flat_experts, stable=True)
        counts = torch.bincount(flat_experts, minlength=self.moe.num_experts)
        self.routed_tokens += counts
        token_rows = order // top_k
        rows = x.index_select(0, token_rows)
        ends = counts.cumsum(0)
        if self.quantized_experts is not None:
            out = self.quantized_experts(rows, ends.tolist())
        elif self.experts_gate_up is None or self.experts_down is None:
            raise RuntimeError("the experts' weights were dropped without quantized experts in their place")
        elif _grouped_mm_fits(rows, self.experts_gate_up, self.experts_down):
            offsets = ends.to(torch.int32)
            gate_up = F.grouped_mm(rows, self.experts_gate_up.transpose(1, 2), offs=offsets)
            gate, up = gate_up.chunk(2, dim=-1)
            out = F.grouped_mm(F.silu(gate) * up, self.experts_down.transpose(1, 2), offs=offsets)
        else:
            out = torch.empty_like(rows)
            start = 0
            for expert, end in enumerate(ends.tolist()):
                if end > start:
                    gate, up = F.linear(rows[start:end], self.experts_gate_up[expert]).chunk(2, dim=-1)
                    out[start:end] = F.linear(F.silu(gate) * up, self.experts_down[expert])
                start = end
        out = out * weights.reshape(-1).index_select(0, order)[:, None]
        return torch.zeros_like(x).index_add_(0, token_rows, out)


def _grouped_mm_fits(rows: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor) -> bool:
    """Whether `F.grouped_mm` takes these operands: on the CPU, with strides of 16-byte multiples. Its CUDA
    kernels need particular GPU generations and dtypes and have not been measured here, so CUDA takes the
    per-expert loop, which computes the same products."""
    if not hasattr(F, "grouped_mm") or rows.device.type != "cpu":
        return False
    elements = 16 // rows.element_size()
    return all(dim % elements == 0 for dim in (rows.shape[1], gate_up.shape[1], down.shape[1]))
