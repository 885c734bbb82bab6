"""Regenerate the console's screenshots in docs/console/: every page at a desktop and a phone width.

    python docs/console/screenshots.py            (or: make screenshots)

It starts `switchyard serve switchyard-chat` (the bundled model) behind an API key, a fleet gateway in front of
it with online evaluation on, and the demo agent with its runs in a checkpoint store (one finished, one paused
for approval) behind the console's agent view; then Debian's Chromium, driven by Playwright, opens each page
while a little traffic runs. Needs the dev extra and `chromium`; takes about a minute.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from PIL import Image
from playwright.sync_api import Page, sync_playwright

from switchyard.agents.checkpoint import CheckpointStore
from switchyard.agents.console_host import ConsoleHost
from switchyard.agents.demo import DEMO_CALLER, DemoWorld, demo_agent
from switchyard.agents.limits import RunLimits
from switchyard.agents.model import OpenAIModelClient
from switchyard.agents.runner import Runner

HERE = Path(__file__).resolve().parent
KEY = "console-demo-key"
MODEL = "switchyard-chat"
SIZES = {"desktop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}
PROMPTS = ("What is 12 * 7?", "Convert 5 km to mi.", "What's the weather in Oslo?", "Hello! Who are you?")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start(command: list[str], health_url: str, logs: Path) -> subprocess.Popen[bytes]:
    log = logs.open("wb")
    process = subprocess.Popen([sys.executable, "-m", "switchyard.cli", *command], stdout=log, stderr=log)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"`switchyard {' '.join(command)}` exited; see {logs}")
        try:
            if httpx.get(health_url, timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    process.terminate()
    raise RuntimeError(f"`switchyard {' '.join(command)}` did not become healthy; see {logs}")


class Traffic:
    """Chat requests in background threads while a dashboard is being shot."""

    def __init__(self, base_url: str, threads: int = 3) -> None:
        self.stop = threading.Event()
        self.workers = [
            threading.Thread(target=self._run, args=(base_url, i), daemon=True) for i in range(threads)
        ]

    def _run(self, base_url: str, index: int) -> None:
        with httpx.Client(base_url=base_url, timeout=120, headers={"Authorization": f"Bearer {KEY}"}) as http:
            turn = 0
            while not self.stop.is_set():
                prompt = PROMPTS[(index + turn) % len(PROMPTS)]
                body = {"model": MODEL, "messages": [{"role": "user", "content": prompt}], "max_tokens": 64}
                http.post("/v1/chat/completions", json=body)
                turn += 1

    def __enter__(self) -> Traffic:
        for worker in self.workers:
            worker.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for worker in self.workers:
            worker.join()


class AgentHost:
    """The demo agent's runs (one finished, one waiting for approval) behind the console's agent view, on an
    event loop of its own."""

    def __init__(self, server_url: str, folder: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.store = CheckpointStore(folder / "runs.db")
        world = DemoWorld()
        client = OpenAIModelClient(base_url=f"{server_url}/v1", api_key=KEY)
        self.agent = demo_agent(client, MODEL, world)
        self.runner = Runner(store=self.store, limits=RunLimits(max_turns=4, timeout=120))
        self.url = self._call(self._start())

    def _call(self, work: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(timeout=300)

    async def _start(self) -> str:
        self.host = await ConsoleHost.start(self.runner, 0, open("/dev/null", "w"))  # noqa: SIM115
        for task in ("What is 12 * 7?", "Send a message to Maria saying the report is ready."):
            await self.runner.run(self.agent, task, caller=DEMO_CALLER)
        port = self.host.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def close(self) -> None:
        self._call(self.host.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.store.close()


def open_view(page: Page, url: str, view: str) -> None:
    page.goto(f"{url}/ui/#{view}")
    page.wait_for_function("window.switchyardConsole !== undefined")
    if page.is_visible("#key-dialog"):  # the agent host here has no key
        page.fill("#key-input", KEY)
        page.press("#key-input", "Enter")
        page.wait_for_selector("#key-dialog", state="hidden")
    page.wait_for_selector(f"#view-{view}", state="visible")


def shoot(page: Page, name: str) -> None:
    """A screenshot of the viewport, reduced to a palette: the pages are flat colours, so it stays small."""
    path = HERE / f"{name}.png"
    page.screenshot(path=str(path))
    with Image.open(path) as image:
        image.convert("RGB").quantize(colors=128).save(path, optimize=True)
    print(f"wrote {path.relative_to(HERE.parents[1])} ({path.stat().st_size // 1024} KiB)")


def playground(page: Page, url: str, size: str) -> None:
    open_view(page, url, "playground")
    page.wait_for_selector(f"#pg-model option[value='{MODEL}']", state="attached")
    page.fill("#pg-system", "You are a helpful assistant.")
    for prompt in ("What is 12 * 7?", "Convert 5 km to mi."):
        page.fill("#pg-input", prompt)
        page.press("#pg-input", "Enter")
        page.wait_for_selector("#pg-send", state="visible")
        page.wait_for_selector("#pg-log li.assistant:not([aria-busy]) >> nth=-1")
    shoot(page, f"playground-{size}")


def dashboard(page: Page, url: str, size: str) -> None:
    open_view(page, url, "dashboard")
    with Traffic(url):
        page.wait_for_timeout(8000)
        shoot(page, f"dashboard-{size}")


def fleet(page: Page, url: str, size: str) -> None:
    with Traffic(url, threads=2):
        open_view(page, url, "fleet")
        page.wait_for_selector("#fl-eval tbody tr")
        page.wait_for_timeout(4000)
        shoot(page, f"fleet-{size}")


def agents(page: Page, url: str, size: str) -> None:
    open_view(page, url, "agents")
    page.click("#ag-runs tbody tr:has-text('needs_approval')")
    page.wait_for_selector(".approval")
    shoot(page, f"agents-{size}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chromium", default=shutil.which("chromium"), help="the Chromium to drive")
    args = parser.parse_args()
    if not args.chromium:
        print("chromium is not installed (apt-get install -y chromium)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="console-shots-"))
    server_port, gateway_port = free_port(), free_port()
    server_url, gateway_url = f"http://127.0.0.1:{server_port}", f"http://127.0.0.1:{gateway_port}"
    processes = []
    host = None
    try:
        serve = ["serve", MODEL, "--port", str(server_port), "--api-key", KEY]
        processes.append(start(serve, f"{server_url}/health", work / "serve.log"))
        gateway = ["fleet", "serve", "--worker", f"{server_url}@{MODEL}", "--worker-api-key", KEY, "--api-key", KEY,
                   "--port", str(gateway_port), "--eval-sample", "1.0", "--eval-log", str(work / "eval.db")]  # fmt: skip
        processes.append(start(gateway, f"{gateway_url}/health", work / "gateway.log"))
        host = AgentHost(server_url, work)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=args.chromium, headless=True)
            for size, viewport in SIZES.items():
                for shot, url in ((playground, server_url), (dashboard, server_url), (fleet, gateway_url),
                                  (agents, host.url)):  # fmt: skip
                    context = browser.new_context(viewport=viewport, is_mobile=size == "phone")
                    shot(context.new_page(), url, size)
                    context.close()
            browser.close()
    finally:
        if host is not None:
            host.close()
        for process in processes:
            process.terminate()
            process.wait(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
