"""A worker rank's process: load its shard, then follow rank 0's commands until told to stop."""

from __future__ import annotations

import logging
import signal

import torch
import torch.distributed as dist

from switchyard.engine.model_runner import ModelRunner
from switchyard.engine.parallel.group import RankModelSpec, backend_for, rank_device
from switchyard.engine.parallel.rank_model import load_rank_model, pack_rank_model

logger = logging.getLogger(__name__)


def worker_main(rank: int, init_method: str, spec: RankModelSpec) -> None:
    # A stop for the whole process group (systemd, Ctrl-C, `timeout`) reaches the workers too: they leave it to
    # rank 0, which drains and then tells them to stop (and if rank 0 dies, their next broadcast fails).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    device = rank_device(torch.device(spec.device), rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(
        backend_for(device), init_method=init_method, rank=rank, world_size=spec.world_size
    )
    try:
        model = load_rank_model(
            spec.folder, spec.dtype, device, spec.max_model_len, spec.quantization, rank, spec.world_size
        )
        if spec.pack:
            pack_rank_model(model)
        _follow(model, device)
    finally:
        dist.destroy_process_group()


@torch.inference_mode()
def _follow(model: torch.nn.Module, device: torch.device) -> None:
    runner: ModelRunner | None = None
    while True:
        payload: list[object] = [None]
        dist.broadcast_object_list(payload, src=0)
        kind, *args = payload[0]  # type: ignore[misc]
        if kind == "stop":
            return
        if kind == "cache":
            num_blocks, block_size, dtype, kv_dtype = args
            runner = None  # the previous cache (a probe's, or one replaced after a hang) goes first
            runner = ModelRunner(model, num_blocks, block_size, dtype, device, kv_dtype)  # type: ignore[arg-type]
        elif kind == "forward":
            assert runner is not None
            input_ids, positions, metadata = args
            model(input_ids.to(device), positions.to(device), runner.kv_caches, metadata)
        elif kind == "logits":
            (hidden,) = args
            model.compute_logits(hidden.to(device))  # type: ignore[operator]
        elif kind == "copy":
            assert runner is not None
            runner.copy_blocks(args[0])  # type: ignore[arg-type]
        else:
            raise RuntimeError(f"tensor-parallel worker: unknown command {kind!r}")
