"""Keeps a KVIndex current by polling each replica's `GET /v1/kv_events` (see switchyard/server/kv_events.py).

One background task polls every serving replica about every `interval` seconds, all replicas at once, and
applies what each answered in order. A cursor per replica (its log's epoch and the next sequence number) makes
each poll return only what is new; a replica that restarted answers with a new epoch and a snapshot, which
replaces what was known. A replica that does not publish events (another server, or Switchyard without a
prefix cache: 404) is asked again only every `unsupported_retry` seconds; errors are logged and retried on the
next round, never raised into the gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from switchyard.errors import SwitchyardError
from switchyard.fleet.kv_index import KVIndex
from switchyard.fleet.replica import Replica, ReplicaHealth

logger = logging.getLogger(__name__)

POLLED = (ReplicaHealth.HEALTHY, ReplicaHealth.DRAINING)
"""Replicas worth polling: the others either take no requests or answer nothing."""


class KVEventsFormatError(SwitchyardError):
    """A replica's /v1/kv_events answer is not the shape Switchyard publishes."""


@dataclass(frozen=True)
class KVEventsPage:
    """One answer of GET /v1/kv_events."""

    epoch: str
    block_size: int
    events: tuple[tuple[int, str, int], ...]
    next: int
    reset: bool
    blocks: tuple[int, ...]


def parse_page(data: Any) -> KVEventsPage:
    """The answer's JSON as a page; KVEventsFormatError naming what is wrong."""
    if not isinstance(data, dict):
        raise KVEventsFormatError("expected a JSON object")
    try:
        events = tuple((int(seq), str(kind), int(block)) for seq, kind, block in data.get("events", []))
        page = KVEventsPage(
            epoch=str(data["epoch"]),
            block_size=int(data["block_size"]),
            events=events,
            next=int(data["next"]),
            reset=bool(data["reset"]),
            blocks=tuple(int(block) for block in data.get("blocks", [])),
        )
    except (KeyError, TypeError, ValueError) as error:
        raise KVEventsFormatError(f"malformed kv_events answer: {error!r}") from error
    if page.block_size < 1 or any(kind not in ("stored", "evicted") for _, kind, _ in events):
        raise KVEventsFormatError("kv_events answer has a bad block_size or event kind")
    return page


@dataclass
class _Cursor:
    epoch: str | None = None
    next: int = -1
    """-1 asks for a snapshot."""
    unsupported_until: float = 0.0


class KVEventSubscriber:
    def __init__(
        self,
        index: KVIndex,
        interval: float = 0.1,
        timeout: float = 2.0,
        unsupported_retry: float = 30.0,
    ) -> None:
        if interval <= 0 or timeout <= 0:
            raise ValueError("interval and timeout must be > 0 seconds")
        self.index = index
        self.interval = interval
        self.timeout = timeout
        self.unsupported_retry = unsupported_retry
        self._cursors: dict[Replica, _Cursor] = {}
        self._task: asyncio.Task[None] | None = None

    async def start(self, replicas: Callable[[], Sequence[Replica]], http: httpx.AsyncClient) -> None:
        """Poll `replicas()` in the background until `stop`. Idempotent."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(replicas, http), name="switchyard-kv-events")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def forget(self, replica: Replica) -> None:
        """Start the replica over: its next poll asks for a snapshot (the index entry is the caller's)."""
        self._cursors.pop(replica, None)

    async def poll(self, replica: Replica, http: httpx.AsyncClient) -> bool:
        """Ask `replica` once and apply its answer; False when it publishes no events (404) or failed."""
        cursor = self._cursors.setdefault(replica, _Cursor())
        if time.monotonic() < cursor.unsupported_until:
            return False
        params: dict[str, str | int] = {"after": cursor.next}
        if cursor.epoch is not None:
            params["epoch"] = cursor.epoch
        try:
            response = await http.get(f"{replica.url}/v1/kv_events", params=params, timeout=self.timeout)
            if response.status_code == 404:
                cursor.unsupported_until = time.monotonic() + self.unsupported_retry
                logger.info("replica %s publishes no KV events; kv_aware routes by load there", replica.name)
                return False
            response.raise_for_status()
            page = parse_page(response.json())
        except (httpx.HTTPError, ValueError, KVEventsFormatError) as error:
            logger.debug("kv_events poll of %s failed: %r", replica.name, error)
            return False
        if self._cursors.get(replica) is not cursor:  # forgotten while the poll was in flight: stale
            return False
        self._apply(replica, cursor, page)
        return True

    def _apply(self, replica: Replica, cursor: _Cursor, page: KVEventsPage) -> None:
        if page.reset or page.epoch != cursor.epoch:
            self.index.reset(replica, page.block_size, page.blocks)
        for _, kind, block_hash in page.events:
            if kind == "stored":
                self.index.stored(replica, block_hash)
            else:
                self.index.evicted(replica, block_hash)
        cursor.epoch, cursor.next = page.epoch, page.next

    async def _run(self, replicas: Callable[[], Sequence[Replica]], http: httpx.AsyncClient) -> None:
        while True:
            polled = [replica for replica in replicas() if replica.health in POLLED]
            results = await asyncio.gather(*(self.poll(r, http) for r in polled), return_exceptions=True)
            for replica, result in zip(polled, results, strict=True):
                if isinstance(result, Exception):  # a bug, not a replica's fault: keep the others going
                    logger.error("kv_events poll of %s failed", replica.name, exc_info=result)
            await asyncio.sleep(self.interval)
