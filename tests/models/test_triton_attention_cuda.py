"""The Triton paged attention kernel compiled on CUDA against the SDPA path: the interpreter tests' cases, and
serving shapes (head size 128, blocks of 16, contexts in the thousands). gpu-marked."""

from __future__ import annotations

import pytest
import torch
from paged_attention_cases import make_case, reference

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]
TOLERANCE = {torch.float32: 2e-4, torch.bfloat16: 2e-2}
MIXED = [(1, 37), (1, 5), (1, 16), (3, 40), (20, 20), (9, 30)]
SERVING = [(1, 1500), (1, 7), (1, 2049), (4, 900), (300, 300), (500, 2000)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("heads", "kv_heads"), [(2, 2), (4, 2), (8, 2)])
@pytest.mark.parametrize("window", [None, 19])
def test_small_cases(dtype: torch.dtype, heads: int, kv_heads: int, window: int | None) -> None:
    from switchyard.models.triton_attention import triton_paged_attention

    case = make_case(MIXED, heads=heads, kv_heads=kv_heads, dtype=dtype, device="cuda", window=window)
    got = triton_paged_attention(case.query, case.k_cache, case.v_cache, case.plan, case.scale)
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(got.float(), reference(case), rtol=tol, atol=tol)


@pytest.mark.parametrize(("heads", "kv_heads"), [(32, 8), (14, 2), (16, 16)])
@pytest.mark.parametrize("window", [None, 1024])
def test_serving_shapes_bf16(heads: int, kv_heads: int, window: int | None) -> None:
    from switchyard.models.triton_attention import triton_paged_attention

    case = make_case(
        SERVING,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=128,
        dtype=torch.bfloat16,
        device="cuda",
        window=window,
    )
    got = triton_paged_attention(case.query, case.k_cache, case.v_cache, case.plan, case.scale)
    torch.testing.assert_close(got.float(), reference(case), rtol=2e-2, atol=2e-2)
