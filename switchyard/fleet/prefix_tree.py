"""An approximate picture of one replica's prefix cache: a radix tree of the prompt texts routed to it.

The gateway cannot see a replica's KV cache, but it knows what it sent there. Prompts that share a long text
prefix share a long token prefix, so the longest text prefix a new prompt shares with what a replica was sent
predicts how much of it that replica has cached (SGLang router's idea). Characters, not tokens, so no
tokenizer is needed and any OpenAI-compatible server can be fronted. The tree is bounded: past `max_chars`
the least recently used branches go, leaves first, much as the replica's own cache evicts.
"""

from __future__ import annotations

import heapq
import itertools


class _Node:
    __slots__ = ("children", "edge", "last_used", "parent")

    def __init__(self, edge: str, parent: _Node | None, last_used: int) -> None:
        self.edge = edge
        """The text on the edge from the parent to this node."""
        self.parent = parent
        self.children: dict[str, _Node] = {}
        """By the first character of the child's edge."""
        self.last_used = last_used


def _shared_length(text: str, start: int, edge: str) -> int:
    """How many leading characters of `edge` equal `text[start:]`'s (compared by C slices, not per char)."""
    if text.startswith(edge, start):
        return len(edge)
    low, high = 0, min(len(edge), len(text) - start)
    while low < high:
        middle = (low + high + 1) // 2
        if text.startswith(edge[:middle], start):
            low = middle
        else:
            high = middle - 1
    return low


class PrefixTree:
    """Texts inserted, matched by their longest common prefix; at most `max_chars` characters are kept."""

    def __init__(self, max_chars: int = 1 << 24, evict_to: float = 0.9) -> None:
        if max_chars < 1:
            raise ValueError("max_chars must be >= 1")
        if not 0 < evict_to <= 1:
            raise ValueError("evict_to must be in (0, 1]")
        self.max_chars = max_chars
        self._low_water = int(max_chars * evict_to)
        """Eviction runs down to here, so it runs once per many inserts rather than on every one."""
        self._clock = itertools.count(1)
        self._root = _Node("", None, 0)
        self.num_chars = 0
        """Characters held, over all edges: the tree's size."""

    def match(self, text: str) -> int:
        """The length of the longest prefix of `text` that some inserted (and not evicted) text shares."""
        node, matched = self._root, 0
        while matched < len(text):
            child = node.children.get(text[matched])
            if child is None:
                break
            shared = _shared_length(text, matched, child.edge)
            matched += shared
            if shared < len(child.edge):
                break
            node = child
        return matched

    def insert(self, text: str) -> None:
        """Add `text` (marking its whole path as just used), then evict if the tree grew past `max_chars`."""
        now = next(self._clock)
        node, position = self._root, 0
        node.last_used = now
        while position < len(text):
            child = node.children.get(text[position])
            if child is None:
                leaf = _Node(text[position:], node, now)
                node.children[text[position]] = leaf
                self.num_chars += len(leaf.edge)
                break
            shared = _shared_length(text, position, child.edge)
            if shared < len(child.edge):
                child = self._split(child, shared)
            child.last_used = now
            position += shared
            node = child
        if self.num_chars > self.max_chars:
            self._evict(self._low_water)

    def _split(self, node: _Node, at: int) -> _Node:
        """Cut `node`'s edge after `at` characters; return the new node in between (it keeps the first part)."""
        parent = node.parent
        assert parent is not None, "the root has no edge to split"
        middle = _Node(node.edge[:at], parent, node.last_used)
        parent.children[middle.edge[0]] = middle
        node.edge = node.edge[at:]
        node.parent = middle
        middle.children[node.edge[0]] = node
        return middle

    def _evict(self, target: int) -> None:
        """Drop least recently used leaves (a parent becomes a leaf in turn) until at most `target` chars remain."""
        order = itertools.count()
        leaves = [
            (n.last_used, next(order), n) for n in self._nodes() if not n.children and n is not self._root
        ]
        heapq.heapify(leaves)
        while leaves and self.num_chars > target:
            _, _, leaf = heapq.heappop(leaves)
            parent = leaf.parent
            assert parent is not None
            del parent.children[leaf.edge[0]]
            self.num_chars -= len(leaf.edge)
            if not parent.children and parent is not self._root:
                heapq.heappush(leaves, (parent.last_used, next(order), parent))

    def _nodes(self) -> list[_Node]:
        found, stack = [], [self._root]
        while stack:
            node = stack.pop()
            found.append(node)
            stack.extend(node.children.values())
        return found
