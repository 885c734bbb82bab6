"""Runs the server in-process with uvicorn, and shuts it down gracefully on SIGTERM/SIGINT.

Graceful shutdown: the first signal stops admission (new requests and /health get 503, so a load balancer
drains us), in-flight requests get `shutdown_grace` seconds to finish, whatever is still running is then
aborted (its clients get an error), and uvicorn exits. A second signal skips the wait.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from types import FrameType

import uvicorn

from switchyard.config import EngineConfig
from switchyard.engine.async_engine import AsyncLLMEngine
from switchyard.engine.engine import LLMEngine
from switchyard.engine.grammar_limits import GrammarLimits
from switchyard.server.app import build_app
from switchyard.server.state import ServerSettings, ServerState
from switchyard.server.tls import TlsFiles

logger = logging.getLogger(__name__)

CONNECTION_CLOSE_TIMEOUT = 5.0
"""Seconds uvicorn waits for open connections after the drain, before it cancels their tasks."""


class DrainingServer(uvicorn.Server):
    """A uvicorn.Server whose first exit signal drains the app before exiting; a second exits at once."""

    def __init__(self, config: uvicorn.Config, state: ServerState) -> None:
        super().__init__(config)
        self.state = state
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain_task: asyncio.Task[None] | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """Signal handler (and the way tests ask for a graceful stop from another thread)."""
        if self._loop is None or self._loop.is_closed() or self.state.draining:
            super().handle_exit(sig, frame)
            return
        self.state.draining = True  # from here on, admission answers 503
        self._loop.call_soon_threadsafe(self._start_drain)

    def _start_drain(self) -> None:
        self._drain_task = asyncio.create_task(self._drain())

    async def _drain(self) -> None:
        engine, grace = self.state.engine, self.state.settings.shutdown_grace
        logger.info(
            "shutting down: %d request(s) in flight get %.0f s to finish", engine.num_in_flight, grace
        )
        if not await engine.wait_until_idle(grace):
            logger.warning("aborting %d request(s) still running after %.0f s", engine.num_in_flight, grace)
            engine.abort_all("the server is shutting down")
            await engine.wait_until_idle(CONNECTION_CLOSE_TIMEOUT)
        self.should_exit = True


def build_server(
    engine_config: EngineConfig,
    settings: ServerSettings,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    max_waiting: int = 512,
    step_timeout: float | None = None,
    grammar_limits: GrammarLimits | None = None,
    log_level: str = "info",
    tls: TlsFiles | None = None,
) -> DrainingServer:
    """Load the model and return a server ready to `run()` (blocking) or `serve()` (in an event loop)."""
    if tls is not None:
        tls.check()  # before minutes of loading
    engine = AsyncLLMEngine.built_on_its_thread(
        lambda: LLMEngine(engine_config),
        max_waiting=max_waiting,
        step_timeout=step_timeout,
        grammar_limits=grammar_limits,
    )
    return server_for(engine, settings, host=host, port=port, log_level=log_level, tls=tls)


def server_for(
    engine: AsyncLLMEngine,
    settings: ServerSettings,
    *,
    host: str,
    port: int,
    log_level: str = "info",
    tls: TlsFiles | None = None,
) -> DrainingServer:
    """A server for `engine`; HTTPS with `tls` (and client certificates when it names authorities)."""
    app = build_app(engine, settings)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        timeout_graceful_shutdown=int(CONNECTION_CLOSE_TIMEOUT),
        lifespan="on",
        ssl_certfile=None if tls is None else str(tls.certfile),
        ssl_keyfile=None if tls is None or tls.keyfile is None else str(tls.keyfile),
        ssl_ca_certs=None if tls is None or tls.ca_certs is None else str(tls.ca_certs),
        ssl_cert_reqs=ssl.CERT_NONE if tls is None else tls.cert_reqs,
        root_path=settings.root_path,
    )
    return DrainingServer(config, app.state.server)
