"""The chained hash of a prompt's full KV blocks, shared by the engine's prefix cache and the fleet's router.

A block's hash covers its own token ids and, through its parent's hash, every token before it, so one number
names a whole prefix. The engine publishes the hashes of the blocks it caches (GET /v1/kv_events); the gateway
hashes a prompt the same way and looks its blocks up, without asking a replica. Both sides must agree bit for
bit across processes and machines, hence a keyed BLAKE2b over little-endian integers rather than Python's
salted `hash()`. Torch-free, so the gateway can import it.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

_PERSON = b"switchyard-kv1"
"""Separates these digests from any other BLAKE2b use; bump the suffix if the encoding below ever changes."""

_ROOT = b"\x00"
_CHILD = b"\x01"


def block_hash(parent: int | None, token_ids: Sequence[int]) -> int:
    """The 64-bit hash of a block holding `token_ids` after the prefix whose last block hashed to `parent`
    (None for a block at the start of the prompt)."""
    head = _ROOT if parent is None else _CHILD + parent.to_bytes(8, "little")
    body = struct.pack(f"<{len(token_ids)}q", *token_ids)
    digest = hashlib.blake2b(head + body, digest_size=8, person=_PERSON).digest()
    return int.from_bytes(digest, "little")


def prompt_block_hashes(token_ids: Sequence[int], block_size: int) -> list[int]:
    """The chained hashes of every full block of `token_ids`, first block first (a partial tail has none)."""
    if block_size < 1:
        raise ValueError("block_size must be >= 1")
    hashes: list[int] = []
    parent: int | None = None
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = block_hash(parent, token_ids[start : start + block_size])
        hashes.append(parent)
    return hashes
