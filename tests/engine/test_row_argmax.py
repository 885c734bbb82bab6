"""row_argmax must give exactly torch.argmax's answer: first maximum, NaN counted as the maximum."""

from __future__ import annotations

import pytest
import torch

from switchyard.engine.row_argmax import row_argmax


@pytest.mark.parametrize("width", [151936, 32003, 8192, 1100, 600, 7])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matches_torch_argmax_with_ties_nan_and_infinities(width: int, dtype: torch.dtype) -> None:
    generator = torch.Generator().manual_seed(width)
    x = torch.randn(12, width, generator=generator).to(dtype)
    last = width - 1
    x[0, last] = 50.0  # the maximum in the tail past the last full block
    x[1, 3], x[1, last] = 50.0, 50.0  # a tie: the first one wins
    x[2, :] = float("-inf")
    x[3, last] = float("nan")  # NaN only in the tail
    x[4, 1], x[4, last] = float("nan"), float("nan")
    x[5, 2], x[5, last] = float("inf"), float("inf")
    x[6, min(5, last)] = 1e4
    x[7, width // 2] = 50.0
    x[8, :] = 0.0  # all equal: index 0
    assert torch.equal(row_argmax(x), x.argmax(dim=1))


def test_non_contiguous_rows_fall_back_and_still_agree() -> None:
    x = torch.randn(2000, 6, generator=torch.Generator().manual_seed(0)).t()
    assert torch.equal(row_argmax(x), x.argmax(dim=1))
    sliced = torch.randn(4, 5000, generator=torch.Generator().manual_seed(1))[:, 100:4900]
    assert torch.equal(row_argmax(sliced), sliced.argmax(dim=1))
