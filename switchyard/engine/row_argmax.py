"""Row-wise argmax over a vocabulary, fast on CPU.

PyTorch's CPU `argmax` along the last dimension runs a scalar loop: over a [64, 151936] float32 batch of logits
it takes ~13 ms, a tenth of a whole decode step of a 0.5B model, while the vectorised `amax` over the same
bytes takes under 1 ms. `row_argmax` finds the maximum of each 128-wide block with `amax`, picks the best
block per row, and runs the scalar `argmax` only inside that block. The result is exactly `argmax`'s, ties
(first index) and NaN (counted as the maximum, first one wins) included.
"""

from __future__ import annotations

import torch

BLOCK = 128
MIN_WIDTH = 8 * BLOCK
"""Below this width the plain argmax is as fast."""


def row_argmax(x: torch.Tensor) -> torch.Tensor:
    """Index of the first maximum of each row of a 2-D tensor (long [N]); same result as `x.argmax(dim=1)`."""
    if x.device.type != "cpu" or x.dim() != 2 or x.shape[1] < MIN_WIDTH or x.stride(1) != 1:
        return x.argmax(dim=1)
    rows, width = x.shape
    full = width - width % BLOCK
    blocks = x[:, :full].unflatten(1, (full // BLOCK, BLOCK))
    best_block = blocks.amax(dim=2).argmax(dim=1)
    row_index = torch.arange(rows, device=x.device)
    chosen = blocks[row_index, best_block]
    ids = best_block * BLOCK + chosen.argmax(dim=1)
    if full == width:
        return ids
    best = x[row_index, ids]
    tail_max, tail_ids = x[:, full:].max(dim=1)
    # The tail comes last, so it wins only when strictly larger, or NaN where the rest has none.
    tail_wins = (tail_max > best) | (tail_max.isnan() & ~best.isnan())
    return torch.where(tail_wins, full + tail_ids, ids)
