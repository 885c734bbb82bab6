"""`switchyard serve` as a user runs it: a real process, a real SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from switchyard.cli import API_KEY_ENV, main


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_missing_model_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", str(tmp_path / "nowhere")]) == 2
    assert "nowhere" in capsys.readouterr().err


def test_a_blank_api_key_is_refused(tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", str(tiny_model_dir), "--api-key", " "]) == 2
    assert "api_key must not be empty" in capsys.readouterr().err


def test_serve_answers_then_drains_on_sigterm(tiny_model_dir: Path) -> None:
    """Also: the API key comes from the environment, kept out of the process list."""
    port = free_port()
    command = [
        *(sys.executable, "-m", "switchyard.cli", "serve", str(tiny_model_dir), "--port", str(port)),
        *("--served-model-name", "tiny", "other-name", "--device", "cpu", "--dtype", "float32"),
        *("--max-model-len", "256", "--kv-cache-memory", str(8 << 20), "--shutdown-grace", "5"),
    ]
    environment = {**os.environ, API_KEY_ENV: "from-the-environment"}
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.stdout.read() if process.stdout else ""
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "server did not come up"
            time.sleep(0.1)
        stranger = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="guess", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            stranger.models.list()
        client = stranger.with_options(api_key="from-the-environment")
        assert [m.id for m in client.models.list().data] == ["tiny", "other-name"]
        answer = client.completions.create(model="other-name", prompt="Hello", max_tokens=3)
        assert answer.model == "other-name" and answer.usage is not None
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
