"""Writes logged exchanges off the request path: a bounded queue and one task that drains it into the log.

The caller's request only puts a record on the queue (never waits; a full queue drops the record and counts
it), and the SQLite writes run in a worker thread.
"""

from __future__ import annotations

import asyncio
import logging

from switchyard.fleet.online_eval.log import OnlineEvalLog
from switchyard.fleet.online_eval.record import LoggedExchange

logger = logging.getLogger(__name__)


class LogWriter:
    def __init__(self, log: OnlineEvalLog, capacity: int) -> None:
        self.log = log
        self._queue: asyncio.Queue[LoggedExchange] = asyncio.Queue(capacity)
        self._task: asyncio.Task[None] | None = None
        self.dropped = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="online-eval-writer")

    def submit(self, exchange: LoggedExchange) -> bool:
        """Queue `exchange`; False when the queue is full and it was dropped."""
        try:
            self._queue.put_nowait(exchange)
        except asyncio.QueueFull:
            self.dropped += 1
            return False
        return True

    async def flush(self) -> None:
        """Wait until everything submitted so far is written (feedback looks the request up after this)."""
        await self._queue.join()

    async def stop(self) -> None:
        await self.flush()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self.log.close()

    async def _run(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while not self._queue.empty():
                batch.append(self._queue.get_nowait())
            try:
                await asyncio.to_thread(self.log.add, batch)
            except Exception:
                logger.exception("writing %d online-eval records failed", len(batch))
            finally:
                for _ in batch:
                    self._queue.task_done()
