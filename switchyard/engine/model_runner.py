"""Turns a scheduled step into one forward pass: flat inputs, attention metadata, KV copies, logits.

Inputs are laid out decodes first (sequences computing exactly one token), then speculative verification
chunks, then prefill chunks, matching what `models.attention` expects. Only the rows that are sampled (and
prompt-logprob rows, when asked) go through the LM head, which on large vocabularies is a big share of a step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from switchyard.engine.cuda_graphs import DecodeGraphs
from switchyard.engine.sequence import Sequence
from switchyard.models.attention import AttentionMetadata, metadata_per_layer
from switchyard.models.kv_cache_dtype import copyable
from switchyard.models.llama import KVCaches, LlamaForCausalLM
from switchyard.models.paged_kernel_plan import to_device


@dataclass
class ForwardResult:
    """Logits of one step: row i of `logits` is the next-token distribution of `sampled_seqs[i]`."""

    sampled_seqs: list[Sequence]
    logits: torch.Tensor
    """float32 [len(sampled_seqs), vocab]: the distribution of each finishing sequence's next token."""
    prompt_logits: dict[int, tuple[int, torch.Tensor]]
    """seq_id -> (first position, float32 logits [chunk, vocab]) for sequences whose request wants prompt
    logprobs; row j predicts the token at position first + j + 1."""
    verify_logits: dict[int, torch.Tensor] = field(default_factory=dict)
    """seq_id -> logits [chunk, vocab] at every position of a speculative chunk (the last real token and the
    drafts); such sequences are not in sampled_seqs."""
    sampled_hidden: torch.Tensor | None = None
    """[len(sampled_seqs), hidden]: the final normalised hidden states the logits rows came from (what a
    speculator reads)."""
    verify_hidden: dict[int, torch.Tensor] = field(default_factory=dict)
    """seq_id -> [chunk, hidden] at the positions of verify_logits."""


@dataclass
class StepInputs:
    """One step's model inputs, built by ModelRunner.prepare."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    metadata: AttentionMetadata | list[AttentionMetadata]
    """One for every layer, or one per layer where their windows differ."""
    sample_index: torch.Tensor
    """Rows of the flat batch whose logits are sampled, in the order of sampled_seqs."""
    sampled_seqs: list[Sequence]
    prompt_rows: list[tuple[Sequence, int, int, int]]
    """(sequence, start row, first position, row count) of chunks whose prompt logprobs are wanted."""
    verify_rows: list[tuple[Sequence, int, int]] = field(default_factory=list)
    """(sequence, start row, row count) of speculative chunks, which need logits at every position."""


class ModelRunner:
    def __init__(
        self,
        model: LlamaForCausalLM,
        num_blocks: int,
        block_size: int,
        dtype: torch.dtype,
        device: torch.device,
        kv_dtype: torch.dtype | None = None,
        *,
        attention_backend: str = "sdpa",
        decode_graph_sizes: tuple[int, ...] = (),
    ) -> None:
        """`kv_dtype`: the cache's storage dtype (`models.kv_cache_dtype`); None stores in `dtype`.
        `attention_backend`: "sdpa" or "triton", as `models.attention_backend` resolved it.
        `decode_graph_sizes`: padded decode batch sizes to capture as CUDA graphs (`capture_decode_graphs`);
        empty runs eagerly. Graphs need the Triton backend (its launch reads everything from device tensors)."""
        if decode_graph_sizes and attention_backend != "triton":
            raise ValueError("CUDA graphs need the triton attention backend")
        self.model = model
        self.block_size = block_size
        self.device = device
        config = model.config
        self.sliding_window = config.sliding_window
        self.kernel_group = (
            config.num_attention_heads // config.num_key_value_heads
            if attention_backend == "triton"
            else None
        )
        self.num_blocks = num_blocks
        self.decode_graph_sizes = decode_graph_sizes
        self.graphs: DecodeGraphs | None = None
        self.layer_windows = config.layer_windows
        self.streaming: dict[str, Any] = (
            {"attention_sinks": config.attention_sinks, "rotation": model.rotary.rotation}
            if config.attention_sinks
            else {}
        )
        # One tensor for all layers: [layers, K/V, blocks, block_size, kv_heads, head_dim]. Zero-filled so that
        # masked-out slots never hold NaN (0 * NaN would leak through the attention weights).
        # With CUDA graphs, one block more than the block manager hands out: the padding rows of a captured
        # batch write their keys there (`cuda_graphs.DecodeGraphs`).
        self.kv_cache = torch.zeros(
            config.num_hidden_layers,
            2,
            num_blocks + (1 if decode_graph_sizes else 0),
            block_size,
            config.num_key_value_heads,
            config.head_dim,
            dtype=kv_dtype or dtype,
            device=device,
        )
        self.kv_caches: KVCaches = [(layer[0], layer[1]) for layer in self.kv_cache]

    def copy_blocks(self, copies: list[tuple[int, int]]) -> None:
        """Perform copy-on-write block copies across all layers."""
        if not copies:
            return
        src = torch.tensor([s for s, _ in copies], device=self.device)
        dst = torch.tensor([d for _, d in copies], device=self.device)
        raw = copyable(self.kv_cache)
        raw.index_copy_(2, dst, raw.index_select(2, src))

    def execute(
        self,
        scheduled: list[tuple[Sequence, int]],
        wants_prompt_logits: set[int],
        verifying: frozenset[int] = frozenset(),
    ) -> ForwardResult:
        """Run the forward pass for the scheduled (sequence, number of new tokens) pairs."""
        return self.forward(self.prepare(scheduled, wants_prompt_logits, verifying))

    def prepare(
        self,
        scheduled: list[tuple[Sequence, int]],
        wants_prompt_logits: set[int],
        verifying: frozenset[int] = frozenset(),
    ) -> StepInputs:
        """Flatten the step into model inputs; pure bookkeeping, no model work."""
        bs = self.block_size
        decodes = [seq for seq, n in scheduled if n == 1]
        # Verification chunks come right after the decodes, attended together (`attention.VerifyBatch`).
        prefills = [(seq, n) for seq, n in scheduled if n > 1 and seq.seq_id in verifying]
        num_verifying = len(prefills)
        prefills += [(seq, n) for seq, n in scheduled if n > 1 and seq.seq_id not in verifying]

        # Decodes: one token each, built with comprehensions since this runs for every running sequence.
        shift = bs.bit_length() - 1
        positions = [seq.num_computed_tokens for seq in decodes]
        input_ids = [seq.token_ids[pos] for seq, pos in zip(decodes, positions, strict=True)]
        decode_tables = [seq.block_table for seq in decodes]
        slots = [
            (table[pos >> shift] << shift) + (pos & (bs - 1))
            for table, pos in zip(decode_tables, positions, strict=True)
        ]
        decode_lens = [pos + 1 for pos in positions]
        sample_index = [i for i, seq in enumerate(decodes) if decode_lens[i] == len(seq.token_ids)]
        sampled = [decodes[i] for i in sample_index]
        prompt_rows: list[tuple[Sequence, int, int, int]] = []
        if wants_prompt_logits:
            prompt_rows = [
                (seq, i, positions[i], 1)
                for i, seq in enumerate(decodes)
                if seq.seq_id in wants_prompt_logits
            ]

        spans: list[tuple[int, int, int, list[int]]] = []
        verify_rows: list[tuple[Sequence, int, int]] = []
        for seq, num_new in prefills:
            first = seq.num_computed_tokens
            start = len(input_ids)
            input_ids.extend(seq.token_ids[first : first + num_new])
            pos = np.arange(first, first + num_new)
            positions.extend(pos.tolist())
            table = np.asarray(seq.block_table)
            slots.extend((table[pos // bs] * bs + pos % bs).tolist())
            spans.append((start, start + num_new, first + num_new, seq.block_table))
            if seq.seq_id in wants_prompt_logits:
                prompt_rows.append((seq, start, first, num_new))
            if seq.seq_id in verifying:
                verify_rows.append((seq, start, num_new))
            elif first + num_new == seq.num_tokens:
                sample_index.append(start + num_new - 1)
                sampled.append(seq)

        device = self.device
        # One verification chunk alone goes the prefill way: fewer operations than the padded layout.
        batched = num_verifying if num_verifying > 1 else 0
        metadata = metadata_per_layer(
            self.layer_windows,
            self.sliding_window,
            slot_mapping=_long_tensor(slots, device),
            block_size=bs,
            decode_block_tables=decode_tables,
            decode_context_lens=decode_lens,
            prefill_spans=spans[batched:],
            device=device,
            verify_spans=spans[:batched] or None,
            kernel_group=self.kernel_group,
            **self.streaming,
        )
        return StepInputs(
            input_ids=_long_tensor(input_ids, device),
            positions=_long_tensor(positions, device),
            metadata=metadata,
            sample_index=_long_tensor(sample_index, device),
            sampled_seqs=sampled,
            prompt_rows=prompt_rows,
            verify_rows=verify_rows,
        )

    def capture_decode_graphs(self) -> None:
        """Capture the decode graphs at `decode_graph_sizes` over the allocated KV cache (call once, after it is
        allocated and before serving); a no-op without sizes."""
        if not self.decode_graph_sizes:
            return
        max_blocks = -(-self.model.rotary.cos_table.shape[0] // self.block_size)
        self.graphs = DecodeGraphs(
            self.decode_graph_sizes,
            max_blocks=max_blocks,
            scratch_slot=self.num_blocks * self.block_size,
            block_size=self.block_size,
            sliding_window=self.sliding_window,
            device=self.device,
        )
        self.graphs.capture(self.model, self.kv_caches)

    def forward(self, inputs: StepInputs) -> ForwardResult:
        hidden = None
        if self.graphs is not None and not inputs.prompt_rows and not inputs.verify_rows:
            hidden = self.graphs.replay(inputs.input_ids, inputs.positions, inputs.metadata)
        if hidden is None:
            hidden = self.model(inputs.input_ids, inputs.positions, self.kv_caches, inputs.metadata)
        sampled_hidden = hidden.index_select(0, inputs.sample_index)
        logits = self.model.compute_logits(sampled_hidden)
        prompt_logits: dict[int, tuple[int, torch.Tensor]] = {}
        for seq, start, first, num_new in inputs.prompt_rows:
            # Rows at positions >= the prompt's last token predict generated tokens, not prompt tokens.
            count = max(0, min(seq.num_prompt_tokens - 1 - first, num_new))
            if count:
                prompt_logits[seq.seq_id] = (first, self.model.compute_logits(hidden[start : start + count]))
        verify_hidden = {
            seq.seq_id: hidden[start : start + count] for seq, start, count in inputs.verify_rows
        }
        verify_logits = {seq_id: self.model.compute_logits(rows) for seq_id, rows in verify_hidden.items()}
        return ForwardResult(
            sampled_seqs=inputs.sampled_seqs,
            logits=logits,
            prompt_logits=prompt_logits,
            verify_logits=verify_logits,
            sampled_hidden=sampled_hidden,
            verify_hidden=verify_hidden,
        )

    def profile_forward(self, num_tokens: int) -> None:
        """One prefill of num_tokens through the first blocks, to measure the activation peak."""
        bs = self.block_size
        num_blocks = self.kv_cache.shape[2]
        if -(-num_tokens // bs) > num_blocks:
            raise ValueError("profiling KV cache too small for the token budget")
        table = list(range(-(-num_tokens // bs)))
        metadata = metadata_per_layer(
            self.layer_windows,
            self.sliding_window,
            slot_mapping=torch.arange(num_tokens, device=self.device),
            block_size=bs,
            decode_block_tables=[],
            decode_context_lens=[],
            prefill_spans=[(0, num_tokens, num_tokens, table)],
            device=self.device,
            kernel_group=self.kernel_group,
            **self.streaming,
        )
        ids = torch.zeros(num_tokens, dtype=torch.long, device=self.device)
        # Positions wrap at the rotary table's length; only the shapes matter for profiling.
        positions = torch.arange(num_tokens, device=self.device) % self.model.rotary.cos_table.shape[0]
        hidden = self.model(ids, positions, self.kv_caches, metadata)
        self.model.compute_logits(hidden[-min(num_tokens, 256) :])


def _long_tensor(values: list[int], device: torch.device) -> torch.Tensor:
    """A step input on the device; to a GPU through pinned memory, without blocking the host."""
    return to_device(torch.tensor(values, dtype=torch.long), device)
