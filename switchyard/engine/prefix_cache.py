"""A radix tree over full KV blocks, so requests that share a prefix share its KV cache.

Each node is one full block: its key is the block's `block_size` token ids, its path from the root is the
whole prefix before it, so equal keys under different parents stay apart. A block enters the tree once all of
its tokens are computed, and is never written again. When no sequence references a cached block it stays in
the tree; only when free blocks run out is the least recently released unreferenced leaf evicted. The
reference counts themselves live in the BlockManager, which tells the cache when a block gains or loses its
last reference.

Each node also carries the chained hash of its prefix (switchyard/prefix_hash.py), and the cache logs every
block it stores and evicts by that hash (kv_event_log.py), so a router in another process can mirror which
prefixes this engine holds.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from switchyard.engine.kv_event_log import KVEventKind, KVEventLog
from switchyard.prefix_hash import block_hash


@dataclass(eq=False)
class PrefixNode:
    block: int
    tokens: tuple[int, ...]
    parent: PrefixNode | None
    hash: int | None = None
    """The chained hash of the whole prefix up to and including this block (None for the root)."""
    children: dict[tuple[int, ...], PrefixNode] = field(default_factory=dict)


class PrefixCache:
    def __init__(self, block_size: int, ref_counts: list[int], event_capacity: int = 16384) -> None:
        self.block_size = block_size
        self._ref_counts = ref_counts
        """The BlockManager's reference counts, read here, never written."""
        self.root = PrefixNode(block=-1, tokens=(), parent=None)
        self._by_block: dict[int, PrefixNode] = {}
        self._evictable: OrderedDict[int, PrefixNode] = OrderedDict()
        """Unreferenced leaves, least recently released first."""
        self.num_unreferenced = 0
        """Cached blocks no sequence references: all of them can be reclaimed, leaves first."""
        self.num_queried_tokens = 0
        self.num_hit_tokens = 0
        self.events = KVEventLog(block_size, event_capacity)
        """Blocks stored and evicted, by hash, for routers outside the process (GET /v1/kv_events)."""

    def __contains__(self, block: int) -> bool:
        return block in self._by_block

    @property
    def num_cached_blocks(self) -> int:
        return len(self._by_block)

    @property
    def hit_rate(self) -> float:
        return self.num_hit_tokens / self.num_queried_tokens if self.num_queried_tokens else 0.0

    def cached_block_hashes(self) -> list[int]:
        """The hash of every cached block (a snapshot for a router that lost track of the events)."""
        return [node.hash for node in self._by_block.values() if node.hash is not None]

    def match(self, token_ids: list[int], max_blocks: int) -> list[PrefixNode]:
        """The longest chain of cached full blocks that prefixes token_ids, at most max_blocks long."""
        bs = self.block_size
        node = self.root
        chain: list[PrefixNode] = []
        for i in range(max_blocks):
            child = node.children.get(tuple(token_ids[i * bs : (i + 1) * bs]))
            if child is None:
                break
            chain.append(child)
            node = child
        return chain

    def record_lookup(self, queried_tokens: int, hit_tokens: int) -> None:
        self.num_queried_tokens += queried_tokens
        self.num_hit_tokens += hit_tokens

    def insert(self, parent: PrefixNode | None, tokens: tuple[int, ...], block: int) -> PrefixNode:
        """Cache `block` holding `tokens` after `parent` (None = the root). If an equal block is cached
        already, that node is returned and `block` is not cached; the caller may switch to the cached one."""
        parent = parent or self.root
        existing = parent.children.get(tokens)
        if existing is not None:
            return existing
        hashed = block_hash(parent.hash, tokens)
        node = PrefixNode(block=block, tokens=tokens, parent=parent, hash=hashed)
        parent.children[tokens] = node
        self._by_block[block] = node
        self.events.record(KVEventKind.STORED, hashed)
        self._evictable.pop(parent.block, None)  # the parent is no longer a leaf
        return node

    def node_of(self, block: int) -> PrefixNode | None:
        return self._by_block.get(block)

    def on_unreferenced(self, block: int) -> None:
        """A cached block lost its last reference: it becomes reclaimable (an evictable leaf if it is one)."""
        node = self._by_block[block]
        self.num_unreferenced += 1
        if not node.children:
            self._evictable[block] = node
            self._evictable.move_to_end(block)

    def on_referenced(self, block: int) -> None:
        """An unreferenced cached block is used again."""
        self.num_unreferenced -= 1
        self._evictable.pop(block, None)

    def evict(self) -> int:
        """Remove the least recently released unreferenced leaf; return its block, now free."""
        if not self._evictable:
            raise RuntimeError("no evictable cached block")
        block, node = self._evictable.popitem(last=False)
        parent = node.parent
        assert parent is not None and node.hash is not None
        del parent.children[node.tokens]
        del self._by_block[block]
        self.num_unreferenced -= 1
        self.events.record(KVEventKind.EVICTED, node.hash)
        if parent is not self.root and not parent.children and self._ref_counts[parent.block] == 0:
            # The parent was released no later than this child: it goes first among the evictable.
            self._evictable[parent.block] = parent
            self._evictable.move_to_end(parent.block, last=False)
        return block

    def reset(self) -> list[int]:
        """Forget every unreferenced cached block (e.g. after weights change); return the freed blocks."""
        freed = []
        while self._evictable:
            freed.append(self.evict())
        return freed
