"""Paged attention in one Triton kernel: decodes, verification chunks and (chunked) prefills of a step, reading
keys and values through each sequence's block table in place.

The SDPA path (`models.attention`) gathers every sequence's blocks into a contiguous copy before attending;
on a GPU that copy costs as much memory traffic as the attention itself. Here each program takes one tile of
`PagedKernelPlan` (query rows of one segment x the query heads of one KV head), walks the key blocks it may
see (causal, and within the sliding window when the model has one) and keeps an online softmax, so keys are
read once per tile and nothing is materialised.

Needs Triton (the `gpu` extra). Runs on CUDA tensors, and on CPU tensors under Triton's interpreter
(`TRITON_INTERPRET=1`), which is how the tests check it against SDPA on a machine without a GPU.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from switchyard.models.paged_kernel_plan import PagedKernelPlan

MIN_DOT = 16
"""tl.dot wants each dimension >= 16: tiles and key chunks are padded up to it."""
KEY_CHUNK = 64
"""Keys per inner-loop step (several cache blocks), so each step's matrix multiplies are of useful size."""


@triton.jit
def _paged_attention_kernel(
    Q,
    K,
    V,
    Out,
    block_tables,
    tile_seg,
    tile_q0,
    seg_q_start,
    seg_q_len,
    seg_context_len,
    scale,
    window,
    stride_qt,
    stride_qh,
    stride_ot,
    stride_oh,
    stride_kb,
    stride_ks,
    stride_kh,
    stride_vb,
    stride_vs,
    stride_vh,
    stride_bt,
    GROUP: tl.constexpr,
    TILE_TOKENS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    DOT_FP32: tl.constexpr,
    PRECISION: tl.constexpr,
):
    tile = tl.program_id(0)
    kv_head = tl.program_id(1)
    seg = tl.load(tile_seg + tile)
    q0 = tl.load(tile_q0 + tile)
    q_start = tl.load(seg_q_start + seg)
    q_len = tl.load(seg_q_len + seg)
    context = tl.load(seg_context_len + seg)

    # Row r of the tile: query token q0 + r // GROUP, query head kv_head * GROUP + r % GROUP.
    rows = tl.arange(0, BLOCK_M)
    token = q0 + rows // GROUP
    head = kv_head * GROUP + rows % GROUP
    row_ok = (rows < TILE_TOKENS * GROUP) & (token < q_len)
    q_pos = context - q_len + token
    dims = tl.arange(0, BLOCK_D)
    dim_ok = dims < HEAD_DIM
    q = tl.load(
        Q + (q_start + token).to(tl.int64)[:, None] * stride_qt + head[:, None] * stride_qh + dims[None, :],
        mask=row_ok[:, None] & dim_ok[None, :],
        other=0.0,
    )
    if DOT_FP32:
        q = q.to(tl.float32)

    # Keys [lo, hi): up to the tile's last query position, from the window start of its first.
    last_token = tl.minimum(q0 + TILE_TOKENS, q_len) - 1
    hi = context - q_len + last_token + 1
    lo = 0
    if HAS_WINDOW:
        lo = tl.maximum(0, context - q_len + q0 - window + 1)
    lo = (lo // BLOCK_N) * BLOCK_N

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.full([BLOCK_M], 0.0, dtype=tl.float32)
    acc = tl.full([BLOCK_M, BLOCK_D], 0.0, dtype=tl.float32)
    offs_n = tl.arange(0, BLOCK_N)
    for key0 in range(lo, hi, BLOCK_N):
        k_pos = key0 + offs_n
        key_ok = k_pos < hi
        blocks = tl.load(block_tables + seg * stride_bt + k_pos // BLOCK_SIZE, mask=key_ok, other=0).to(
            tl.int64
        )
        within = k_pos % BLOCK_SIZE
        load_ok = key_ok[:, None] & dim_ok[None, :]
        k = tl.load(
            K
            + blocks[:, None] * stride_kb
            + within[:, None] * stride_ks
            + kv_head * stride_kh
            + dims[None, :],
            mask=load_ok,
            other=0.0,
        )
        v = tl.load(
            V
            + blocks[:, None] * stride_vb
            + within[:, None] * stride_vs
            + kv_head * stride_vh
            + dims[None, :],
            mask=load_ok,
            other=0.0,
        )
        if DOT_FP32:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        scores = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
        visible = row_ok[:, None] & key_ok[None, :] & (k_pos[None, :] <= q_pos[:, None])
        if HAS_WINDOW:
            visible = visible & (k_pos[None, :] > q_pos[:, None] - window)
        scores = tl.where(visible, scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, 1))
        # A row that has seen no visible key yet keeps max -inf: shift by 0 so exp gives 0, not NaN.
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp(scores - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_new

    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
    tl.store(
        Out + (q_start + token).to(tl.int64)[:, None] * stride_ot + head[:, None] * stride_oh + dims[None, :],
        out.to(Out.dtype.element_ty),
        mask=row_ok[:, None] & dim_ok[None, :],
    )


def triton_paged_attention(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    plan: PagedKernelPlan,
    scale: float,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """query [T, heads, head_dim] over the paged caches [blocks, block_size, kv_heads, head_dim] -> [T, heads,
    head_dim]. This step's keys and values must already be written (`attention.write_kv`). Rows of no segment
    (padding) are left as they are in `out`."""
    if k_cache.dtype != query.dtype or v_cache.dtype != query.dtype:
        raise ValueError("the Triton attention path reads caches stored in the query's dtype")
    num_tokens, num_heads, head_dim = query.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    group = num_heads // num_kv_heads
    query = query if query.stride(-1) == 1 else query.contiguous()
    if out is None:
        out = torch.empty_like(query)
    if plan.num_tiles == 0 or num_tokens == 0:
        return out
    block_m = max(MIN_DOT, triton.next_power_of_2(plan.tile_tokens * group))
    window = plan.sliding_window
    _paged_attention_kernel[(plan.num_tiles, num_kv_heads)](
        query,
        k_cache,
        v_cache,
        out,
        plan.block_tables,
        plan.tile_seg,
        plan.tile_q0,
        plan.seg_q_start,
        plan.seg_q_len,
        plan.seg_context_len,
        scale,
        window or 0,
        query.stride(0),
        query.stride(1),
        out.stride(0),
        out.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        v_cache.stride(0),
        v_cache.stride(1),
        v_cache.stride(2),
        plan.block_tables.stride(0),
        GROUP=group,
        TILE_TOKENS=plan.tile_tokens,
        BLOCK_M=block_m,
        HEAD_DIM=head_dim,
        BLOCK_D=max(MIN_DOT, triton.next_power_of_2(head_dim)),
        BLOCK_SIZE=block_size,
        BLOCK_N=max(KEY_CHUNK, block_size),
        HAS_WINDOW=window is not None,
        # Triton's interpreter multiplies bf16 matrices wrongly (it holds them as raw 16-bit integers): there,
        # and only there, widen to float32 before tl.dot. On a GPU the tensor cores take bf16 directly.
        DOT_FP32=_interpreted() and query.dtype == torch.bfloat16,
        # float32 models get exact float32 products, as SDPA gives them, not TensorFloat-32's 10-bit mantissas.
        PRECISION="ieee" if query.dtype == torch.float32 else "tf32",
        # A prefill tile's accumulator (128 rows x head size, float32) wants the registers of 8 warps.
        num_warps=8 if block_m >= 128 else 4,
    )
    return out


def _interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"
