"""One worker of a job: a Ray actor holding one bundle of the job's placement group, running the job's command.

The command runs as a subprocess in its own session, so the checkpoint signal reaches the whole process group
(a launcher script and the trainer it starts), and it dies with the actor (a killed actor or a lost node
leaves nothing behind). Its CUDA_VISIBLE_DEVICES are the GPU indices the policy chose: the platform, not Ray,
knows which GPUs are healthy, so it names them; Ray's GPU resource only keeps the count honest.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import ray

from switchyard.fleet.replicas.ports import free_port, http_url
from switchyard.fleet.replicas.serve_command import die_with_parent

PORT_PLACEHOLDER = "{port}"
"""A command argument holding it gets a free port of the worker's node (a serving job's listening port)."""
CHECKPOINT_MARKER_ENV = "SWITCHYARD_CHECKPOINT_MARKER"
"""A file the job touches each time it has saved a checkpoint: its time tells the policy how much work a
preemption would lose (the victim rule prefers jobs that checkpointed recently)."""
HOST_PLACEHOLDER = "{host}"
"""Replaced by the worker's node address (where a serving job listens so the gateway can reach it)."""


@dataclass(frozen=True)
class WorkerStart:
    """What one worker runs, and who it is within its job."""

    job_id: str
    attempt: int
    index: int
    workers: int
    command: tuple[str, ...]
    gpus: tuple[int, ...]
    environment: Mapping[str, str]


@dataclass(frozen=True)
class WorkerInfo:
    node_id: str
    pid: int
    endpoint: str | None
    """`http://HOST:PORT` when the command asked for a port, else None."""


class JobWorker:
    """The actor; created on the actor's main thread, which lives as long as the actor."""

    def __init__(self, start: WorkerStart) -> None:
        node_ip = ray.util.get_node_ip_address()
        port = free_port(node_ip) if any(PORT_PLACEHOLDER in part for part in start.command) else None
        command = [
            part.replace(PORT_PLACEHOLDER, str(port)).replace(HOST_PLACEHOLDER, node_ip)
            for part in start.command
        ]
        self._marker = checkpoint_marker(start)
        self._process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            env=worker_environment(start, port, self._marker),
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        self._info = WorkerInfo(
            node_id=ray.get_runtime_context().get_node_id(),
            pid=self._process.pid,
            endpoint=None if port is None else http_url(node_ip, port),
        )

    def info(self) -> WorkerInfo:
        return self._info

    def checkpointed_at(self) -> float | None:
        """When the job last touched its checkpoint marker (wall-clock seconds), None if it never did."""
        try:
            return self._marker.stat().st_mtime
        except FileNotFoundError:
            return None

    def wait(self) -> int:
        """Block until the command exits; its return code (negative: the signal that ended it)."""
        return self._process.wait()

    def stop(self, signal_name: str, grace_s: float) -> int:
        """Send the checkpoint signal to the command's process group, give it `grace_s` to exit, then kill it."""
        _signal_group(self._process, signal.Signals[signal_name])
        try:
            return self._process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            _signal_group(self._process, signal.SIGKILL)
            return self._process.wait()


def worker_environment(start: WorkerStart, port: int | None, marker: Path) -> dict[str, str]:
    """The worker's environment: this process's, the job's extras, its GPUs and who it is."""
    environment = dict(os.environ)
    environment.update(start.environment)
    environment.update(
        {
            "CUDA_VISIBLE_DEVICES": ",".join(str(gpu) for gpu in start.gpus),
            "SWITCHYARD_JOB_ID": start.job_id,
            "SWITCHYARD_JOB_ATTEMPT": str(start.attempt),
            "SWITCHYARD_WORKER_INDEX": str(start.index),
            "SWITCHYARD_WORKERS": str(start.workers),
        }
    )
    if port is not None:
        environment["SWITCHYARD_PORT"] = str(port)
    environment[CHECKPOINT_MARKER_ENV] = str(marker)
    return environment


def checkpoint_marker(start: WorkerStart) -> Path:
    """The worker's marker file, on its node's temp disk; a new run starts without one."""
    folder = Path(tempfile.gettempdir()) / "switchyard-jobs"
    folder.mkdir(parents=True, exist_ok=True)
    marker = folder / f"{start.job_id}-{start.attempt}-{start.index}.checkpointed"
    marker.unlink(missing_ok=True)
    return marker


def _signal_group(process: subprocess.Popen[bytes], sent: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sent)


JobWorkerActor = ray.remote(JobWorker)
