"""`switchyard fleet serve --replicas 2 MODEL --policy kv_aware` as a user runs it: one command starts the
gateway and two replicas; prompts sharing a prefix land where their KV is (learnt from the replicas' KV
events, counted by the gateway's own tokenizer); a SIGKILLed replica is restarted while the other serves;
SIGTERM drains and leaves no process behind."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import openai
import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT = 180.0
"""A guard against a gateway that never comes up on a busy machine, not a measurement."""
SERVE_FLAGS = ("--device", "cpu", "--dtype", "float32", "--max-model-len", "256")
SERVE_FLAGS += ("--kv-cache-memory", str(8 << 20))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for(condition: Callable[[], bool], what: str, timeout: float = STARTUP_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def replica_processes(gateway: subprocess.Popen[bytes]) -> list[psutil.Process]:
    return [
        child
        for child in psutil.Process(gateway.pid).children(recursive=True)
        if "serve" in child.cmdline() and child.status() != psutil.STATUS_ZOMBIE
    ]


def replicas_status(base: str) -> list[dict[str, object]]:
    return httpx.get(f"{base}/v1/fleet/replicas", timeout=10).json()["data"]


def metric(base: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in httpx.get(f"{base}/metrics", timeout=10).text.splitlines():
        if line.startswith("#") or line.split("{")[0].split(" ")[0] not in (name, name + "_total"):
            continue
        if all(f'{key}="{value}"' in line for key, value in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def start_fleet(model: Path, log_dir: Path, *flags: str) -> tuple[str, subprocess.Popen[bytes]]:
    """`switchyard fleet serve` on `model`, up and healthy; its output goes to log_dir/gateway.log."""
    port = free_port()
    command = [
        *(sys.executable, "-m", "switchyard.cli", "fleet", "serve", *flags, str(model)),
        *("--served-model-name", "tiny", "--port", str(port), "--health-interval", "0.5"),
        *("--shutdown-grace", "5", "--", *SERVE_FLAGS),
    ]
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    with (log_dir / "gateway.log").open("wb") as log:
        gateway = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": path}
        )
    base = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        assert gateway.poll() is None, "the gateway exited"
        try:
            return httpx.get(f"{base}/health", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for(healthy, "the gateway and its replicas")
    except BaseException:
        gateway.kill()
        gateway.wait()
        raise
    return base, gateway


@pytest.fixture(scope="module")
def fleet(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    model = Path(shutil.copytree(tiny_model_dir, tmp_path_factory.mktemp("fleet-e2e") / "tiny"))
    logs = tmp_path_factory.mktemp("fleet-e2e-log")
    base, gateway = start_fleet(model, logs, "--replicas", "2", "--policy", "kv_aware", "--threads", "1")
    try:
        yield base, gateway
    finally:
        if gateway.poll() is None:
            gateway.kill()
            gateway.wait()


def test_prefix_families_stick_to_the_replica_holding_their_kv(
    fleet: tuple[str, subprocess.Popen[bytes]],
) -> None:
    base, _ = fleet
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=60)
    families = {
        "a": "You are the billing assistant of a shop that sells red bicycles and blue helmets. " * 3,
        "b": "You are the travel planner for trains between small mountain towns in winter. " * 3,
    }
    cached = 0
    for round_ in range(4):
        for system in families.values():
            completion = client.chat.completions.create(
                model="tiny",
                messages=[
                    {"role": "system", "content": system},
                    {"role": "user", "content": f"question {round_}"},
                ],
                max_tokens=2,
            )
            assert completion.usage is not None and completion.usage.prompt_tokens_details is not None
            if round_:
                cached += completion.usage.prompt_tokens_details.cached_tokens or 0
        time.sleep(0.3)  # the replicas' events reach the gateway within a poll or two
    hits = metric(base, "switchyard:fleet_requests", pool="tiny", decision="cache_hit")
    assert hits >= 6, f"repeats of a family should be routed as cache hits, got {hits}"
    assert cached > 0
    predicted = metric(base, "switchyard:fleet_predicted_cached_tokens", pool="tiny")
    reported = metric(base, "switchyard:fleet_reported_cached_tokens", pool="tiny")
    assert predicted > 0 and reported > 0


def test_a_killed_replica_is_restarted_while_the_other_serves(
    fleet: tuple[str, subprocess.Popen[bytes]],
) -> None:
    base, gateway = fleet
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=60)
    victims = replica_processes(gateway)
    assert len(victims) == 2
    victim = victims[0]
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=10)
    for _ in range(4):  # every request is answered: the dead replica is skipped or retried around
        assert client.completions.create(model="tiny", prompt="Hello", max_tokens=2).choices
    wait_for(lambda: metric(base, "switchyard:fleet_replica_restarts") >= 1, "the restart to be counted")
    wait_for(
        lambda: [r["health"] for r in replicas_status(base)] == ["healthy", "healthy"],
        "the restarted replica to be healthy again",
    )
    assert victim.pid not in [process.pid for process in replica_processes(gateway)]
    assert client.completions.create(model="tiny", prompt="Hello again", max_tokens=2).choices


def test_sigterm_drains_and_stops_every_replica(fleet: tuple[str, subprocess.Popen[bytes]]) -> None:
    _, gateway = fleet
    replicas = replica_processes(gateway)
    gateway.send_signal(signal.SIGTERM)
    assert gateway.wait(timeout=60) == 0
    _, alive = psutil.wait_procs(replicas, timeout=30)
    assert not alive


def test_replicas_placed_on_ray_serve_and_drain(tiny_model_dir: Path, tmp_path: Path) -> None:
    """`--ray` without an address: the gateway starts a local Ray instance, places the replica as an actor in
    its placement group, routes to it, and on SIGTERM stops it and the Ray instance it started."""
    model = Path(shutil.copytree(tiny_model_dir, tmp_path / "tiny"))
    base, gateway = start_fleet(model, tmp_path, "--replicas", "1", "--ray", "--cpus-per-replica", "1")
    try:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=60)
        assert client.completions.create(model="tiny", prompt="Hello", max_tokens=2).choices
        gateway.send_signal(signal.SIGTERM)
        assert gateway.wait(timeout=90) == 0
    finally:
        if gateway.poll() is None:
            gateway.kill()
            gateway.wait()
    leftovers = [
        process
        for process in psutil.process_iter(["cmdline"])
        if str(model) in " ".join(process.info["cmdline"] or [])
    ]
    assert not leftovers
