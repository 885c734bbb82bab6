"""`switchyard fleet serve` as an operator runs it: a process in front of a worker, drained by SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys

import httpx
import openai
from fleet_harness import Replicas, free_port, replica_env, wait_for


def test_sigterm_drains_then_exits(replicas: Replicas) -> None:
    """After SIGTERM new requests and /health get 503, the stream in flight still finishes, then the process
    exits 0. The worker is paused meanwhile so the stream is surely in flight when the signal comes."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "switchyard.cli", "fleet", "serve", "--worker", f"{replicas.a.url}@tiny"]
    command += ["--port", str(port), "--health-interval", "60", "--shutdown-grace", "120"]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=replica_env()
    )
    try:

        def healthy() -> bool:
            assert process.poll() is None, process.communicate()
            try:
                return httpx.get(f"{base}/health", timeout=5).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(healthy, 120, "the gateway healthy")
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=120)
        stream = client.completions.create(
            model="tiny", prompt="Once", max_tokens=200, stream=True, extra_body={"ignore_eos": True}
        )
        replicas.a.pause()
        process.send_signal(signal.SIGTERM)
        wait_for(lambda: httpx.get(f"{base}/health", timeout=5).status_code == 503, 60, "/health 503")
        refused = httpx.post(f"{base}/v1/completions", json={"model": "tiny", "prompt": "x"}, timeout=30)
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "shutting_down"
        replicas.a.resume()
        choices = [choice for chunk in stream for choice in chunk.choices]
        assert choices[-1].finish_reason == "length"
        _, stderr = process.communicate(timeout=120)
        assert process.returncode == 0, stderr
        assert "Traceback" not in stderr
    finally:
        replicas.a.resume()
        if process.poll() is None:
            process.kill()
            process.communicate()
