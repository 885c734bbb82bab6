"""Trains Switchyard's two bundled models from nothing: corpus -> tokenizer -> main model -> draft model.

`train_default` is what `switchyard train-default` runs. It is deterministic given the seed (corpus, tokenizer,
initialisation and data order all derive from it) and resumable: each model's checkpoint holds weights,
optimizer, scheduler, RNG states and the step, and data order is a pure function of (seed, step), so a resumed
run continues exactly where the interrupted one stopped.

Both models are transformers' `LlamaForCausalLM`, trained on CPU with AdamW, linear warmup and cosine decay,
loss on assistant tokens only, and examples packed into fixed-length rows (see `switchyard.bundled.data`).
A wall-clock budget caps the run: after a few timed steps the step count is scaled down if the planned steps
would not fit (the cosine horizon moves with it), re-checked every `replan_every` steps, and training stops at
the budget regardless.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import json
import math
import os
import random
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import transformers
from tokenizers import Tokenizer
from tqdm.auto import tqdm

from switchyard.bundled.chat_format import ENDOFTEXT, IM_END, SPECIAL_TOKENS, TAG_TOKENS
from switchyard.bundled.chunked_loss import linear_cross_entropy
from switchyard.bundled.corpus import DEFAULT_WEIGHTS, CorpusConfig, generate_corpus
from switchyard.bundled.data import IGNORE_INDEX, PackedRows, pack_examples, tokenize_examples
from switchyard.bundled.entities import training_entities
from switchyard.bundled.example import Category
from switchyard.bundled.induction_init import (
    CircuitGuard,
    InductionInit,
    SpaceVariants,
    install_induction_circuit,
)
from switchyard.bundled.packed_attention import PACKED_SDPA, packed_segments
from switchyard.bundled.pointer_loss import PointerSupervision
from switchyard.bundled.sessions import MAX_GROUP_SIZE
from switchyard.bundled.tasks import GroundedForms
from switchyard.bundled.tokenizer_training import (
    WordStarts,
    corpus_texts,
    load_tokenizer,
    save_tokenizer,
    train_tokenizer,
)
from switchyard.bundled.vocab_drill import reply_counts, starved_pieces, vocabulary_drills
from switchyard.models.cpu_bf16 import cpu_has_native_bf16
from switchyard.models.registry import BUNDLED_DIR, DRAFT_MODEL, MAIN_MODEL

CHECKPOINT_FILE = "state.pt"
DONE_FILE = "done.json"


@dataclass(frozen=True)
class ModelShape:
    """The Llama architecture of one bundled model (vocab size comes from the trained tokenizer)."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    max_position_embeddings: int = 2048
    rope_theta: float = 10000.0
    """The wired induction head (`induction_init`) wants a high theta (5e5) for more slow RoPE pairs."""

    def llama_config(self, vocab_size: int, eos_token_id: int, pad_token_id: int) -> transformers.LlamaConfig:
        return transformers.LlamaConfig(
            vocab_size=vocab_size,
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads,
            max_position_embeddings=self.max_position_embeddings,
            rope_theta=self.rope_theta,
            rms_norm_eps=1e-5,
            tie_word_embeddings=True,
            bos_token_id=None,
            eos_token_id=eos_token_id,
            pad_token_id=pad_token_id,
            attn_implementation="sdpa",
        )


MAIN_SHAPE = ModelShape(
    hidden_size=256,
    intermediate_size=1024,
    num_hidden_layers=6,
    num_attention_heads=4,
    num_key_value_heads=2,
    rope_theta=5e5,
)
"""~6M parameters at a 4k vocab. Small on purpose: copying and passage lookup need few layers but many
optimizer steps, and on two shared CPU cores this shape trains at about 1.6x the tokens/s of 384 x 8."""
DRAFT_SHAPE = ModelShape(
    hidden_size=192,
    intermediate_size=512,
    num_hidden_layers=4,
    num_attention_heads=3,
    num_key_value_heads=1,
    rope_theta=5e5,
)
"""~3M parameters: several times cheaper per token than the main model, the point of a draft."""


RECIPE_WEIGHTS: dict[Category, float] = {
    **DEFAULT_WEIGHTS,
    Category.TOOL_CALL: 0.12,
    Category.TOOL_PARALLEL: 0.05,
    Category.NO_TOOL: 0.05,
    Category.JSON_EXTRACTION: 0.31,
    Category.GROUNDED: 0.28,
    Category.INJECTION: 0.07,
    Category.COPY: 0.07,
}
"""The recipe's corpus mix: `corpus.DEFAULT_WEIGHTS` with 0.12 of the example shares moved from tool calls,
no-tool turns, injections and copy drills to extraction and grounded answers. Run 30 moved 0.08 (JSON 0.832 ->
0.891, grounded 0.716 -> 0.804 on the 1200-conversation gate, tool metrics up too); run 31 moved 0.04 more from
tool calls and no-tool turns to extraction, the one metric still short: JSON 0.891 -> 0.900, grounded 0.823,
tool selection 0.975, arguments 0.957. Run 32, this recipe under the 90-minute budget, gave the shipped models:
0.977 / 0.946 / JSON 0.918 / grounded 0.838 / injection 1.000 (benchmarks/RESULTS.md)."""


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation of one model."""

    max_steps: int
    batch_rows: int = 6
    """Small batches, more steps: early in training the loss falls per token faster with more updates."""
    row_len: int = 768
    """Every corpus example fits in 768 tokens. With per-example attention a longer row costs no more per
    token; shared-prefix groups (`DefaultRecipe.group_size`) fit in fewer pieces in longer rows."""
    lr: float = 1e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 30
    weight_decay: float = 0.1
    beta2: float = 0.95
    grad_clip: float = 1.0
    bf16_autocast: bool | None = None
    """bf16 matmuls under autocast (weights and optimizer stay float32); None: where this CPU computes bf16
    natively (`models.cpu_bf16`). On the reference 2-core AVX512-BF16 machine it trains the main shape 1.6x and
    the draft 1.45x faster than float32; on a 2-core AVX2 machine a main-model step took 71 s under it against
    4.8 s in float32 (`benchmarks/train_step.py --precision fp32`)."""
    packed_attention: bool = True
    """Attend within each packed example only, one causal SDPA per example (`packed_attention`), instead of
    the full row under a block-diagonal mask: same results, 1.07x the main model's steps per second on the
    corpus' rows (`benchmarks/train_step.py`: 1.00 s against 1.08 s a step, same run)."""
    time_budget_s: float | None = None
    """Wall-clock cap for this model, counted across resumes."""
    calibration_steps: int = 20
    """Steps timed before deciding whether max_steps fits the budget. The first few steps of a process are
    slow (allocator, kernels warming up) and are left out of the timing, or the plan comes out far short."""
    calibration_skip: int = 3
    replan_every: int = 100
    """After calibration the plan is checked again every this many steps, against the pace of those steps, and
    moved to what the rest of the budget holds (never past `max_steps`): on a machine that slows down mid-run
    (shared cores, a busy neighbour) the cosine still ends at the budget instead of being cut off part way
    down, and when the slowdown passes the steps it cost are planned back instead of the budget ending early."""
    replan_tolerance: float = 0.01
    """A re-check moves the plan only when it is off by more than this fraction, so the cosine does not
    jitter with every window's pace."""
    context_loss_weight: float = 0.0
    """Weight of the loss on prompt tokens (system, user, tool results) next to the assistant tokens' 1.0.
    0 trains on replies only. Prompts are full of copy events (tool results repeat the call's arguments,
    passages repeat names), so a small weight gives copying far more gradient per step; it costs the LM head and
    softmax on every token (`chunked_loss` keeps that cheap). The recipe uses 0.1 for both models."""
    checkpoint_every: int = 50
    seed: int = 0


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


def count_parameters(model: torch.nn.Module) -> int:
    """Unique parameters (tied embedding counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def build_model(
    shape: ModelShape,
    vocab_size: int,
    eos_token_id: int,
    pad_token_id: int,
    seed: int,
    induction: InductionInit | None = None,
    space_variants: SpaceVariants | None = None,
) -> Any:
    """A freshly initialised model; with `induction`, layers 0-1 start with a wired copy circuit."""
    return build_guarded_model(
        shape, vocab_size, eos_token_id, pad_token_id, seed, induction, space_variants
    )[0]


def build_guarded_model(
    shape: ModelShape,
    vocab_size: int,
    eos_token_id: int,
    pad_token_id: int,
    seed: int,
    induction: InductionInit | None = None,
    space_variants: SpaceVariants | None = None,
) -> tuple[Any, CircuitGuard | None]:
    """`build_model`, plus the guard that keeps a protected wired circuit fixed in `train_model`."""
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(shape.llama_config(vocab_size, eos_token_id, pad_token_id))
    guard = None
    if induction is not None:
        guard = install_induction_circuit(model, replace(induction, seed=seed), space_variants)
    return model, guard


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


def _rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "torch": torch.get_rng_state()}


def _set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Write atomically: an interrupted save leaves the previous checkpoint intact."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    return torch.load(path, map_location="cpu", weights_only=False)


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
) -> TrainResult:
    """Train `model` in place on `rows`; checkpoints to `checkpoint_dir/state.pt` when given. `guard`'s
    entries stay at their wired values throughout; `pointer` adds its copy-start attention loss. The time
    budget reads `clock` (seconds), so tests can set each step's pace."""
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
        _set_rng_state(state["rng"])
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
                "rng": _rng_state(),
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


# ------------------------------------------------------------------------------------------- export


def write_model_folder(
    model: Any, tokenizer: Tokenizer, folder: Path, card: str, model_max_length: int
) -> Path:
    """Save an HF folder (bf16 safetensors, configs, tokenizer, README) atomically: built fully or not at all."""
    folder = Path(folder)
    staging = folder.with_name(f".{folder.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    export = model.to(torch.bfloat16)
    export.config.dtype = torch.bfloat16
    export.generation_config = transformers.GenerationConfig(
        eos_token_id=[tokenizer.token_to_id(IM_END), tokenizer.token_to_id(ENDOFTEXT)],
        pad_token_id=tokenizer.token_to_id(ENDOFTEXT),
        do_sample=False,
    )
    export.save_pretrained(staging, safe_serialization=True)
    save_tokenizer(tokenizer, staging, model_max_length=model_max_length)
    (staging / "README.md").write_text(card)
    if folder.exists():
        shutil.rmtree(folder)
    for path in staging.iterdir():
        path.chmod(0o644)  # safetensors writes 0600; the folder ships inside an installed package
    os.replace(staging, folder)
    return folder


def reproduce_command(recipe: DefaultRecipe, seed: int, minutes: float) -> str:
    """The `switchyard train-default` line that rebuilds these models (recipe fields the CLI can set)."""
    command = (
        f"switchyard train-default --seed {seed} --minutes {minutes:g} --corpus-size {recipe.corpus_size} "
        f"--main-steps {recipe.main.max_steps} --draft-steps {recipe.draft.max_steps}"
    )
    default = DefaultRecipe()
    changed = {c: w for c, w in recipe.corpus_weights.items() if default.corpus_weights.get(c) != w}
    if changed:
        command += " --mix " + ",".join(f"{c}={w:g}" for c, w in changed.items())
    if recipe.main.context_loss_weight != default.main.context_loss_weight:
        command += f" --context-loss-weight {recipe.main.context_loss_weight:g}"
    if recipe.word_starts != default.word_starts:
        command += f" --word-starts {recipe.word_starts}"
    if recipe.digits_per_token != default.digits_per_token:
        command += f" --digits-per-token {recipe.digits_per_token}"
    if recipe.group_size != default.group_size:
        command += f" --group-size {recipe.group_size}"
    if recipe.row_len != default.row_len:
        command += f" --row-len {recipe.row_len}"
    if recipe.main_locator_layers != default.main_locator_layers:
        layers = ",".join(str(layer) for layer in recipe.main_locator_layers) or "none"
        command += f" --locator-layers {layers}"
    if recipe.entity_count != default.entity_count:
        command += f" --entity-count {recipe.entity_count}"
    if recipe.real_entity_share != default.real_entity_share:
        command += f" --real-entity-share {recipe.real_entity_share}"
    if recipe.vocab_drill_min_count != default.vocab_drill_min_count:
        command += f" --vocab-drill-min-count {recipe.vocab_drill_min_count}"
    if recipe.drill_copy_starts != default.drill_copy_starts:
        command += " --drill-copy-starts" if recipe.drill_copy_starts else " --no-drill-copy-starts"
    if recipe.pointer_weight != default.pointer_weight:
        command += f" --pointer-weight {recipe.pointer_weight:g}"
    if not recipe.message_tool:
        command += " --no-message-tool"
    if recipe.grounded_forms != default.grounded_forms:
        forms = recipe.grounded_forms
        command += (
            f" --grounded-forms quote={forms.quote:g},value={forms.value:g},attribute={forms.attribute:g}"
        )
    return command


def model_card(name: str, role: str, params: int, shape: ModelShape, vocab_size: int, seed: int,
               recipe: DefaultRecipe, rows: PackedRows, result: TrainResult, config: TrainConfig,
               induction: InductionInit | None = None, command: str | None = None) -> str:  # fmt: skip
    """README.md of a bundled model: what it is, how it was made, and how far to trust it."""
    loss_terms = (
        f"assistant tokens at weight 1, prompt tokens at {config.context_loss_weight:g}"
        if config.context_loss_weight > 0
        else "assistant tokens only"
    )
    budget_note = " (stopped at the time budget)" if result.stopped_by_budget else ""
    init = "random"
    if induction is not None:
        context = "two tokens" if induction.bigram_dims > 0 else "one token"
        init = ("random, plus a copy circuit wired into layers 0-1 (previous-token heads and an induction head "
                f"matching {context} of context, held fixed in training, on 50x embeddings; spaced and bare forms "
                "of a token start alike; `switchyard.bundled.induction_init`)")  # fmt: skip
        if induction.locator_layers:
            layers = ", ".join(str(i) for i in induction.locator_layers)
            init += f"; locator heads (fixed copy output, learned attention) in layers {layers}"
            if result.final_pointer_loss is not None:
                init += (f", one head each also trained to attend where a copied span starts (weight "
                         f"{recipe.pointer_weight:g}, final {result.final_pointer_loss:.3f})")  # fmt: skip
    weights = recipe.corpus_weights
    total = sum(weights.values())
    mix = ", ".join(f"{category} {weight / total:.2f}" for category, weight in weights.items() if weight > 0)
    digits = recipe.digits_per_token
    numbers = "one token per digit" if digits == 1 else f"numbers in groups of {digits} digits"
    grouping = ""
    if recipe.group_size > 1:
        grouping = (f"; tool and grounded conversations in groups of {recipe.group_size} sharing their prompt, "
                    f"packed once: {rows.num_shared_tokens:,} tokens saved")  # fmt: skip
    grouping += f"; {recipe.entity_count} added entries a training name list"
    if recipe.real_entity_share:
        grouping += (f", {recipe.real_entity_share:.0%} of the people, cities, jobs, products and topics among "
                     f"them real-world ones (Faker {_faker_version()} tables)")  # fmt: skip
    drills = rows.num_examples + rows.num_dropped - recipe.corpus_size
    if drills > 0:
        grouping += (f"; plus {drills} copy drills for word pieces the corpus' replies use fewer than "
                     f"{recipe.vocab_drill_min_count} times")  # fmt: skip
        if not recipe.drill_copy_starts:
            grouping += ", their copy starts left out of the copy-start attention loss"
    return f"""---
license: apache-2.0
library_name: transformers
pipeline_tag: text-generation
tags: [switchyard, llama, tiny, synthetic-data]
---

# {name}

{role}

**These are tiny models trained on synthetic tasks.** They were trained from scratch on a CPU (wall time
below), on a corpus generated by Switchyard itself (greetings and a small fact table, tool calls, JSON
extraction, grounded answers with citations, ignoring injected instructions). They know almost nothing about
the world and fail outside those task formats. They exist so Switchyard can be served, tested and benchmarked
without downloading anything; point `--model` at any Hugging Face folder for real use.

## How it was made

Reproduce with `{command or f"switchyard train-default --seed {seed}"}`.

| | |
|---|---|
| architecture | LlamaForCausalLM, hidden {shape.hidden_size}, {shape.num_hidden_layers} layers, {shape.num_attention_heads} heads ({shape.num_key_value_heads} KV), MLP {shape.intermediate_size}, tied embeddings |
| parameters | {params / 1e6:.2f}M |
| initialisation | {init} |
| tokenizer | byte-level BPE, {vocab_size} tokens, {numbers}, ChatML template with Qwen2.5-style tool calls |
| seed | {seed} |
| corpus | {recipe.corpus_size} synthetic conversations ({rows.num_examples} packed into {rows.num_rows} rows of {config.row_len} tokens{grouping}) |
| corpus mix | {mix} (shares of conversations) |
| steps | {result.steps} of {result.planned_steps} planned{budget_note}, batch {config.batch_rows} rows |
| tokens seen | {result.tokens_seen:,} ({result.loss_tokens_seen:,} assistant tokens trained on) |
| final loss | {result.final_loss:.4f} (mean over the last steps, {loss_terms}) |
| wall time | {result.wall_time_s / 60:.1f} minutes |
| optimiser | AdamW, lr {config.lr}, warmup {config.warmup_steps} steps, cosine to {config.min_lr_ratio} x lr, weight decay {config.weight_decay} |
| precision | {"bf16 matrix products under autocast" if result.bf16_autocast else "float32"}, float32 weights and optimiser state |

## Chat format

ChatML (`<|im_start|>role ... <|im_end|>`). Tools go in the system turn as JSON schemas inside `<tools>`;
the model calls them as `<tool_call>\\n{{"name": ..., "arguments": {{...}}}}\\n</tool_call>` and reads results
wrapped in `<tool_response>`. The template in tokenizer_config.json renders all of this from OpenAI-style
messages.
"""


# ----------------------------------------------------------------------------------------- pipeline


@dataclass(frozen=True)
class DefaultRecipe:
    """Everything `train_default` fixes besides the seed and the budget."""

    corpus_size: int = 200_000
    """More than the main model's steps reach (110-140k conversations in 90 minutes), so none is seen twice."""
    tokenizer_examples: int = 12_000
    """The tokenizer learns its merges from this many conversations; more changes the merges very little."""
    vocab_size: int = 4096
    """The corpus' invented names would fill 8k entries with merges of one-off words; at 4k, names (held-out
    ones too) split into pieces every name shares, and copying a name is copying familiar tokens."""
    word_starts: WordStarts = WordStarts.SPACE_LAST
    """How the tokenizer merges a word's leading space (`tokenizer_training.WordStarts`): space last, so a value
    copied from a sentence into JSON splits into the same pieces (the mirror left 26 of 300 held-out JSON
    conversations with a value that split differently)."""
    digits_per_token: int = 1
    """Digits per number token (`train_tokenizer`): 1 splits every digit; 2 or 3 cut fixed groups (2 halved
    exact arguments in a 30-minute ablation, see the tokenizer's docstring)."""
    corpus_weights: dict[Category, float] = field(default_factory=lambda: dict(RECIPE_WEIGHTS))
    """Relative shares of the categories, by example count (`RECIPE_WEIGHTS`)."""
    grounded_forms: GroundedForms = field(default_factory=lambda: GroundedForms(quote=0.85, value=0.15))
    """How answerable grounded questions are answered (`tasks.GroundedForms`): quotes and value-first replies,
    none citing first. Run 27 dropped the cite-first "According to [k]" form (run 26: 0.15), whose replies
    opened with something other than a company name 44 times in 150; run 28 with 11 (benchmarks/RESULTS.md)."""
    message_tool: bool = True
    """Offer `send_message` among the tools (the agent demo's acting tool, which it asks approval for); runs up
    to 27 had only the reading tools, and False reproduces their corpora exactly."""
    group_size: int = 4
    """Tool and grounded conversations come in groups of this many sharing their prompt (`sessions`), packed
    with the shared part once (`data.pack_examples`): 1.37-1.43x the conversations per second of lone ones
    (`benchmarks/train_step.py`), and on the 1200-conversation gate JSON 0.36 -> 0.56, grounded 0.20 -> 0.37
    (benchmarks/RESULTS.md, run 6)."""
    row_len: int = 1152
    """Rows long enough for a group of tool conversations (prefix ~260 tokens, ~140 per member); 4 rows a step
    keep the 4608 tokens per step the recipe was tuned with."""
    main_shape: ModelShape = MAIN_SHAPE
    draft_shape: ModelShape = DRAFT_SHAPE
    # Step caps above what fits: the time budget plans both models down to what the measured pace allows (on
    # 2 cores, 4608-token steps with the context loss: main ~1.0-1.1 s, ~4350 steps in its 80 minutes; draft
    # ~0.75 s, ~550).
    # Copying forms late at low learning rates, hence 3e-3. Prompt tokens train at a tenth of the replies'
    # weight: run 7 against run 6 on the 1200-conversation gate, with 18% fewer steps, tool selection
    # 0.894 -> 0.959, arguments 0.718 -> 0.850, JSON 0.564 -> 0.645, grounded 0.369 -> 0.247 (RESULTS.md).
    main: TrainConfig = TrainConfig(
        max_steps=7000, batch_rows=4, lr=3e-3, warmup_steps=50, context_loss_weight=0.1
    )
    draft: TrainConfig = TrainConfig(
        max_steps=2800, batch_rows=4, lr=3e-3, warmup_steps=50, context_loss_weight=0.1
    )
    main_budget_share: float = 0.90
    """Of the training time (the budget less corpus and tokenizer work): the rest goes to the draft, which
    reached 0.86 greedy agreement with 15% of it and 0.90 with 10%; the gate grades only the main model."""
    induction: InductionInit | None = field(default_factory=InductionInit)
    """Wire a protected copy circuit into both models at init (see `switchyard.bundled.induction_init`): on the
    real corpus it is what makes tool arguments, extraction and citations copy from the prompt in the steps this
    budget buys (measured at step 300: teacher-forced accuracy on copyable reply tokens of held-out examples 0.67,
    loss 1.08; the same circuit guarded but at the 0.02 embedding scale: 0.03 and 1.80). None trains from a plain
    random init."""
    main_locator_layers: tuple[int, ...] = (3, 4)
    """The main model's locator heads (`InductionInit.locator_layers`): copy-valued heads whose attention is
    learned, so finding where a value starts in the prompt is the only thing left to learn. The draft has one kv
    head, already the wired one, and gets none. Measured (copy probe, 400 steps): loss 0.93 against 0.96 without,
    copied-span starts 0.59 against 0.54; a small gain at that horizon."""
    entity_count: int = 6000
    """Invented entries added to each of the training corpus' name lists (people, cities; products, jobs and
    the rest get a fraction; `entities.widen_for_training`). Companies have their own, larger count: widening
    them from 810 to 24k lifted grounded answers from 0.487 to 0.583 (run 24); the other lists cost JSON about
    0.07 between training and held-out names on run 24 (`benchmarks/entity_gap.py`). 6000, not run 24's 1500,
    since run 25: the grounded reply opened with the asked company 128 times in 150 instead of 103, p(another
    company) 0.05 instead of 0.23 (benchmarks/RESULTS.md)."""
    real_entity_share: float = 0.5
    """Share of the added people, cities, jobs, products and document topics that are real-world entries (from
    Faker's tables, none sharing a word with the held-out lists) instead of invented ones
    (`entities.widen_for_training`). Run 25's lists were ~99% invented; it copied held-out real values into JSON
    at 0.71 against 0.93 for training ones, writing invented-looking pieces for real words, and searched
    documents for held-out topics ("conference travel") with runaway queries."""
    vocab_drill_min_count: int = 0
    """Word pieces of the trained tokenizer that are reply tokens fewer times than this in the corpus get copy
    drills until they are (`vocab_drill`): a piece never trained on cannot be written, even copied (run 20
    broke every held-out "... Analytics" name at "tics"). 0 adds none, the recipe: run 21 (24, 47k drills)
    lifted tool arguments to 0.901 and evened the company suffixes out, but grounded fell to 0.280, its replies
    opening less often with the asked company (benchmarks/RESULTS.md)."""
    drill_copy_starts: bool = True
    """Whether the drills' copy starts teach the locator heads too (`pointer_loss`). A drill's copy start is an
    easy lookup (one echoed line), yet drill rows hold 3x the supervised queries of corpus rows: at run 21's
    dose about 8 a step next to the corpus' ~68, of which only ~10 are grounded (a 4000-conversation sample with
    run 21's tokenizer). Off keeps the heads' supervision on the corpus' lookups while the drills still train
    the pieces as outputs."""
    pointer_weight: float = 0.1
    """Weight of the copy-start attention loss (`pointer_loss`) on the first query head of each locator layer,
    next to the language-model loss's 1.0; 0 leaves the locators to the language-model loss alone. Run 16 against
    run 15 on the 1200-conversation gate: grounded 0.343 -> 0.417, JSON 0.559 -> 0.645, arguments 0.758 ->
    0.857, and a grounded reply's first token names the asked company 226 of 300 times, not 158 (RESULTS.md)."""


def with_row_len(recipe: DefaultRecipe, row_len: int) -> DefaultRecipe:
    """The recipe with rows of `row_len` tokens and as many rows per step as keep its tokens per step."""
    step_tokens = recipe.main.batch_rows * recipe.row_len
    if row_len <= 0 or step_tokens % row_len:
        raise ValueError(f"row length must divide the recipe's {step_tokens} tokens per step, got {row_len}")
    rows = step_tokens // row_len
    return replace(recipe, row_len=row_len, main=replace(recipe.main, batch_rows=rows),
                   draft=replace(recipe.draft, batch_rows=rows))  # fmt: skip


ROWS_FINGERPRINT_FILE = "rows.sha256"


class ResumeMismatchError(ValueError):
    """A resume whose training rows differ from those its checkpoints were trained on."""


def rows_fingerprint(rows: PackedRows) -> str:
    digest = hashlib.sha256()
    for tensor in (rows.input_ids, rows.labels):
        digest.update(tensor.contiguous().numpy().tobytes())
    return digest.hexdigest()


def check_rows_fingerprint(checkpoint_dir: Path, rows: PackedRows, resume: bool) -> None:
    """A resumed run must train on the rows it started with: data order is a function of (seed, step), so other
    rows (a flag left out, or a default changed since, such as `--no-message-tool` for runs up to 27) would go on
    silently with another corpus. ResumeMismatchError in that case; a fresh start records the fingerprint."""
    path = checkpoint_dir / ROWS_FINGERPRINT_FILE
    fingerprint = rows_fingerprint(rows)
    if resume and path.is_file() and path.read_text().strip() != fingerprint:
        raise ResumeMismatchError(
            f"the training rows differ from those the checkpoints in {checkpoint_dir} were trained on: resume "
            "with the flags the run started with (a default may have changed since; see the model card's command)"
        )
    path.write_text(fingerprint + "\n")


def prepare_data(
    recipe: DefaultRecipe, seed: int, checkpoint_dir: Path, resume: bool
) -> tuple[Tokenizer, PackedRows]:
    """Corpus, tokenizer (reused from the checkpoint dir on resume, so ids never shift) and packed rows."""
    examples = generate_corpus(
        CorpusConfig(
            seed=seed,
            size=recipe.corpus_size,
            entities=training_entities(recipe.entity_count, recipe.real_entity_share),
            weights=dict(recipe.corpus_weights),
            group_size=recipe.group_size,
            grounded_forms=recipe.grounded_forms,
            message_tool=recipe.message_tool,
        )
    )
    tokenizer_dir = checkpoint_dir / "tokenizer"
    if resume and (tokenizer_dir / "tokenizer.json").is_file():
        tokenizer = load_tokenizer(tokenizer_dir)
    else:
        tokenizer = train_tokenizer(
            corpus_texts(examples[: recipe.tokenizer_examples]),
            recipe.vocab_size,
            word_starts=recipe.word_starts,
            digits_per_token=recipe.digits_per_token,
        )
        save_tokenizer(tokenizer, tokenizer_dir)
    tokenized = tokenize_examples(tokenizer, examples)
    if recipe.vocab_drill_min_count > 0:
        plan = starved_pieces(tokenizer, reply_counts(tokenized, tokenizer.get_vocab_size()),
                              recipe.vocab_drill_min_count)  # fmt: skip
        drills = tokenize_examples(tokenizer, vocabulary_drills(tokenizer, plan, seed))
        if not recipe.drill_copy_starts:
            drills = [replace(d, copy_starts=False) for d in drills]
        tokenized += drills
    rows = pack_examples(tokenized, recipe.row_len, pad_id=tokenizer.token_to_id(ENDOFTEXT))
    return tokenizer, rows


def pointer_supervision(
    recipe: DefaultRecipe,
    shape: ModelShape,
    induction: InductionInit | None,
    vocab_size: int,
    variants: SpaceVariants,
    tokenizer: Tokenizer,
) -> PointerSupervision | None:
    """The copy-start attention loss for a model with locator heads, on the first query head of the locator
    group (the last kv head's), or None."""
    if recipe.pointer_weight <= 0 or induction is None or not induction.locator_layers:
        return None
    group = shape.num_attention_heads // shape.num_key_value_heads
    # chat control, tags, and punctuation: a copied value starts with a letter or digit, and JSON quotes or a
    # sentence's full stop "found" in the prompt are boilerplate that would take the head's attention
    control = {tokenizer.token_to_id(t) for t in (*SPECIAL_TOKENS, *TAG_TOKENS)}
    symbols = {
        i for i in range(tokenizer.get_vocab_size()) if not any(c.isalnum() for c in tokenizer.decode([i]))
    }
    return PointerSupervision.for_vocab(induction.locator_layers, (shape.num_key_value_heads - 1) * group,
                                        recipe.pointer_weight, vocab_size, variants.pairs,
                                        frozenset(control | symbols))  # fmt: skip


def padded_vocab_size(tokenizer: Tokenizer, multiple: int = 64) -> int:
    """Embedding rows: the tokenizer's size rounded up, as matrix kernels prefer round sizes."""
    return -(-tokenizer.get_vocab_size() // multiple) * multiple


def train_default(
    output_dir: str | Path = BUNDLED_DIR,
    checkpoint_dir: str | Path = Path("checkpoints/train-default"),
    time_budget_minutes: float = 90.0,
    seed: int = 0,
    resume: bool = False,
    recipe: DefaultRecipe | None = None,
    progress: bool = True,
) -> dict[str, TrainResult]:
    """Train and write both bundled models to `output_dir/<name>`; returns each model's TrainResult.

    The budget covers everything: corpus, tokenizer, both models and export. A model whose checkpoint dir
    holds done.json is skipped on resume (its folder was already written).
    """
    recipe = recipe or DefaultRecipe()
    started = time.monotonic()
    deadline = started + time_budget_minutes * 60
    output_dir, checkpoint_dir = Path(output_dir), Path(checkpoint_dir)
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    tokenizer, rows = prepare_data(recipe, seed, checkpoint_dir, resume)
    check_rows_fingerprint(checkpoint_dir, rows, resume)
    if progress:
        tqdm.write(
            f"corpus: {recipe.corpus_size} examples -> {rows.num_rows} rows of {recipe.row_len} tokens "
            f"({rows.num_dropped} too long, dropped); vocab {tokenizer.get_vocab_size()}"
        )
    vocab = padded_vocab_size(tokenizer)
    eos, pad = tokenizer.token_to_id(IM_END), tokenizer.token_to_id(ENDOFTEXT)
    export_reserve_s = 20.0
    plans = [
        (MAIN_MODEL, "The main bundled model of Switchyard.", recipe.main_shape, recipe.main, recipe.main_budget_share),
        (DRAFT_MODEL, f"The draft model for speculative decoding with `{MAIN_MODEL}` (same tokenizer).",
         recipe.draft_shape, recipe.draft, 1.0),
    ]  # fmt: skip
    results: dict[str, TrainResult] = {}
    for name, role, shape, base_config, share in plans:
        model_ckpt = checkpoint_dir / name
        done = model_ckpt / DONE_FILE
        if resume and done.is_file() and (output_dir / name / "config.json").is_file():
            results[name] = TrainResult(**json.loads(done.read_text()))
            continue
        budget = max(0.0, (deadline - time.monotonic() - export_reserve_s) * share)
        config = replace(base_config, time_budget_s=budget, row_len=recipe.row_len, seed=seed)
        previous = load_checkpoint(model_ckpt / CHECKPOINT_FILE) if resume else None
        if previous is not None:
            # A resumed model keeps the budget and plan it started with; its elapsed time is in the checkpoint.
            config = replace(config, **{k: previous["config"][k] for k in ("time_budget_s", "max_steps")})
        variants = SpaceVariants.from_vocab(tokenizer.get_vocab())
        induction = recipe.induction
        if induction is not None and name == MAIN_MODEL:
            induction = replace(induction, locator_layers=recipe.main_locator_layers)
        model, guard = build_guarded_model(shape, vocab, eos, pad, seed, induction, variants)
        pointer = pointer_supervision(recipe, shape, induction, vocab, variants, tokenizer)
        result = train_model(model, rows, config, model_ckpt, resume=resume, desc=name, progress=progress,
                             guard=guard, pointer=pointer)  # fmt: skip
        card = model_card(name, role, count_parameters(model), shape, tokenizer.get_vocab_size(), seed, recipe,
                          rows, result, config, induction, reproduce_command(recipe, seed, time_budget_minutes))  # fmt: skip
        write_model_folder(model, tokenizer, output_dir / name, card, shape.max_position_embeddings)
        done.write_text(json.dumps(asdict(result)))
        results[name] = result
    return results


def parse_mix(text: str) -> dict[Category, float]:
    """'name=weight,...' -> {Category: weight}, for `--mix`."""
    mix: dict[Category, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, value = item.partition("=")
        try:
            category, weight = Category(name.strip()), float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{item!r}: expected category=weight with a category among {', '.join(Category)}"
            ) from None
        if not weight >= 0:
            raise argparse.ArgumentTypeError(f"{item!r}: a weight must be >= 0")
        mix[category] = weight
    return mix


def parse_grounded_forms(text: str) -> GroundedForms:
    """'quote=0.7,value=0.15,attribute=0' -> GroundedForms, for `--grounded-forms` (shares left out keep the
    recipe's; the rest is "According to [k]")."""
    shares: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, value = item.partition("=")
        name = name.strip()
        try:
            if name not in ("quote", "value", "attribute"):
                raise ValueError
            shares[name] = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{item!r}: expected quote=, value= or attribute=share"
            ) from None
    try:
        return replace(DefaultRecipe().grounded_forms, **shares)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="switchyard train-default",
        description=(
            "Train Switchyard's bundled models (switchyard-chat and switchyard-chat-draft) from scratch: "
            "generate the synthetic corpus, train the tokenizer, train the main model then the draft, and "
            "write Hugging Face folders with model cards. Deterministic for a given --seed; interrupt any "
            "time and continue with --resume."
        ),
    )
    parser.add_argument("--output", type=Path, default=BUNDLED_DIR,
                        help="folder to write <model-name>/ folders into (default: the package's bundled/models)")  # fmt: skip
    parser.add_argument("--checkpoint-dir", type=Path, default=Path("checkpoints/train-default"),
                        help="where checkpoints and the trained tokenizer go (default: %(default)s)")  # fmt: skip
    parser.add_argument("--minutes", type=float, default=90.0,
                        help="wall-clock budget for the whole run, both models (default: %(default)s)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="seed of corpus, tokenizer, init and data order")
    parser.add_argument("--resume", action="store_true",
                        help="continue from --checkpoint-dir instead of starting over")  # fmt: skip
    parser.add_argument("--corpus-size", type=int, default=DefaultRecipe.corpus_size,
                        help="number of synthetic conversations (default: %(default)s)")  # fmt: skip
    parser.add_argument("--main-steps", type=int, help="optimizer steps for the main model (default: recipe)")
    parser.add_argument(
        "--draft-steps", type=int, help="optimizer steps for the draft model (default: recipe)"
    )
    parser.add_argument(
        "--context-loss-weight",
        type=float,
        default=None,
        help="weight of the loss on prompt tokens next to the replies' 1.0 (default: recipe, 0 = replies only)",
    )
    parser.add_argument(
        "--word-starts",
        choices=[w.value for w in WordStarts],
        default=None,
        help="how the tokenizer merges a word's leading space (an ablation of the recipe; default space_last)",
    )
    parser.add_argument("--locator-layers", default=None,
                        help="main model's locator-head layers, comma-separated, or 'none' (default: recipe)")  # fmt: skip
    parser.add_argument("--pointer-weight", type=float, default=None,
                        help="weight of the locator heads' copy-start attention loss, 0 = none (default: recipe)")  # fmt: skip
    parser.add_argument(
        "--digits-per-token",
        type=int,
        choices=(1, 2, 3),
        default=None,
        help="digits per number token in the tokenizer: 1 splits every digit, 2 or 3 cut fixed groups "
        "(default: recipe)",
    )
    parser.add_argument(
        "--group-size",
        type=int,
        default=None,
        help="tool and grounded conversations per group sharing one prompt, packed once (default: recipe)",
    )
    parser.add_argument(
        "--row-len",
        type=int,
        default=None,
        help="tokens per packed row; rows per step change to keep the recipe's tokens per step (default: recipe)",
    )
    parser.add_argument(
        "--mix",
        type=parse_mix,
        default={},
        help="corpus shares to change, e.g. 'json_extraction=0.3,grounded=0.3' (relative weights; the other "
        f"categories keep the recipe's; categories: {', '.join(Category)})",
    )
    parser.add_argument(
        "--grounded-forms",
        type=parse_grounded_forms,
        default=None,
        help="shares of answerable grounded replies that quote the passage, give the value first, and name the "
        "company and attribute first ('Acme: its founder is ...'), e.g. 'quote=0.1,value=0.1,attribute=0.7' "
        "(the rest cite first; default: recipe)",
    )
    parser.add_argument(
        "--no-message-tool",
        action="store_true",
        help="offer only the reading tools, without send_message (the corpora of runs up to 27)",
    )
    parser.add_argument(
        "--entity-count",
        type=int,
        default=None,
        help="invented entries added to each training name list (people, cities, ...; default: recipe)",
    )
    parser.add_argument(
        "--real-entity-share",
        type=float,
        default=None,
        help="share of the added people, cities, jobs, products and topics that are real-world ones, from Faker's "
        "tables (default: recipe)",
    )
    parser.add_argument(
        "--vocab-drill-min-count",
        type=int,
        default=None,
        help="add copy drills for word pieces that are reply tokens fewer times than this, 0 = none "
        "(default: recipe)",
    )
    parser.add_argument(
        "--drill-copy-starts",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="whether the drills' copy starts are supervised by the copy-start attention loss (default: recipe)",
    )
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice, all cores)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    recipe = DefaultRecipe()
    recipe = replace(
        recipe,
        corpus_size=args.corpus_size,
        main=replace(recipe.main, max_steps=args.main_steps or recipe.main.max_steps),
        draft=replace(recipe.draft, max_steps=args.draft_steps or recipe.draft.max_steps),
    )
    if args.locator_layers is not None:
        layers = (
            () if args.locator_layers == "none" else tuple(int(x) for x in args.locator_layers.split(","))
        )
        recipe = replace(recipe, main_locator_layers=layers)
    if args.context_loss_weight is not None:
        recipe = replace(
            recipe,
            main=replace(recipe.main, context_loss_weight=args.context_loss_weight),
            draft=replace(recipe.draft, context_loss_weight=args.context_loss_weight),
        )
    if args.pointer_weight is not None:
        if not args.pointer_weight >= 0:
            parser.error(f"--pointer-weight must be >= 0, got {args.pointer_weight}")
        recipe = replace(recipe, pointer_weight=args.pointer_weight)
    if args.word_starts is not None:
        recipe = replace(recipe, word_starts=WordStarts(args.word_starts))
    if args.digits_per_token is not None:
        recipe = replace(recipe, digits_per_token=args.digits_per_token)
    if args.mix:
        recipe = replace(recipe, corpus_weights={**recipe.corpus_weights, **args.mix})
    if args.grounded_forms is not None:
        recipe = replace(recipe, grounded_forms=args.grounded_forms)
    if args.no_message_tool:
        recipe = replace(recipe, message_tool=False)
    if args.entity_count is not None:
        if args.entity_count < 1:
            parser.error(f"--entity-count must be >= 1, got {args.entity_count}")
        recipe = replace(recipe, entity_count=args.entity_count)
    if args.real_entity_share is not None:
        if not 0.0 <= args.real_entity_share <= 1.0:
            parser.error(f"--real-entity-share must be in [0, 1], got {args.real_entity_share}")
        recipe = replace(recipe, real_entity_share=args.real_entity_share)
    if args.vocab_drill_min_count is not None:
        if args.vocab_drill_min_count < 0:
            parser.error(f"--vocab-drill-min-count must be >= 0, got {args.vocab_drill_min_count}")
        recipe = replace(recipe, vocab_drill_min_count=args.vocab_drill_min_count)
    if args.drill_copy_starts is not None:
        recipe = replace(recipe, drill_copy_starts=args.drill_copy_starts)
    if args.group_size is not None:
        if not 1 <= args.group_size <= MAX_GROUP_SIZE:
            parser.error(f"--group-size must be 1 to {MAX_GROUP_SIZE}, got {args.group_size}")
        recipe = replace(recipe, group_size=args.group_size)
    if args.row_len is not None:
        try:
            recipe = with_row_len(recipe, args.row_len)
        except ValueError as error:
            parser.error(str(error))
    if recipe.real_entity_share > 0:
        try:
            importlib.import_module("faker")
        except ImportError:
            parser.error(
                f"the recipe mixes real-world names into the corpus (--real-entity-share {recipe.real_entity_share:g}),"
                " which needs Faker: pip install 'switchyard[train]' (or pass --real-entity-share 0)"
            )
    try:
        results = train_default(args.output, args.checkpoint_dir, args.minutes, args.seed, args.resume, recipe,
                                progress=not args.no_progress)  # fmt: skip
    except ResumeMismatchError as error:
        print(f"switchyard train-default: error: {error}", file=sys.stderr)
        return 2
    for name, result in results.items():
        print(
            f"{name}: {result.steps} steps, {result.tokens_seen:,} tokens, final loss {result.final_loss:.4f}, "
            f"{result.wall_time_s / 60:.1f} min -> {Path(args.output) / name}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def _faker_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("faker")
    except PackageNotFoundError:
        return "?"
