"""The console's browser tests: Debian's Chromium driven by Playwright, one browser per module, one small
random-model server per module. They skip, saying why, where Playwright or Chromium is missing (`make test`
installs Chromium as root; see docs/console.md)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from console_harness import API_KEY, ConsolePage, chromium_path
from server.harness import start_server


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

    running = start_server(tiny_model_dir, api_key=API_KEY, engine_overrides={"kv_cache_memory": 2 << 20})
    yield running
    running.stop()


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
