"""`mount_console(app, ...)`: the console's pages at /ui and its live data under /v1/console.

The pages themselves hold no data, so /ui is public like the API docs; everything they show comes from /v1
routes, which the host's API-key check already guards. The host says which views it can feed: the server has
the playground and the engine dashboard, the gateway adds the fleet, an agent host shows agent runs.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles

from switchyard.console.snapshot import LiveWindow

STATIC_DIR = resources.files("switchyard.console") / "static"

VIEWS = ("playground", "dashboard", "fleet", "agents")
"""Every view the pages know, in the order of the navigation bar."""

MetricsSource = Callable[[], bytes]
"""The host's Prometheus text, as its /metrics route renders it."""
ExtraSource = Callable[[], Awaitable[dict[str, Any]]]
"""More live data for a view (the gateway's replicas), merged into each snapshot under `extra`."""
Draining = Callable[[], bool]
"""True once the host is shutting down: the live streams then end, so they hold no shutdown up."""
StreamGuard = Callable[[Request], None]
"""Raises the host's own error when a caller whose key passed may still not watch the live data (a tenant's
key on a gateway, which would see every tenant's usage)."""


@dataclass(frozen=True)
class ConsoleConfig:
    title: str
    """Shown in the header: which kind of host this is ("Switchyard", "Switchyard fleet")."""
    views: tuple[str, ...]
    """The views this host can feed, from VIEWS."""
    interval_s: float = 1.0
    """Seconds between live snapshots."""
    window_s: float = 10.0
    """Seconds of history behind the latency quantiles."""
    key_required: bool = False
    """Whether the host's /v1 routes want an API key: the page then asks for one before it calls them."""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.views) - set(VIEWS))
        if unknown:
            raise ValueError(f"unknown console views {unknown}; known: {list(VIEWS)}")
        if self.interval_s <= 0 or self.window_s <= 0:
            raise ValueError("interval_s and window_s must be > 0")


def mount_console(
    app: FastAPI,
    config: ConsoleConfig,
    metrics: MetricsSource | None = None,
    extra: ExtraSource | None = None,
    guard: StreamGuard | None = None,
    draining: Draining | None = None,
) -> None:
    """Serve the pages at /ui, the host's views at /ui/config.json and (with `metrics`) a snapshot each
    `interval_s` as server-sent events at /v1/console/stream."""

    @app.get("/ui", include_in_schema=False)
    async def ui_root() -> Response:
        return RedirectResponse("ui/")  # relative: stays right behind a proxy's root path

    @app.get("/ui/config.json", include_in_schema=False)
    async def console_config() -> Response:
        """Public, like the pages: which views to show and whether to ask for a key (a 401 would say as
        much), so a page opened without a key asks for one instead of failing its first call."""
        return JSONResponse(
            {
                "title": config.title,
                "views": list(config.views),
                "live": metrics is not None,
                "key_required": config.key_required,
            }
        )

    @app.get("/v1/console/ping", include_in_schema=False)
    async def console_ping() -> Response:
        """Under /v1, so behind the host's key check: how the page tries a key before keeping it."""
        return JSONResponse({"ok": True})

    if metrics is not None:

        @app.get("/v1/console/stream", include_in_schema=False)
        async def console_stream(request: Request) -> Response:
            if guard is not None:
                guard(request)
            return StreamingResponse(
                _snapshots(config, metrics, extra, draining or _never),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
            )

    with resources.as_file(STATIC_DIR) as folder:
        app.mount("/ui", StaticFiles(directory=folder, html=True), name="console")


def _never() -> bool:
    return False


async def _snapshots(
    config: ConsoleConfig, metrics: MetricsSource, extra: ExtraSource | None, draining: Draining
) -> AsyncIterator[str]:
    """One `data:` event per interval until the client goes (Starlette then cancels this generator) or the
    host drains. The scrape runs off the event loop: a collector may read a file (the gateway's verdicts)."""
    window = LiveWindow(config.window_s)
    while not draining():
        text = await asyncio.to_thread(metrics)
        snapshot = window.snapshot(text.decode())
        if extra is not None:
            snapshot["extra"] = await extra()
        yield f"data: {json.dumps(snapshot, separators=(',', ':'))}\n\n"
        await asyncio.sleep(config.interval_s)
