"""Real replicas and a real gateway on loopback for the gateway tests.

Replicas are `switchyard serve` processes on tiny models (one torch thread each); the gateway runs in-process
under uvicorn in a background thread (port 0), so a test can read its runtime's state as well as its HTTP.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai

from switchyard.fleet.config import BreakerConfig, FleetConfig, PoolConfig
from switchyard.fleet.launch import DrainingGateway, build_gateway_server
from switchyard.fleet.runtime import FleetRuntime

ROOT = Path(__file__).resolve().parents[3]
STARTUP_TIMEOUT = 180.0
"""A guard against a replica that never comes up (the machine may be busy), not a measurement."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def replica_env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@dataclass
class ReplicaProcess:
    """A `switchyard serve` process that a test may kill, pause and start again on the same port."""

    model_dir: Path
    names: tuple[str, ...]
    log: Path
    extra_args: tuple[str, ...] = ()
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        command = [sys.executable, "-m", "switchyard.cli", "serve", str(self.model_dir)]
        command += ["--host", "127.0.0.1", "--port", str(self.port), "--served-model-name", *self.names]
        command += ["--device", "cpu", "--dtype", "float32", "--max-model-len", "256"]
        command += ["--kv-cache-memory", str(8 << 20), "--shutdown-grace", "2", *self.extra_args]
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=replica_env())

    def wait_healthy(self, timeout: float = STARTUP_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"replica exited ({self.process.returncode}); see {self.log}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"replica on {self.url} did not become healthy; see {self.log}")

    def kill(self) -> None:
        """SIGKILL: no drain, connections reset, as in a crash."""
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=30)

    def pause(self) -> None:
        """SIGSTOP: the process holds its connections but answers nothing (a hung replica)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.resume()
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)


@dataclass
class Replicas:
    """The package's shared replicas (see conftest.py)."""

    a: ReplicaProcess
    b: ReplicaProcess
    narrow: ReplicaProcess
    qwen: ReplicaProcess

    def all(self) -> list[ReplicaProcess]:
        return [self.a, self.b, self.narrow, self.qwen]


def start_replicas(replicas: Sequence[ReplicaProcess]) -> None:
    """Start them all, then wait for each (they load in parallel)."""
    for replica in replicas:
        replica.start()
    for replica in replicas:
        replica.wait_healthy()


@dataclass
class RunningGateway:
    server: DrainingGateway
    thread: threading.Thread
    base_url: str

    @property
    def runtime(self) -> FleetRuntime:
        return self.server.runtime

    def client(self, **kwargs: Any) -> openai.OpenAI:
        kwargs.setdefault("api_key", "unused")
        return openai.OpenAI(base_url=f"{self.base_url}/v1", max_retries=0, timeout=120, **kwargs)

    def http(self, **kwargs: Any) -> httpx.Client:
        kwargs.setdefault("timeout", 120)
        return httpx.Client(base_url=self.base_url, **kwargs)

    def replicas(self) -> dict[str, dict[str, Any]]:
        """GET /v1/fleet/replicas, by replica name."""
        rows = httpx.get(f"{self.base_url}/v1/fleet/replicas", timeout=30).json()["data"]
        return {row["name"]: row for row in rows}

    def metrics(self) -> str:
        return httpx.get(f"{self.base_url}/metrics", timeout=30).text

    def wait_all_healthy(self, timeout: float = STARTUP_TIMEOUT) -> None:
        wait_for(
            lambda: all(row["health"] == "healthy" for row in self.replicas().values()),
            timeout,
            "every replica healthy",
        )

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=60)


def gateway_config(pools: dict[str, Sequence[str]], **settings: Any) -> FleetConfig:
    """A config for tests: fast health checks and short breaker backoffs, pool settings in `settings`."""
    pool_keys = {"policy", "max_in_flight_per_replica", "max_queue"}
    pool_settings = {k: settings.pop(k) for k in list(settings) if k in pool_keys}
    settings.setdefault("health_interval", 0.2)
    settings.setdefault("breaker", BreakerConfig(failure_threshold=3, base_backoff=0.2, max_backoff=1.0))
    return FleetConfig(
        pools=tuple(
            PoolConfig(model=name, workers=tuple(urls), **pool_settings) for name, urls in pools.items()
        ),
        host="127.0.0.1",
        port=0,
        **settings,
    )


def start_gateway(config: FleetConfig, **options: Any) -> RunningGateway:
    """`options`: build_gateway_server's (admission hooks, a fake clock for the limits)."""
    server = build_gateway_server(config, **options)
    thread = threading.Thread(target=server.run, name="fleet-gateway", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("test gateway did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    return RunningGateway(server, thread, f"http://127.0.0.1:{port}")


def wait_for(condition: Callable[[], bool], timeout: float = 60.0, what: str = "the condition") -> None:
    """Poll until `condition()`; the timeout guards against a hang and is not what the test checks."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def metric(text: str, name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include `labels` (0 when there are none)."""
    total = 0.0
    for line in text.splitlines():
        match = re.fullmatch(r"([^{\s]+)(?:\{(.*)\})? (\S+)", line)
        if not match or match.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2) or ""))
        if all(found.get(key) == value for key, value in labels.items()):
            total += float(match.group(3))
    return total
