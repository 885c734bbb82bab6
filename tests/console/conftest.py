"""The console's browser tests: Debian's Chromium driven by Playwright, one browser per module, one small
random-model server per module. They skip, saying why, where Playwright or Chromium is missing (`make test`
installs Chromium as root; see docs/console.md)."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "server"))  # the server tests' harness

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
API_KEY = "console-test-key"


def chromium_path() -> str | None:
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    playwright_api = pytest.importorskip(
        "playwright.sync_api", reason="Playwright is not installed (pip install -e '.[dev]')"
    )
    executable = chromium_path()
    if executable is None:
        pytest.skip("Chromium is not installed: `apt-get install -y chromium` (make test does it as root)")
    with playwright_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, headless=True)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def keyed_server(tiny_model_dir: Path) -> Iterator[Any]:
    """One tiny random model behind API_KEY; a small KV cache, so one request shows on the gauge."""
    from harness import start_server

    running = start_server(tiny_model_dir, api_key=API_KEY, engine_overrides={"kv_cache_memory": 2 << 20})
    yield running
    running.stop()


class ConsolePage:
    """A page of the console with its console errors and failed requests collected."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.errors: list[str] = []
        page.on(
            "console", lambda message: self.errors.append(message.text) if message.type == "error" else None
        )
        page.on("pageerror", lambda error: self.errors.append(f"uncaught: {error}"))

    def sign_in(self, key: str) -> None:
        self.page.fill("#key-input", key)
        self.page.press("#key-input", "Enter")


@pytest.fixture
def new_page(browser: Any) -> Iterator[Any]:
    """Opens pages in a fresh context (its own sessionStorage) at a viewport size; closes them after."""
    contexts: list[Any] = []

    def open_page(width: int = 1280, height: int = 800, *, mobile: bool = False) -> ConsolePage:
        context = browser.new_context(
            viewport={"width": width, "height": height}, is_mobile=mobile, has_touch=mobile
        )
        contexts.append(context)
        return ConsolePage(context.new_page())

    yield open_page
    for context in contexts:
        context.close()


class ServedApp:
    """An ASGI app served by uvicorn on a loopback port in a background thread."""

    def __init__(self, app: Any) -> None:
        import threading
        import time

        import uvicorn

        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, name="console-app", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the app did not start")
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
