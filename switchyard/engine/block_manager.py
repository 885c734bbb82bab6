"""Fixed-size KV blocks: a free list, reference counts and copy-on-write for sequences that share blocks.

A block holds `block_size` consecutive tokens of one sequence. Forked samples of one prompt share the
prompt's blocks; the first write into a shared block copies it (copy-on-write), which the engine performs on
the KV tensors before the forward pass. With the prefix cache on, full blocks are also registered in a radix
tree and outlive their sequences: an unreferenced cached block counts as free and is evicted (LRU leaf first)
only when the free list is empty.

With a sliding window (`window`), a block whose every position lies outside the window of any query still to
come is released while its sequence runs, so a sequence's memory stops growing at the window: its entry in
the block table becomes NULL_BLOCK, a reserved block never handed out, which keeps positions and table
indexes aligned (attention masks every key of it). Blocks in the prefix cache are not released that way: a
cached block is a prefix of the blocks after it, and a tree whose interior is gone can match nothing. So a
windowed model caches its prompts' blocks only, and frees the generated ones that leave the window.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from switchyard.engine.prefix_cache import PrefixCache
from switchyard.engine.sequence import Sequence

NULL_BLOCK = 0
"""The table entry of a released out-of-window block (reserved when the manager has a window)."""


class BlockManager:
    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        enable_prefix_cache: bool = False,
        window: int | None = None,
        sinks: int = 0,
    ) -> None:
        """`window`: release blocks outside it as sequences grow (every layer of the model must attend
        within it); None keeps every block until the sequence ends. `sinks`: the first tokens every query
        also attends (StreamingLLM), whose blocks are kept."""
        if num_blocks < 1 + (window is not None) or block_size < 1:
            raise ValueError("num_blocks and block_size must be >= 1 (2 blocks with a window)")
        if window is not None and window < 1:
            raise ValueError("the window must be >= 1 token")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.window = window
        self._sink_blocks = -(-sinks // block_size)
        self.ref_counts = [0] * num_blocks
        reserved = 1 if window is not None else 0
        self._free: deque[int] = deque(range(reserved, num_blocks))
        self.prefix_cache = PrefixCache(block_size, self.ref_counts) if enable_prefix_cache else None
        self.num_window_released = 0
        """Blocks released because they left the window (cumulative)."""

    @property
    def num_free_blocks(self) -> int:
        """Blocks an allocation can take: never-used or released ones plus unreferenced cached ones."""
        cached = self.prefix_cache.num_unreferenced if self.prefix_cache is not None else 0
        return len(self._free) + cached

    @property
    def num_used_blocks(self) -> int:
        """Blocks some sequence references (cached but unreferenced blocks count as free; NULL_BLOCK not at
        all)."""
        return self.num_blocks - self.num_free_blocks - (self.window is not None)

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
        if new_blocks + len(shared) > self.num_free_blocks:
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
        child.prefix_node = parent.prefix_node
        child.num_cached_blocks = parent.num_cached_blocks
        for block in self._live(parent.block_table):
            self.ref_counts[block] += 1

    def free(self, seq: Sequence) -> None:
        """Release seq's blocks (a block becomes free, or cached-unreferenced, when its last owner lets go)."""
        self._release(self._live(seq.block_table))
        seq.block_table = []
        seq.prefix_node = None
        seq.num_cached_blocks = 0

    def trim(self, seq: Sequence, num_tokens: int) -> None:
        """Release the blocks of seq past its first num_tokens tokens (rejected speculative positions)."""
        keep = self.blocks_for_tokens(num_tokens)
        if len(seq.block_table) > keep:
            self._release(self._live(seq.block_table[keep:]))
            del seq.block_table[keep:]

    def release_outside_window(self, seq: Sequence) -> int:
        """Release seq's uncached blocks, past the sinks', that no query still to come attends to; return how
        many.

        The next query sits at position `num_computed_tokens` and sees keys k with q - window < k <= q, so
        every key at or below num_computed_tokens - window is done with, in every layer."""
        if self.window is None:
            return 0
        done = (seq.num_computed_tokens - self.window + 1) // self.block_size
        released = 0
        table = seq.block_table
        for index in range(max(seq.num_cached_blocks, self._sink_blocks), min(done, len(table))):
            if table[index] != NULL_BLOCK:
                self._release([table[index]])
                table[index] = NULL_BLOCK
                released += 1
        self.num_window_released += released
        return released

    def reset_prefix_cache(self) -> int:
        """Forget every cached block no sequence uses (they go back to the free list); return how many.

        Blocks that running sequences reference stay cached: they are in use either way."""
        if self.prefix_cache is None:
            return 0
        freed = self.prefix_cache.reset()
        self._free.extend(freed)
        return len(freed)

    def match_prefix(self, seq: Sequence) -> int:
        """Give a sequence with nothing computed the longest cached prefix of its tokens; return its length.

        At least the last token is always left to compute, since its logits are needed. A request asking for
        prompt logprobs matches nothing: the logits of cached positions were never kept, so they must be computed.
        """
        cache = self.prefix_cache
        if cache is None or seq.num_computed_tokens or seq.block_table:
            return 0
        if seq.request.params.prompt_logprobs is not None:
            return 0
        chain = cache.match(seq.token_ids, (seq.num_tokens - 1) // self.block_size)
        for node in chain:
            self._acquire(node.block)
        seq.block_table = [node.block for node in chain]
        seq.prefix_node = chain[-1] if chain else None
        seq.num_cached_blocks = len(chain)
        seq.num_computed_tokens = len(chain) * self.block_size
        cache.record_lookup(seq.num_tokens, seq.num_computed_tokens)
        return seq.num_computed_tokens

    def cache_full_blocks(self, seq: Sequence) -> None:
        """Register the blocks seq has filled since the last call in the prefix cache.

        When an identical block is cached already (a concurrent request with the same prefix computed it),
        seq switches to the cached block and gives its own copy back.
        """
        cache = self.prefix_cache
        if cache is None:
            return
        bs = self.block_size
        full = seq.num_computed_tokens // bs
        if self.window is not None:  # prompts only: see the module docstring
            full = min(full, seq.num_prompt_tokens // bs)
        for index in range(seq.num_cached_blocks, full):
            block = seq.block_table[index]
            node = cache.insert(seq.prefix_node, tuple(seq.token_ids[index * bs : (index + 1) * bs]), block)
            if node.block != block:
                self._acquire(node.block)
                seq.block_table[index] = node.block
                self._release([block])
            seq.prefix_node = node
        seq.num_cached_blocks = max(seq.num_cached_blocks, full)

    def _acquire(self, block: int) -> None:
        if self.ref_counts[block] == 0 and self.prefix_cache is not None:
            self.prefix_cache.on_referenced(block)
        self.ref_counts[block] += 1

    def _release(self, blocks: Iterable[int]) -> None:
        cache = self.prefix_cache
        for block in blocks:
            self.ref_counts[block] -= 1
            if self.ref_counts[block] == 0:
                if cache is not None and block in cache:
                    cache.on_unreferenced(block)
                else:
                    self._free.append(block)

    def _live(self, blocks: list[int]) -> list[int]:
        """The blocks of a table a sequence still owns (without the NULL_BLOCK entries of released ones)."""
        if self.window is None:
            return blocks
        return [block for block in blocks if block != NULL_BLOCK]

    def _take(self) -> int:
        if self._free:
            block = self._free.popleft()
        else:
            assert self.prefix_cache is not None, "allocation past the free blocks"
            block = self.prefix_cache.evict()
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
            live = self._live(seq.block_table)
            assert len(set(live)) == len(live), f"seq {seq.seq_id} owns a block twice"
            for block in live:
                owners[block] += 1
        assert owners == self.ref_counts, "reference counts differ from owners"
        free = set(self._free)
        assert len(free) == len(self._free), "a block is on the free list twice"
        cache = self.prefix_cache
        cached = {b for b in range(self.num_blocks) if cache is not None and b in cache}
        assert not free & cached, "a cached block is on the free list"
        unowned = {b for b in range(self.num_blocks) if owners[b] == 0}
        if self.window is not None:
            assert self.ref_counts[NULL_BLOCK] == 0 and NULL_BLOCK not in cached, "NULL_BLOCK was handed out"
            unowned.discard(NULL_BLOCK)
        assert free == unowned - cached, "free list differs from unowned, uncached blocks"
        if cache is not None:
            assert cache.num_unreferenced == len(unowned & cached), "unreferenced cached count is off"
