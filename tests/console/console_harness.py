"""What the console's browser tests share: the API key, where Chromium is, a page that collects its console
errors, and an ASGI app served on loopback."""

from __future__ import annotations

import shutil
import threading
import time
from typing import Any

import uvicorn

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
API_KEY = "console-test-key"


def chromium_path() -> str | None:
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


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


class ServedApp:
    """An ASGI app served by uvicorn on a loopback port in a background thread."""

    def __init__(self, app: Any) -> None:
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
