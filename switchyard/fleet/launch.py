"""Runs the gateway with uvicorn, and shuts it down gracefully on SIGTERM/SIGINT.

The same shape as `switchyard serve`'s: the first signal stops admission (new requests and /health get 503,
so a load balancer in front drains the gateway), requests in flight get `shutdown_grace` seconds to finish,
then uvicorn exits and the app's shutdown stops the replicas the fleet launched (they drain in turn). A second
signal skips the wait.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import threading
from collections.abc import Callable
from types import FrameType

import uvicorn
from uvicorn.server import HANDLED_SIGNALS

from switchyard.fleet.admission_hooks import AdmissionHooks
from switchyard.fleet.config import FleetConfig
from switchyard.fleet.gateway import build_gateway_app
from switchyard.fleet.launchers import LauncherFactory
from switchyard.fleet.runtime import FleetRuntime

logger = logging.getLogger(__name__)

CONNECTION_CLOSE_TIMEOUT = 5
"""Seconds uvicorn waits for open connections after the drain, before it cancels their tasks."""


class DrainingGateway(uvicorn.Server):
    """A uvicorn.Server whose first exit signal drains the fleet's requests before exiting."""

    def __init__(self, config: uvicorn.Config, runtime: FleetRuntime) -> None:
        super().__init__(config)
        self.runtime = runtime
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain_task: asyncio.Task[None] | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)  # the app's startup (launchers) runs in here
        self._reclaim_signals()

    def _reclaim_signals(self) -> None:
        """Take SIGTERM and SIGINT back after the app started: a launcher may have set its own handlers
        meanwhile (`ray.init` makes SIGTERM exit the process at once), and the drain must hear them first."""
        if threading.current_thread() is threading.main_thread():
            for sig in HANDLED_SIGNALS:
                signal.signal(sig, self.handle_exit)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """Signal handler (and the way tests ask for a graceful stop from another thread)."""
        if self._loop is None or self._loop.is_closed() or self.runtime.draining:
            super().handle_exit(sig, frame)
            return
        self.runtime.draining = True  # from here on, new requests get 503
        self._loop.call_soon_threadsafe(self._start_drain)

    def _start_drain(self) -> None:
        self._drain_task = asyncio.create_task(self._drain())

    async def _drain(self) -> None:
        runtime, grace = self.runtime, self.runtime.config.shutdown_grace
        logger.info(
            "shutting down: %d request(s) in flight get %.0f s to finish", runtime.num_in_flight, grace
        )
        if not await runtime.wait_until_idle(grace):
            logger.warning(
                "stopping with %d request(s) still in flight after %.0f s", runtime.num_in_flight, grace
            )
        self.should_exit = True


def build_gateway_server(
    config: FleetConfig,
    log_level: str = "warning",
    launcher_factory: LauncherFactory | None = None,
    hooks: AdmissionHooks | None = None,
    limits_clock: Callable[[], float] | None = None,
) -> DrainingGateway:
    """A gateway ready to `run()` (blocking) or `serve()` (in an event loop) on config.host:config.port;
    `hooks` and `limits_clock` as FleetRuntime's."""
    runtime = FleetRuntime(config, launcher_factory, hooks=hooks, limits_clock=limits_clock)
    app = build_gateway_app(runtime)
    uvicorn_config = uvicorn.Config(
        app,
        host=config.host,
        port=config.port,
        log_level=log_level,
        timeout_graceful_shutdown=CONNECTION_CLOSE_TIMEOUT,
        lifespan="on",
    )
    return DrainingGateway(uvicorn_config, runtime)
