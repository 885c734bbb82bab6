"""How a launcher runs one replica: the `switchyard serve` command line, its environment, and the tie that
makes the server die with the process that launched it (a local gateway or a Ray actor)."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
from collections.abc import Callable, Sequence

from switchyard.fleet.replicas.base import ReplicaSpec

OWNED_FLAGS = ("--host", "--port", "--served-model-name")
"""`switchyard serve` flags the launcher sets itself: where each replica listens and the pool's name."""
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
"""What sets a server's torch thread count: torch reads them when it starts (serve has no flag for it)."""
_PR_SET_PDEATHSIG = 1


def check_serve_args(spec: ReplicaSpec) -> None:
    """Refuse serve arguments that would fight the launcher (it picks every replica's address and name)."""
    for flag in OWNED_FLAGS:
        if any(arg == flag or arg.startswith(f"{flag}=") for arg in spec.serve_args):
            raise ValueError(
                f"{flag} is set by the launcher for each replica; leave it out of the serve args"
            )
    if spec.count < 1:
        raise ValueError(f"a pool needs at least one replica, not {spec.count}")
    if spec.threads is not None and spec.threads < 1:
        raise ValueError(f"threads per replica must be at least 1, not {spec.threads}")


def serve_command(spec: ReplicaSpec, host: str, port: int) -> list[str]:
    """The argv of one replica: this Python running `switchyard serve` with the pool's model and name."""
    return [
        *(sys.executable, "-m", "switchyard.cli", "serve", spec.model),
        *("--host", host, "--port", str(port), "--served-model-name", spec.served_name),
        *spec.serve_args,
    ]


def server_environment(threads: int, gpu_ids: Sequence[str] | None = None) -> dict[str, str]:
    """This process's environment with the server's thread count and, when it was given GPUs, only those."""
    environment = dict(os.environ)
    environment.update(dict.fromkeys(THREAD_VARIABLES, str(threads)))
    if gpu_ids:
        environment["CUDA_VISIBLE_DEVICES"] = ",".join(gpu_ids)
    return environment


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity where the platform tells it, else all of them)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    prctl: Callable[..., int] = libc.prctl
    return prctl


_prctl = _load_prctl()  # loaded before any fork: the child only calls it


def die_with_parent() -> None:
    """`preexec_fn` for a server: on Linux the kernel sends it SIGTERM (a drain) when the thread that
    launched it exits, so a gateway or an actor that is killed outright leaves no server running behind it.

    Launch servers from a thread that lives as long as they should (the event loop's, the actor's main
    thread). Elsewhere this does nothing and `stop()` is the only way servers end.
    """
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
