"""The training loop of one model: AdamW with warmup and cosine decay, loss on assistant tokens (and prompt
tokens at a small weight), a wall-clock budget that re-plans the step count, and resumable checkpoints.

Data order is a pure function of (seed, step) (`batch_rows`), so a resumed run continues exactly where the
interrupted one stopped. After a few timed steps the step count is scaled down if the planned steps would not
fit the budget (the cosine horizon moves with it), re-checked every `replan_every` steps, and training stops at
the budget regardless.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from switchyard.models.cpu_bf16 import cpu_has_native_bf16
from switchyard_training.checkpoint import (
    CHECKPOINT_FILE,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from switchyard_training.chunked_loss import linear_cross_entropy
from switchyard_training.data import IGNORE_INDEX, PackedRows
from switchyard_training.induction_init import CircuitGuard
from switchyard_training.packed_attention import PACKED_SDPA, packed_segments
from switchyard_training.pointer_loss import PointerSupervision
from switchyard_training.recipe import TrainConfig


class WarmupCosine:
    """Learning-rate multiplier: linear warmup, then cosine decay to `min_ratio` at `total` steps.

    A callable object rather than a closure so LambdaLR's state_dict saves `total`, which may be re-planned.
    """

    def __init__(self, warmup: int, total: int, min_ratio: float) -> None:
        self.warmup = warmup
        self.total = total
        self.min_ratio = min_ratio

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / self.warmup
        progress = min(1.0, (step - self.warmup) / max(1, self.total - self.warmup))
        return self.min_ratio + (1 - self.min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


@dataclass
class TrainResult:
    """What a model card reports about one training run."""

    steps: int
    planned_steps: int
    tokens_seen: int
    """Non-padding tokens processed (prompt and answer)."""
    loss_tokens_seen: int
    """Assistant tokens the loss was taken on."""
    final_loss: float
    """Mean loss over the last steps (up to 20)."""
    wall_time_s: float
    stopped_by_budget: bool
    recent_losses: list[float] = field(default_factory=list)
    final_pointer_loss: float | None = None
    """Mean copy-start attention loss over the last steps (`pointer_loss`), when it was trained."""
    bf16_autocast: bool = True
    """Whether the matrix products ran in bf16 (`TrainConfig.bf16_autocast` as resolved on this machine)."""


def make_optimizer(model: torch.nn.Module, config: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only: decaying norms and embeddings' rows hurts small models."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        (decay if param.ndim >= 2 and "embed" not in name else no_decay).append(param)
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=config.lr,
        betas=(0.9, config.beta2),
    )


def batch_rows(num_rows: int, batch_size: int, step: int, seed: int) -> torch.Tensor:
    """Row indices of the batch at `step`: each epoch is a fresh seeded permutation, so order is f(seed, step)."""
    per_epoch = max(1, num_rows // batch_size)
    epoch, index = divmod(step, per_epoch)
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    order = torch.randperm(num_rows, generator=generator)
    return order[index * batch_size : (index + 1) * batch_size]


def assistant_loss(
    model: Any,
    input_ids: torch.Tensor,
    position_ids: torch.Tensor,
    labels: torch.Tensor,
    context_weight: float = 0.0,
    row_tokens: torch.Tensor | None = None,
) -> torch.Tensor:
    """Mean next-token cross-entropy over labelled positions whose predecessor in the row is their predecessor
    in the conversation (so, on the corpus' rows, the same value as transformers' `labels=` loss).

    The LM head and softmax run only on positions whose next token is labelled (about 15% of a packed row,
    the rest being prompts and tool schemas), fused and chunked (`chunked_loss`).
    attention_mask stays None so transformers derives the per-example causal mask from the positions (or,
    with the packed backend, `packed_attention` attends within each example).

    With `context_weight` > 0 (and each row's real token count `row_tokens`), the prompt tokens of every
    example join in with that weight: the mean is (sum of assistant losses + w x sum of context losses) /
    (assistant count + w x context count). A position whose next token starts another example, or padding,
    is never a target. A shared-prefix group's prefix is one text, so its prompt targets count once.
    """
    packed = {}
    segments = packed_segments(position_ids)
    if model.config._attn_implementation == PACKED_SDPA:
        packed["segment_lengths"] = segments.lengths
        if segments.shares_prefixes:
            packed["segment_prefixes"] = segments.prefixes
    elif segments.shares_prefixes:
        raise ValueError("rows with shared-prefix groups train only with the packed attention backend")
    hidden = model.model(input_ids=input_ids, position_ids=position_ids, use_cache=False, **packed)
    hidden = hidden.last_hidden_state
    targets = labels[:, 1:]
    # A token is predicted from the one before it in the row only when that is its predecessor in the
    # conversation: not at an example's start, nor at a shared-prefix group's next member.
    follows = position_ids[:, 1:] == position_ids[:, :-1] + 1
    selected = (targets != IGNORE_INDEX) & follows
    head = model.lm_head.weight
    if context_weight <= 0:
        return linear_cross_entropy(hidden[:, :-1][selected], head, targets[selected])
    assert row_tokens is not None, "context loss needs each row's real token count"
    columns = torch.arange(1, input_ids.shape[1], device=input_ids.device)
    real = columns[None, :] < row_tokens[:, None]
    context = real & follows & ~selected
    chosen = selected | context
    weights = torch.where(selected[chosen], 1.0, context_weight)
    return linear_cross_entropy(hidden[:, :-1][chosen], head, input_ids[:, 1:][chosen], weights)


def apply_update(
    model: torch.nn.Module,
    loss: torch.Tensor,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    grad_clip: float,
    guard: CircuitGuard | None = None,
) -> None:
    """One optimizer step from `loss`; the guard restores the wired entries right after AdamW moved them."""
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    if guard is not None:
        guard.restore()
    optimizer.zero_grad(set_to_none=True)
    scheduler.step()


class TrainingPreempted(Exception):
    """Asked to stop (`stop` set): the checkpoint holds every finished step; `--resume` continues from it."""

    def __init__(self, step: int) -> None:
        super().__init__(f"stopped after step {step}; the checkpoint holds it")
        self.step = step


def train_model(
    model: Any,
    rows: PackedRows,
    config: TrainConfig,
    checkpoint_dir: Path | None = None,
    resume: bool = False,
    desc: str = "train",
    progress: bool = True,
    guard: CircuitGuard | None = None,
    pointer: PointerSupervision | None = None,
    clock: Callable[[], float] = time.monotonic,
    stop: threading.Event | None = None,
) -> TrainResult:
    """Train `model` in place on `rows`; checkpoints to `checkpoint_dir/state.pt` when given. `guard`'s
    entries stay at their wired values throughout; `pointer` adds its copy-start attention loss. The time
    budget reads `clock` (seconds), so tests can set each step's pace. When `stop` is set (a preemption's
    SIGTERM), the run checkpoints after the step in progress and raises TrainingPreempted: no step is lost."""
    if rows.num_shared_tokens and not config.packed_attention:
        raise ValueError("rows with shared-prefix groups train only with packed_attention=True")
    optimizer = make_optimizer(model, config)
    hooks = guard.attach() if guard is not None else []
    schedule = WarmupCosine(config.warmup_steps, config.max_steps, config.min_lr_ratio)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    step, tokens_seen, loss_tokens_seen, elapsed_before, replanned = 0, 0, 0, 0.0, False
    losses: list[float] = []
    pointer_losses: list[float] = []
    checkpoint_path = checkpoint_dir / CHECKPOINT_FILE if checkpoint_dir else None
    state = load_checkpoint(checkpoint_path) if (resume and checkpoint_path) else None
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        set_rng_state(state["rng"])
        step, tokens_seen, loss_tokens_seen = state["step"], state["tokens_seen"], state["loss_tokens_seen"]
        elapsed_before, replanned, losses = state["elapsed_s"], state["replanned"], state["losses"]
        pointer_losses = state.get("pointer_losses", [])

    def checkpoint() -> None:
        if checkpoint_path is None:
            return
        save_checkpoint(
            checkpoint_path,
            {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "rng": rng_state(),
                "step": step,
                "tokens_seen": tokens_seen,
                "loss_tokens_seen": loss_tokens_seen,
                "elapsed_s": elapsed_before + (clock() - started),
                "replanned": replanned,
                "losses": losses[-200:],
                "pointer_losses": pointer_losses[-200:],
                "config": asdict(config),
            },
        )

    use_bf16 = config.bf16_autocast if config.bf16_autocast is not None else cpu_has_native_bf16()
    if not use_bf16 and config.bf16_autocast is None:
        tqdm.write(f"{desc}: this CPU has no native bf16 matrix products; training in float32")
    model.train()
    attention = model.config._attn_implementation
    if config.packed_attention:
        model.set_attn_implementation(PACKED_SDPA)
    started = clock()
    start_step = step
    # Pace is measured over the steps since (window_start, window_step): the first window, after the slow
    # first steps of a process, calibrates the plan; later ones re-check it.
    window_start = 0.0
    window_step: int | None = None
    stopped_by_budget = False
    bar = tqdm(total=schedule.total, initial=step, desc=desc, disable=not progress, dynamic_ncols=True)
    try:
        while step < schedule.total:
            index = batch_rows(rows.num_rows, config.batch_rows, step, config.seed)
            input_ids, labels, positions = rows.input_ids[index], rows.labels[index], rows.position_ids[index]
            with (
                torch.autocast("cpu", dtype=torch.bfloat16, enabled=use_bf16),
                pointer.capture(model) if pointer is not None else contextlib.nullcontext({}) as captured,
            ):
                lm_loss = assistant_loss(
                    model, input_ids, positions, labels, config.context_loss_weight, rows.row_tokens[index]
                )
                loss = lm_loss
                if pointer is not None:
                    replies = labels
                    if rows.copy_start_mask is not None:
                        replies = labels.masked_fill(~rows.copy_start_mask[index], IGNORE_INDEX)
                    pointer_loss = pointer.loss(
                        model, captured, pointer.targets(input_ids, positions, replies)
                    )
                    pointer_losses.append(float(pointer_loss.detach()))
                    loss = lm_loss + pointer.weight * pointer_loss
            apply_update(model, loss, optimizer, scheduler, config.grad_clip, guard)
            step += 1
            tokens_seen += int(rows.row_tokens[index].sum())
            loss_tokens_seen += int((labels != IGNORE_INDEX).sum())
            losses.append(float(lm_loss.detach()))
            elapsed = clock() - started
            bar.update(1)
            postfix = {"loss": f"{sum(losses[-20:]) / len(losses[-20:]):.3f}"}
            if pointer_losses:
                postfix["pointer"] = f"{sum(pointer_losses[-20:]) / len(pointer_losses[-20:]):.2f}"
            bar.set_postfix(
                postfix,
                tok_s=f"{tokens_seen / (elapsed_before + elapsed):.0f}",
                lr=f"{scheduler.get_last_lr()[0]:.1e}",
            )
            if config.time_budget_s is not None:
                if step - start_step == config.calibration_skip:
                    window_start, window_step = elapsed, step
                window = config.replan_every if replanned else config.calibration_steps
                if window_step is not None and step - window_step >= window:
                    per_step = (elapsed - window_start) / (step - window_step)
                    fits = int((config.time_budget_s - elapsed_before - elapsed) / per_step) + step
                    fits = max(step + 1, min(config.max_steps, fits))
                    if abs(fits - schedule.total) > (
                        config.replan_tolerance * schedule.total if replanned else 0
                    ):
                        if not replanned or abs(fits - schedule.total) > 0.02 * schedule.total:
                            bar.write(
                                f"{desc}: {per_step:.2f}s/step; planning {fits} steps to fit the budget"
                            )
                        schedule.total = fits
                        bar.total = schedule.total
                    replanned = True
                    window_start, window_step = elapsed, step
                if elapsed_before + elapsed >= config.time_budget_s:
                    stopped_by_budget = step < schedule.total
                    break
            if checkpoint_path is not None and step % config.checkpoint_every == 0:
                checkpoint()
            if stop is not None and stop.is_set():
                checkpoint()
                raise TrainingPreempted(step)
    except KeyboardInterrupt:
        checkpoint()
        raise
    finally:
        bar.close()
        for hook in hooks:
            hook.remove()
        model.set_attn_implementation(attention)
    checkpoint()
    model.eval()
    recent = losses[-20:]
    return TrainResult(
        steps=step,
        planned_steps=schedule.total,
        tokens_seen=tokens_seen,
        loss_tokens_seen=loss_tokens_seen,
        final_loss=sum(recent) / len(recent) if recent else float("nan"),
        wall_time_s=elapsed_before + (clock() - started),
        stopped_by_budget=stopped_by_budget,
        recent_losses=recent,
        final_pointer_loss=sum(pointer_losses[-20:]) / len(pointer_losses[-20:]) if pointer_losses else None,
        bf16_autocast=use_bf16,
    )
