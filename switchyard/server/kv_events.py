"""`GET /v1/kv_events`: the prefix cache's stored and evicted blocks, for a KV-aware router in front of replicas.

A router (the fleet's `kv_aware` policy) polls with `after` = the `next` of its previous answer and `epoch` = the
epoch it saw, and mirrors which prefixes this server holds: block hashes are chained over the prompt's token ids
(switchyard/prefix_hash.py), so the router hashes a new prompt the same way and knows, without asking, how many
of its leading blocks are cached here. `after=-1`, a reader that fell behind the bounded log, or another epoch
(this server restarted) get `reset: true` and the whole cache in `blocks`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import WithJsonSchema
from starlette.exceptions import HTTPException

from switchyard.engine.async_engine import AsyncLLMEngine
from switchyard.server.protocol import ResponseBody

_EVENT_SCHEMA = {
    "type": "array",
    "minItems": 3,
    "maxItems": 3,
    "items": {"anyOf": [{"type": "integer"}, {"type": "string", "enum": ["stored", "evicted"]}]},
    "description": "[sequence number, 'stored' or 'evicted', block hash]",
}
"""One event as the OpenAPI document describes it: a 3-item array (written without `prefixItems`, which some
OpenAPI tools do not read)."""

MAX_EVENTS_PER_READ = 4096
"""Events in one answer at most; a reader further behind gets the rest on its next poll."""


class KVEventsResponse(ResponseBody):
    epoch: str
    """Names this cache's event log; it changes when the server restarts or rebuilds its engine."""
    block_size: int
    """Tokens per KV block: a prompt's block hashes are taken over runs of this many token ids."""
    events: list[Annotated[tuple[int, Literal["stored", "evicted"], int], WithJsonSchema(_EVENT_SCHEMA)]]
    """[sequence number, what happened, block hash], oldest first."""
    next: int
    """Pass as `after` on the next poll."""
    reset: bool
    """True: forget what you knew of this server's cache; `blocks` is all of it."""
    blocks: list[int]
    """With `reset`: the hash of every cached block; empty otherwise."""


async def read_kv_events(engine: AsyncLLMEngine, after: int, epoch: str | None) -> KVEventsResponse:
    """The events after `after`; 404 when this server runs without a prefix cache (it has nothing to publish)."""
    batch = await engine.kv_events(after, epoch, MAX_EVENTS_PER_READ)
    if batch is None:
        raise HTTPException(
            404, "this server runs without a prefix cache (--no-prefix-cache), so it publishes no KV events"
        )
    return KVEventsResponse(
        epoch=batch.epoch,
        block_size=batch.block_size,
        events=[(event.seq, event.kind.value, event.block_hash) for event in batch.events],
        next=batch.next,
        reset=batch.reset,
        blocks=list(batch.blocks),
    )
