"""The Triton paged attention kernel against the SDPA path, on CPU tensors under Triton's interpreter.

Without CUDA the kernel runs in the interpreter (numpy); with CUDA these are skipped and the same cases run
compiled in `test_triton_attention_cuda.py`.
"""

from __future__ import annotations

import os

import pytest
import torch

if torch.cuda.is_available():
    pytest.skip("CUDA present: the compiled kernel is tested instead", allow_module_level=True)
pytest.importorskip("triton")
if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("Triton's interpreter is off (conftest turns it on without CUDA)", allow_module_level=True)

from paged_attention_cases import make_case, reference

from switchyard.models.triton_attention import triton_paged_attention

TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 2e-2}

MIXED = [(1, 37), (1, 5), (1, 16), (3, 40), (20, 20), (9, 30)]
"""Decodes of ragged lengths, a verification-sized chunk, a whole prompt and a chunked-prefill tail."""


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("heads", "kv_heads"), [(2, 2), (4, 2), (8, 2)])
def test_mixed_step_matches_sdpa(dtype: torch.dtype, heads: int, kv_heads: int) -> None:
    """Decodes, a short chunk and prefills in one launch, GQA ratios 1, 2 and 4, blocks out of order."""
    case = make_case(MIXED, heads=heads, kv_heads=kv_heads, dtype=dtype, seed=heads)
    got = triton_paged_attention(case.query, case.k_cache, case.v_cache, case.plan, case.scale)
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(got.float(), reference(case), rtol=tol, atol=tol)


@pytest.mark.parametrize("window", [4, 19])
def test_sliding_window_matches_sdpa(window: int) -> None:
    """Windows shorter than a block and spanning blocks, over decodes and chunked prefills."""
    case = make_case(MIXED, heads=4, kv_heads=2, window=window, seed=window)
    got = triton_paged_attention(case.query, case.k_cache, case.v_cache, case.plan, case.scale)
    torch.testing.assert_close(got, reference(case), rtol=1e-4, atol=1e-4)


def test_decode_only_small_blocks_and_odd_head_dim() -> None:
    """A pure decode step (one row per tile), cache blocks of 4 tokens and a head size not a power of two."""
    case = make_case([(1, 3), (1, 21), (1, 9)], heads=4, kv_heads=1, head_dim=24, block_size=4, seed=3)
    assert case.plan.tile_tokens == 1 and case.plan.num_tiles == 3
    got = triton_paged_attention(case.query, case.k_cache, case.v_cache, case.plan, case.scale)
    torch.testing.assert_close(got, reference(case), rtol=1e-4, atol=1e-4)


def test_long_prefill_spans_several_tiles() -> None:
    """A prefill longer than one tile (128 rows / group) over a cached prefix: tiles split the chunk."""
    case = make_case([(70, 90)], heads=4, kv_heads=1, seed=5)
    assert case.plan.num_tiles == 3
    got = triton_paged_attention(case.query, case.k_cache, case.v_cache, case.plan, case.scale)
    torch.testing.assert_close(got, reference(case), rtol=1e-4, atol=1e-4)


def test_rejects_a_cache_of_another_dtype() -> None:
    case = make_case([(1, 4)], heads=2, kv_heads=2)
    with pytest.raises(ValueError, match="dtype"):
        triton_paged_attention(case.query, case.k_cache.to(torch.bfloat16), case.v_cache, case.plan, 1.0)
