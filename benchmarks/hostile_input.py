"""Two of issue 55's findings, timed on `switchyard serve` with the bundled model (`--max-waiting 8`):

1. a 10 MB prompt (under the 16 MiB body limit) and, half a second later, a 4-token chat beside it: how long
   the prompt takes to be refused and how long the small chat waits;
2. 100 simultaneous completions: how many are answered 429 although the batch has room for all of them.

`--source DIR` runs the server from another checkout of the project (e.g. one at the commit before the fixes),
for a before/after comparison in the same session.
Usage: python benchmarks/hostile_input.py [--source DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx


def start(source: Path) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "switchyard.cli", "serve", "switchyard-chat", "--port", str(port)]
    command += ["--max-waiting", "8", "--served-model-name", "m"]
    environment = {**os.environ, "PYTHONPATH": str(source)}
    process = subprocess.Popen(
        command, cwd=source, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                return process, base
        except httpx.TransportError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError("the server did not come up")


async def measure(base: str) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=300) as client:

        async def timed(path: str, body: dict[str, object], delay: float = 0.0) -> tuple[int, float]:
            await asyncio.sleep(delay)
            start = time.monotonic()
            response = await client.post(path, json=body)
            return response.status_code, time.monotonic() - start

        huge = {"model": "m", "prompt": "word " * 2_000_000, "max_tokens": 1}
        small = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        (big_status, big_s), (small_status, small_s) = await asyncio.gather(
            timed("/v1/completions", huge), timed("/v1/chat/completions", small, delay=0.5)
        )
        print(
            f"10 MB prompt: {big_status} after {big_s:.2f} s; 4-token chat beside it: {small_status} in {small_s:.2f} s"
        )
        burst = [
            client.post("/v1/completions", json={"model": "m", "prompt": f"request {i}", "max_tokens": 4})
            for i in range(100)
        ]
        statuses = Counter(response.status_code for response in await asyncio.gather(*burst))
        print(f"100 simultaneous completions, --max-waiting 8: {dict(sorted(statuses.items()))}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--source", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args()
    process, base = start(args.source.resolve())
    try:
        asyncio.run(measure(base))
    finally:
        process.terminate()
        process.wait(timeout=60)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
