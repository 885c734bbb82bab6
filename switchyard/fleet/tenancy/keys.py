"""API keys: made from 256 random bits, shown once, stored only as their SHA-256.

A plain hash (no salt, no slow KDF) is enough for keys this random: nobody can guess one from its hash, and
the gateway looks a key up by its hash on every request, which a slow hash would make expensive.
"""

from __future__ import annotations

import hashlib
import secrets

KEY_PREFIX = "sy-"
"""Every key starts with this, so a key found in a log or a repository is recognisable as Switchyard's."""
SHOWN_PREFIX_LENGTH = len(KEY_PREFIX) + 6
"""How much of a key `switchyard tenants list` shows, to tell keys apart without revealing them."""


def new_api_key() -> str:
    """A fresh key: the prefix and 43 URL-safe characters (256 bits)."""
    return f"{KEY_PREFIX}{secrets.token_urlsafe(32)}"


def key_hash(key: str) -> str:
    """What the store keeps of a key: its SHA-256, in hex."""
    return hashlib.sha256(key.encode()).hexdigest()


def shown_prefix(key: str) -> str:
    return key[:SHOWN_PREFIX_LENGTH]
