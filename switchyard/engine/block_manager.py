"""Fixed-size KV blocks: a free list, reference counts and copy-on-write for sequences that share blocks.

A block holds `block_size` consecutive tokens of one sequence. Forked samples of one prompt share the
prompt's blocks; the first write into a shared block copies it (copy-on-write), which the engine performs on
the KV tensors before the forward pass.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from switchyard.engine.sequence import Sequence


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError("num_blocks and block_size must be >= 1")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.ref_counts = [0] * num_blocks
        self._free: deque[int] = deque(range(num_blocks))

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self._free)

    @property
    def usage(self) -> float:
        return self.num_used_blocks / self.num_blocks

    def blocks_for_tokens(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def blocks_needed(self, seq: Sequence, num_new_tokens: int) -> int:
        """New blocks `allocate_slots(seq, num_new_tokens)` would take, copy-on-write included."""
        end = seq.num_computed_tokens + num_new_tokens
        needed = max(0, self.blocks_for_tokens(end) - len(seq.block_table))
        return needed + len(self._shared_written_blocks(seq, end))

    def allocate_slots(self, seq: Sequence, num_new_tokens: int) -> list[tuple[int, int]] | None:
        """Make seq's block table cover its next `num_new_tokens` tokens.

        Returns the (source, destination) block copies the caller must perform, or None, changing nothing,
        when there are not enough free blocks.
        """
        end = seq.num_computed_tokens + num_new_tokens
        table = seq.block_table
        if end <= len(table) * self.block_size:
            # Fast path of a decode step: the tokens fit in blocks the sequence owns alone.
            first = seq.num_computed_tokens // self.block_size
            if all(self.ref_counts[block] == 1 for block in table[first:]):
                return []
        shared = self._shared_written_blocks(seq, end)
        new_blocks = max(0, self.blocks_for_tokens(end) - len(seq.block_table))
        if new_blocks + len(shared) > len(self._free):
            return None
        copies = []
        for index in shared:
            source = seq.block_table[index]
            target = self._take()
            self.ref_counts[source] -= 1
            seq.block_table[index] = target
            copies.append((source, target))
        for _ in range(new_blocks):
            seq.block_table.append(self._take())
        return copies

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """Let child share all of parent's blocks."""
        child.block_table = list(parent.block_table)
        for block in parent.block_table:
            self.ref_counts[block] += 1

    def free(self, seq: Sequence) -> None:
        """Release seq's blocks (a block returns to the free list when its last owner lets go)."""
        self._release(seq.block_table)
        seq.block_table = []

    def _release(self, blocks: Iterable[int]) -> None:
        for block in blocks:
            self.ref_counts[block] -= 1
            if self.ref_counts[block] == 0:
                self._free.append(block)

    def _take(self) -> int:
        block = self._free.popleft()
        self.ref_counts[block] = 1
        return block

    def _shared_written_blocks(self, seq: Sequence, end: int) -> list[int]:
        """Indexes in seq's table of already-owned shared blocks that positions [computed, end) write into."""
        first = seq.num_computed_tokens // self.block_size
        last = min(len(seq.block_table), self.blocks_for_tokens(end))
        return [i for i in range(first, last) if self.ref_counts[seq.block_table[i]] > 1]

    def check_invariants(self, sequences: Iterable[Sequence]) -> None:
        """Raise AssertionError unless refcounts equal owners and free blocks are exactly the unowned ones."""
        owners = [0] * self.num_blocks
        for seq in sequences:
            assert len(set(seq.block_table)) == len(seq.block_table), f"seq {seq.seq_id} owns a block twice"
            for block in seq.block_table:
                owners[block] += 1
        assert owners == self.ref_counts, "reference counts differ from owners"
        free = set(self._free)
        assert len(free) == len(self._free), "a block is on the free list twice"
        assert free == {b for b in range(self.num_blocks) if owners[b] == 0}, "free list differs from unowned"
