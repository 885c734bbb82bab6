"""The ranks of a tensor-parallel engine: rank 0 is the engine's own process (scheduler, sampler, API); ranks
1..N-1 are worker processes started here, each holding its shard of the model and its slice of the KV cache.

Rank 0 tells the workers what to do with one broadcast per call (`command`): make a KV cache, run a forward pass
on these inputs, compute logits of these rows, copy these blocks, stop. The model's collectives (all-reduce after
attention and MLP, the vocabulary's gather) then run on every rank in the same order. torch.distributed keeps
one default process group per process, so a process holds at most one tensor-parallel engine at a time.
"""

from __future__ import annotations

import logging
import socket
import weakref
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

logger = logging.getLogger(__name__)

JOIN_TIMEOUT_S = 30.0


class TensorParallelError(RuntimeError):
    """The ranks could not be started, or one of them failed."""


@dataclass(frozen=True)
class RankModelSpec:
    """What every rank needs to load its shard the same way rank 0 does."""

    folder: str
    dtype: torch.dtype
    device: str
    max_model_len: int
    quantization: str | None
    pack: bool
    world_size: int


def backend_for(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def rank_device(device: torch.device, rank: int) -> torch.device:
    """Rank r computes on cuda:r (counted from the engine's device); on CPU every rank shares the host."""
    if device.type != "cuda":
        return device
    return torch.device("cuda", (device.index or 0) + rank)


class TensorParallelGroup:
    """Rank 0's handle on the group: start the workers, send them commands, stop them."""

    def __init__(self, spec: RankModelSpec) -> None:
        if dist.is_initialized():
            raise TensorParallelError(
                "this process already holds a tensor-parallel engine (torch.distributed's one default group): "
                "close it first"
            )
        self.spec = spec
        self.world_size = spec.world_size
        init_method = f"tcp://127.0.0.1:{_free_port()}"
        context = mp.get_context("spawn")
        from switchyard.engine.parallel.worker import worker_main

        self._processes = [
            context.Process(
                target=worker_main,
                args=(rank, init_method, spec),
                name=f"switchyard-tp-rank{rank}",
                daemon=True,
            )
            for rank in range(1, spec.world_size)
        ]
        for process in self._processes:
            process.start()
        device = torch.device(spec.device)
        try:
            dist.init_process_group(
                backend_for(device), init_method=init_method, rank=0, world_size=spec.world_size
            )
        except Exception as exc:
            _terminate(self._processes)
            raise TensorParallelError(f"the {spec.world_size} ranks could not form a group: {exc}") from exc
        self._finalizer = weakref.finalize(self, _terminate, self._processes)
        self.closed = False
        logger.info("tensor parallel: %d ranks (%s)", spec.world_size, backend_for(device))

    def command(self, *message: Any) -> None:
        """Broadcast one command to the workers (they run it as rank 0 runs the same call)."""
        payload = [message]
        dist.broadcast_object_list(payload, src=0)

    def close(self) -> None:
        """Stop the workers and leave the group (idempotent)."""
        if self.closed:
            return
        self.closed = True
        try:
            self.command("stop")
        except Exception as exc:  # a worker already gone: stop the others anyway
            logger.warning("tensor parallel: a worker was gone at shutdown (%s)", exc)
        for process in self._processes:
            process.join(timeout=JOIN_TIMEOUT_S)
        _terminate(self._processes)
        if dist.is_initialized():
            dist.destroy_process_group()
        self._finalizer.detach()


def _terminate(processes: list[Any]) -> None:
    for process in processes:
        if process.is_alive():
            process.terminate()
            process.join(timeout=5)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
