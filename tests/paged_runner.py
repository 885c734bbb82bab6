"""A test-only driver for LlamaForCausalLM over a paged KV cache with deliberately scattered block tables.

The engine's model runner is the production path; this harness exists so model tests can exercise every
layout of a step the engine produces (several prefills in one forward, chunked prefill over several forwards,
batched decodes, decodes mixed with a prefill chunk) without depending on the scheduler.

Two choices make indexing mistakes visible instead of silently harmless:
- blocks are handed out from a shuffled free list as sequences grow, so no sequence owns contiguous blocks and
  neighbouring sequences interleave;
- the caches start filled with large random values rather than zeros, so reading a slot that was never
  written (or belongs to another sequence) changes the logits.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from switchyard.models.attention import metadata_per_layer
from switchyard.models.llama import KVCaches, LlamaForCausalLM

# Finite garbage: large enough to swamp the attention output if a slot is read unmasked. Not NaN, because a
# masked-out NaN value still poisons softmax(scores) @ V (0 * NaN = NaN), which the model does not promise to
# tolerate in slots it never wrote.
_GARBAGE_SCALE = 100.0


@dataclass
class PagedSequence:
    """One sequence's tokens and where its keys and values live."""

    tokens: list[int]
    """Every token known so far: the prompt plus tokens appended while decoding."""
    num_cached: int = 0
    """How many leading tokens already have their keys and values in the cache."""
    block_table: list[int] = field(default_factory=list)
    """Cache blocks holding positions [0, len(block_table) * block_size), in order."""

    @property
    def num_uncached(self) -> int:
        return len(self.tokens) - self.num_cached


class PagedRunner:
    """Owns KV caches and block tables for a few sequences and runs steps of the model over them."""

    def __init__(
        self,
        model: LlamaForCausalLM,
        *,
        block_size: int = 4,
        num_blocks: int = 256,
        seed: int = 0,
        kernel: bool = False,
    ):
        """kernel: attend with the Triton kernel (`models.triton_attention`) instead of SDPA."""
        config = model.config
        self.kernel_group = config.num_attention_heads // config.num_key_value_heads if kernel else None
        parameter = next(model.parameters())
        self.model = model
        self.block_size = block_size
        self.device = parameter.device
        generator = torch.Generator().manual_seed(seed)
        shape = (num_blocks, block_size, config.num_key_value_heads, config.head_dim)
        self.kv_caches: KVCaches = [
            (_garbage(shape, parameter, generator), _garbage(shape, parameter, generator))
            for _ in range(config.num_hidden_layers)
        ]
        self._free_blocks = list(range(num_blocks))
        random.Random(seed).shuffle(self._free_blocks)
        self.sequences: list[PagedSequence] = []

    def add(self, prompt: Sequence[int]) -> int:
        """Register a sequence (nothing is computed yet); returns its id."""
        if not prompt:
            raise ValueError("a prompt needs at least one token")
        self.sequences.append(PagedSequence(tokens=list(prompt)))
        return len(self.sequences) - 1

    def step(
        self, decode_ids: Sequence[int] = (), prefill_chunks: Sequence[tuple[int, int]] = ()
    ) -> dict[int, torch.Tensor]:
        """Run one forward over the next uncached token of each `decode_ids` sequence, then the next
        `num_tokens` uncached tokens of each `(seq_id, num_tokens)` prefill chunk.

        Returns float32 logits [vocab] at the last token processed for each sequence in the step.
        """
        ids: list[int] = []
        positions: list[int] = []
        decode_tables: list[list[int]] = []
        decode_lens: list[int] = []
        spans: list[tuple[int, int, int, list[int]]] = []
        last_rows: dict[int, int] = {}
        for seq_id in decode_ids:
            seq = self.sequences[seq_id]
            if seq.num_uncached != 1:
                raise ValueError(
                    f"decode of sequence {seq_id} needs exactly 1 uncached token, has {seq.num_uncached}"
                )
            self._reserve(seq, seq.num_cached + 1)
            last_rows[seq_id] = len(ids)
            ids.append(seq.tokens[seq.num_cached])
            positions.append(seq.num_cached)
            decode_tables.append(list(seq.block_table))
            decode_lens.append(seq.num_cached + 1)
        for seq_id, num_tokens in prefill_chunks:
            seq = self.sequences[seq_id]
            if not 0 < num_tokens <= seq.num_uncached:
                raise ValueError(
                    f"chunk of {num_tokens} tokens for sequence {seq_id} with {seq.num_uncached} uncached"
                )
            context_len = seq.num_cached + num_tokens
            self._reserve(seq, context_len)
            start = len(ids)
            ids.extend(seq.tokens[seq.num_cached : context_len])
            positions.extend(range(seq.num_cached, context_len))
            spans.append((start, start + num_tokens, context_len, list(seq.block_table)))
            last_rows[seq_id] = start + num_tokens - 1
        if len(last_rows) != len(decode_ids) + len(prefill_chunks):
            raise ValueError("a sequence may appear only once per step")

        config = self.model.config
        metadata = metadata_per_layer(
            config.layer_windows,
            config.sliding_window,
            slot_mapping=self._slots(decode_ids, prefill_chunks),
            block_size=self.block_size,
            decode_block_tables=decode_tables,
            decode_context_lens=decode_lens,
            prefill_spans=spans,
            device=self.device,
            kernel_group=self.kernel_group,
            attention_sinks=config.attention_sinks,
            rotation=self.model.rotary.rotation if config.attention_sinks else None,
        )
        hidden = self.model(
            torch.tensor(ids, device=self.device),
            torch.tensor(positions, device=self.device),
            self.kv_caches,
            metadata,
        )
        rows = torch.tensor(list(last_rows.values()), device=self.device)
        logits = self.model.compute_logits(hidden[rows])
        for seq_id in decode_ids:
            self.sequences[seq_id].num_cached += 1
        for seq_id, num_tokens in prefill_chunks:
            self.sequences[seq_id].num_cached += num_tokens
        return {seq_id: logits[i] for i, seq_id in enumerate(last_rows)}

    def prefill(self, seq_ids: Sequence[int], chunk_size: int | None = None) -> dict[int, torch.Tensor]:
        """Cache every uncached token of `seq_ids`: in one forward when chunk_size is None, else in forwards of
        at most `chunk_size` tokens per sequence (all sequences' chunks share each forward).

        Returns the logits at each sequence's last token.
        """
        logits: dict[int, torch.Tensor] = {}
        while pending := [s for s in seq_ids if self.sequences[s].num_uncached]:
            chunks = [
                (s, min(chunk_size or self.sequences[s].num_uncached, self.sequences[s].num_uncached))
                for s in pending
            ]
            logits.update(self.step(prefill_chunks=chunks))
        return logits

    def append(self, seq_id: int, token: int) -> None:
        """Add a token to a sequence (sampled or teacher-forced); the next step that covers it caches it."""
        self.sequences[seq_id].tokens.append(token)

    def decode(self, next_tokens: dict[int, int]) -> dict[int, torch.Tensor]:
        """Append one token to each sequence and run them all as one batched decode step."""
        for seq_id, token in next_tokens.items():
            self.append(seq_id, token)
        return self.step(decode_ids=list(next_tokens))

    def _reserve(self, seq: PagedSequence, num_positions: int) -> None:
        while len(seq.block_table) * self.block_size < num_positions:
            if not self._free_blocks:
                raise RuntimeError("PagedRunner ran out of cache blocks; pass a larger num_blocks")
            seq.block_table.append(self._free_blocks.pop())

    def _slots(self, decode_ids: Sequence[int], prefill_chunks: Sequence[tuple[int, int]]) -> torch.Tensor:
        """Slot of every token of the step, in the step's order; read before num_cached advances."""
        slots: list[int] = []
        ranges = [(s, self.sequences[s].num_cached, 1) for s in decode_ids]
        ranges += [(s, self.sequences[s].num_cached, n) for s, n in prefill_chunks]
        for seq_id, first, count in ranges:
            table = self.sequences[seq_id].block_table
            for pos in range(first, first + count):
                slots.append(table[pos // self.block_size] * self.block_size + pos % self.block_size)
        return torch.tensor(slots, dtype=torch.long, device=self.device)


def greedy_tokens(runner: PagedRunner, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
    """Each prompt's `new_tokens` greedy tokens, the prompts prefilled together and decoded as one batch."""
    ids = [runner.add(prompt) for prompt in prompts]
    logits = runner.prefill(ids)
    generated: dict[int, list[int]] = {i: [] for i in ids}
    for _ in range(new_tokens):
        next_tokens = {i: int(logits[i].argmax()) for i in ids}
        for i, token in next_tokens.items():
            generated[i].append(token)
        logits = runner.decode(next_tokens)
    return [generated[i] for i in ids]


def _garbage(shape: tuple[int, ...], like: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """A cache tensor on `like`'s device and dtype, filled with large random values (see the module doc)."""
    values = torch.randn(shape, generator=generator) * _GARBAGE_SCALE
    return values.to(device=like.device, dtype=like.dtype)
