"""A short soak (switchyard.bench.soak) and a kill -9 mid-stream, against real servers on loopback.

The soak runs streaming clients that read to the end, drop the stream, give up before the answer, and send
hostile input, all at once, twice; afterwards no KV block is in use and the second round grew the process's
memory by a bounded amount (the first warms caches and allocator pools). benchmarks/soak.py is the long run.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest
from harness import MODEL, start_server
from test_cli import free_port

from switchyard.bench.soak import SoakConfig, run_soak

ROUNDS = 3
LAST_ROUND_GROWTH_LIMIT = 256 << 20
"""Bytes the last round may add to the process's RSS. Native caches (the CPU kernels' per-shape primitives)
fill over the first rounds and then level off (benchmarks/soak.py plots it); a per-request leak keeps growing,
and one of the issue's size (1.3 GB from a few huge prompts) is far past this."""
TOTAL_GROWTH_LIMIT = 1 << 30


def test_a_short_soak_leaves_nothing_behind(tiny_model_dir: Path) -> None:
    server = start_server(tiny_model_dir, max_waiting=64)
    try:
        process = psutil.Process()
        rss = [process.memory_info().rss]
        for round_index in range(ROUNDS):
            config = SoakConfig(
                base_url=server.base_url,
                model=MODEL,
                clients=24,
                duration=5.0,
                max_tokens=24,
                seed=round_index,
            )
            result = asyncio.run(run_soak(config))
            assert result.num_server_errors == 0, result.server_errors
            assert result.num_bad_accepted == 0, result.outcomes
            assert server.wait_for_free_blocks(timeout=30) == 0
            assert server.engine.num_in_flight == 0
            gc.collect()
            rss.append(process.memory_info().rss)
            kinds = {key.split(":")[0] for key in result.outcomes}
            assert kinds == {"stream", "disconnect", "abandon", "complete", "bad"}, result.outcomes
            assert result.outcomes["disconnect:dropped"] > 0 and result.outcomes["stream:ok"] > 0
        growth = [(after - before) >> 20 for before, after in itertools.pairwise(rss)]
        assert rss[-1] - rss[-2] < LAST_ROUND_GROWTH_LIMIT, f"RSS growth per round (MiB): {growth}"
        assert rss[-1] - rss[0] < TOTAL_GROWTH_LIMIT, f"RSS growth per round (MiB): {growth}"
        assert httpx.get(f"{server.base_url}/health").status_code == 200
    finally:
        server.stop()


def serve(model_dir: Path, port: int) -> subprocess.Popen[str]:
    command = [
        *(sys.executable, "-m", "switchyard.cli", "serve", str(model_dir), "--port", str(port)),
        *("--served-model-name", MODEL, "--device", "cpu", "--dtype", "float32"),
        *("--max-model-len", "256", "--kv-cache-memory", str(8 << 20)),
    ]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)


def wait_healthy(process: subprocess.Popen[str], port: int) -> None:
    deadline = time.monotonic() + 90
    while True:
        assert process.poll() is None, "the server exited"
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "the server did not come up"
        time.sleep(0.1)


def test_kill_9_mid_stream_then_a_restart_serves_again(tiny_model_dir: Path) -> None:
    port = free_port()
    body = {
        "model": MODEL,
        "prompt": "Once upon a time",
        "max_tokens": 200,
        "stream": True,
        "ignore_eos": True,
    }
    process = serve(tiny_model_dir, port)
    try:
        wait_healthy(process, port)
        http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
        # The stream breaks off: the client is told, not left hanging.
        with (
            http,
            pytest.raises(httpx.TransportError),
            http.stream("POST", "/v1/completions", json=body) as response,
        ):
            assert response.status_code == 200
            for index, _ in enumerate(response.iter_lines()):
                if index == 2:
                    os.kill(process.pid, signal.SIGKILL)
        assert process.wait(timeout=10) == -signal.SIGKILL
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    process = serve(tiny_model_dir, port)  # the same port: nothing of the killed process holds it
    try:
        wait_healthy(process, port)
        reply = httpx.post(
            f"http://127.0.0.1:{port}/v1/completions",
            json={"model": MODEL, "prompt": "Hello", "max_tokens": 3},
            timeout=30,
        )
        assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 3
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
