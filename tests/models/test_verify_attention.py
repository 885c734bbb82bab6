"""Verification chunks attended together (`attention.VerifyBatch`) give what each chunk attended alone does."""

from __future__ import annotations

import pytest
import torch

from switchyard.models.attention import AttentionMetadata, paged_attention

BLOCK = 4
HEADS, KV_HEADS, HEAD_DIM = 4, 2, 8


@pytest.mark.parametrize("window", [None, 6])
@pytest.mark.parametrize("chunk_lens", [(5, 5, 5), (5, 2, 4), (1, 3)])
def test_batched_verification_equals_chunk_by_chunk(chunk_lens: tuple[int, ...], window: int | None) -> None:
    """Chunks of different lengths (padded to the longest) over contexts of different lengths, with and
    without a sliding window, behind a decode row: each row's output equals the chunk-by-chunk path's."""
    torch.manual_seed(0)
    num_blocks = 40
    k_cache = torch.randn(num_blocks, BLOCK, KV_HEADS, HEAD_DIM)
    v_cache = torch.randn(num_blocks, BLOCK, KV_HEADS, HEAD_DIM)
    contexts = [13 + 4 * i + n for i, n in enumerate(chunk_lens)]
    tables = [list(range(10 * i + 1, 10 * i + 1 + -(-c // BLOCK))) for i, c in enumerate(contexts)]
    decode_table, decode_len = [0, 9], 7
    spans, start = [], 1
    for n, context, table in zip(chunk_lens, contexts, tables, strict=True):
        spans.append((start, start + n, context, table))
        start += n
    query = torch.randn(start, HEADS, HEAD_DIM)
    common = dict(
        slot_mapping=torch.zeros(start, dtype=torch.long),
        block_size=BLOCK,
        decode_block_tables=[decode_table],
        decode_context_lens=[decode_len],
        device=torch.device("cpu"),
        sliding_window=window,
    )
    alone = AttentionMetadata.build(prefill_spans=spans, **common)  # type: ignore[arg-type]
    together = AttentionMetadata.build(prefill_spans=[], verify_spans=spans, **common)  # type: ignore[arg-type]
    assert together.verify is not None and together.verify.padded == (len(set(chunk_lens)) > 1)
    expected = paged_attention(query, query, query, k_cache, v_cache, alone, HEAD_DIM**-0.5)
    got = paged_attention(query, query, query, k_cache, v_cache, together, HEAD_DIM**-0.5)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
