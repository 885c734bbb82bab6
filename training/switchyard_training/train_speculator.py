"""Train a speculator (`models.speculator`) for a main model: distil its next-token distributions, k ahead.

The target model is frozen. Each batch of corpus conversations goes through it once (no gradients) for its
normalised hidden states and its logits; at every position t whose next-but-one token is an assistant reply
token, the speculator reads h_t and the tokens t+1... and learns to give, at step i, the target's own
distribution at position t+1+i (soft labels: the speculator's q then approaches p, which is what speculative
sampling accepts with, and greedy agreement follows). Teacher-forced: step i's input token is the text's, which
on assistant replies is what the target itself would write.

Reading hidden states instead of text makes the speculator cheap to train (minutes, not a model's hour) and
cheap to run (no layers, no KV cache), and it learns the target's habits rather than the corpus's.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
import transformers
from tokenizers import Tokenizer
from tqdm.auto import tqdm

from switchyard.errors import SwitchyardError
from switchyard.models.cpu_bf16 import cpu_has_native_bf16
from switchyard.models.registry import BUNDLED_DIR, MAIN_MODEL, SPECULATOR_MODEL, resolve_model
from switchyard.models.speculator import Speculator, SpeculatorConfig
from switchyard.models.tokenizer import load_tokenizer
from switchyard_training.chat_data import chat_examples
from switchyard_training.checkpoint import (
    CHECKPOINT_FILE,
    ResumeMismatchError,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from switchyard_training.corpus import CorpusConfig, heldout_config, iter_corpus
from switchyard_training.data import TokenizedExample, tokenize_examples
from switchyard_training.entities import training_entities
from switchyard_training.example import Category
from switchyard_training.recipe import DefaultRecipe
from switchyard_training.train import PREEMPTED_EXIT
from switchyard_training.train_loop import TrainingPreempted, WarmupCosine


@dataclass(frozen=True)
class SpeculatorRecipe:
    num_steps: int = 4
    minutes: float = 20.0
    """Training time, the target's forward passes included. For the bundled model, 20 minutes against 10:
    held-out first-step agreement 0.679 against 0.664, 3.25 tokens a verification in the engine against 3.15."""
    batch_tokens: int = 8192
    """Conversation tokens per step through the target (about 20 conversations)."""
    lr: float = 1e-2
    """Measured at 4 minutes: held-out mean leading run 1.83 at 1e-2 against 0.27 at 3e-3 in 1.5 minutes
    (the embeddings and head start from the target's, whose rows are large)."""
    warmup_steps: int = 20
    seed: int = 17
    """Corpus seed: not the main model's (0), so the conversations are new to the target as well."""
    corpus_weights: dict[Category, float] = field(
        default_factory=lambda: dict(DefaultRecipe().corpus_weights)
    )
    eval_examples: int = 300
    """Held-out conversations for the agreement measured at the end (held-out names, the gate's mix)."""


@dataclass(frozen=True)
class SpeculatorTrainResult:
    steps: int
    positions: int
    """Trained positions (assistant tokens with a hidden state before them)."""
    final_loss: float
    seconds: float
    step_agreement: list[float]
    """Held-out, teacher-forced: how often step i's greedy guess equals the target's greedy token."""
    mean_accepted: float
    """Held-out: mean run of leading guesses that agree with the target, out of num_steps; a greedy
    verification accepts this many per step on text that follows the target's own path."""


@dataclass(frozen=True)
class SpeculatorCheckpoints:
    """Where a preemptible run keeps its state, so a scheduler may stop it and start it again later."""

    folder: Path
    resume: bool = False
    """Continue from `folder`'s checkpoint when there is one (a fresh start when there is none, so a job's
    command can always carry `--resume`)."""
    every_steps: int = 50
    run: dict[str, Any] = field(default_factory=dict)
    """What the run trains on (model, data, recipe but its minutes); a resume with another refuses to go on,
    since the batches it skips would not be the ones its checkpoint was trained on."""

    @property
    def path(self) -> Path:
        return self.folder / CHECKPOINT_FILE

    def load(self) -> dict[str, Any] | None:
        state = load_checkpoint(self.path) if self.resume else None
        if state is not None and state["run"] != self.run:
            raise ResumeMismatchError(
                f"the checkpoint in {self.folder} belongs to another run ({state['run']}): resume with the "
                "flags the run started with, or use another --checkpoint-dir"
            )
        return state


def load_target(folder: Path, dtype: torch.dtype) -> transformers.PreTrainedModel:
    model = transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype)
    return model.eval()


def conversation_batches(
    examples: Iterator[TokenizedExample], batch_tokens: int, pool: int = 256
) -> Iterator[list[TokenizedExample]]:
    """Batches of about `batch_tokens` padded tokens, each of conversations of similar length (sorted within
    a pool), so padding wastes little of the target's forward pass."""

    def batches_of(group: list[TokenizedExample]) -> Iterator[list[TokenizedExample]]:
        group.sort(key=lambda e: len(e.ids))
        batch: list[TokenizedExample] = []
        for example in group:
            if batch and len(example.ids) * (len(batch) + 1) > batch_tokens:
                yield batch
                batch = []
            batch.append(example)
        if batch:
            yield batch

    buffer: list[TokenizedExample] = []
    for example in examples:
        buffer.append(example)
        if len(buffer) == pool:
            yield from batches_of(buffer)
            buffer = []
    if buffer:
        yield from batches_of(buffer)


def tokenized_corpus(
    config: CorpusConfig, tokenizer: Tokenizer, chunk: int = 256
) -> Iterator[TokenizedExample]:
    buffer = []
    for example in iter_corpus(config):
        buffer.append(example)
        if len(buffer) == chunk:
            yield from tokenize_examples(tokenizer, buffer)
            buffer = []
    if buffer:
        yield from tokenize_examples(tokenizer, buffer)


@dataclass
class SpeculatorBatch:
    hidden: torch.Tensor
    """[P, H] the target's hidden state at each trained position."""
    tokens: torch.Tensor
    """[P, steps] the tokens the speculator reads (token 0 is what the target sampled from the hidden)."""
    target_logits: torch.Tensor
    """[P, steps, V] the target's logits after each of those tokens."""
    weights: torch.Tensor
    """[P, steps] 1 where step i's label is an assistant token inside the conversation, else 0."""


@torch.no_grad()
def target_batch(
    target: transformers.PreTrainedModel, examples: list[TokenizedExample], steps: int
) -> SpeculatorBatch:
    """One forward of the target over padded conversations, gathered at the positions worth training."""
    length = max(len(e.ids) for e in examples)
    ids = torch.zeros(len(examples), length, dtype=torch.long)
    mask = torch.zeros(len(examples), length, dtype=torch.bool)
    for row, example in enumerate(examples):
        ids[row, : len(example.ids)] = torch.tensor(example.ids)
        mask[row, : len(example.ids)] = torch.tensor(example.loss_mask)
    hidden = target.model(input_ids=ids).last_hidden_state
    logits = target.lm_head(hidden)
    hidden, logits = hidden.float(), logits.float()
    # Position t trains when token t + 2 (step 0's label) is an assistant token.
    rows, cols = torch.nonzero(mask[:, 2:], as_tuple=True)
    offsets = torch.arange(steps)
    label_cols = cols[:, None] + 2 + offsets  # [P, steps]: the token each step predicts
    inside = label_cols < length
    label_cols_c = label_cols.clamp(max=length - 1)
    weights = (inside & mask[rows[:, None], label_cols_c]).float()
    return SpeculatorBatch(
        hidden=hidden[rows, cols],
        tokens=ids[rows[:, None], label_cols_c - 1],
        target_logits=logits[rows[:, None], label_cols_c - 1],
        weights=weights,
    )


def distillation_loss(speculator: Speculator, batch: SpeculatorBatch) -> torch.Tensor:
    """Cross-entropy of the speculator's q against the target's p, step by step, where the step's label exists."""
    logits = speculator(batch.hidden, batch.tokens).float()
    p = F.softmax(batch.target_logits, dim=-1)
    per_step = -(p * F.log_softmax(logits, dim=-1)).sum(-1)
    return (per_step * batch.weights).sum() / batch.weights.sum().clamp(min=1.0)


@torch.no_grad()
def agreement(speculator: Speculator, batch: SpeculatorBatch) -> tuple[list[float], float, int]:
    """Per-step greedy agreement with the target, the mean leading run of agreements, and the positions used
    (those whose every step has a label)."""
    full = batch.weights.bool().all(dim=1)
    logits = speculator(batch.hidden[full], batch.tokens[full])
    agree = logits.argmax(-1) == batch.target_logits[full].argmax(-1)  # [P, steps]
    per_step = agree.float().mean(0).tolist()
    run = agree.int().cumprod(dim=1).sum(dim=1).float().mean().item()
    return per_step, run, int(full.sum())


def new_speculator(target: transformers.PreTrainedModel, num_steps: int) -> Speculator:
    """A speculator for `target`, its embeddings, head and norm scale taken from the target's."""
    config = target.config
    speculator = Speculator(SpeculatorConfig(config.hidden_size, config.vocab_size, num_steps))
    weights = (target.get_input_embeddings().weight, target.lm_head.weight, target.model.norm.weight)
    speculator.init_from_target(*(w.float() for w in weights))
    return speculator


def fit_speculator(
    speculator: Speculator,
    target: transformers.PreTrainedModel,
    batches: Iterable[list[TokenizedExample]],
    recipe: SpeculatorRecipe,
    max_steps: int | None = None,
    progress: bool = True,
    *,
    checkpoints: SpeculatorCheckpoints | None = None,
    stop: threading.Event | None = None,
) -> tuple[int, int, float]:
    """Train until `recipe.minutes` pass, `max_steps` are taken or the batches run out; returns the steps, the
    positions trained and the last step's loss. The learning rate warms up, then follows a cosine planned
    from the pace of the first steps.

    With `checkpoints`, the state (weights, optimizer, schedule, RNG, steps, time spent) is saved every
    `every_steps` steps and at the end; resumed, the run skips the batches its checkpoint was trained on and
    counts the time already spent against the budget. When `stop` is set (a preemption's SIGTERM), the run
    checkpoints after the step in progress and raises TrainingPreempted: no step is lost."""
    started = time.monotonic()
    budget = recipe.minutes * 60
    autocast = cpu_has_native_bf16()
    optimizer = torch.optim.AdamW(speculator.parameters(), lr=recipe.lr, weight_decay=0.0, betas=(0.9, 0.95))
    speculator.train()
    steps = positions = 0
    loss_value = math.nan
    elapsed_before = 0.0
    # Planned from the pace of the first steps when only the time bounds the run.
    schedule = WarmupCosine(recipe.warmup_steps, max_steps or 1_000_000_000, min_ratio=0.1)
    state = checkpoints.load() if checkpoints is not None else None
    if state is not None:
        speculator.load_state_dict(state["speculator"])
        optimizer.load_state_dict(state["optimizer"])
        set_rng_state(state["rng"])
        steps, positions, loss_value = state["steps"], state["positions"], state["loss"]
        elapsed_before, schedule.total = state["elapsed_s"], state["planned_steps"]
        batches = itertools.islice(batches, steps, None)  # the batches already trained on

    def checkpoint() -> None:
        if checkpoints is None:
            return
        save_checkpoint(
            checkpoints.path,
            {
                "run": checkpoints.run,
                "speculator": speculator.state_dict(),
                "optimizer": optimizer.state_dict(),
                "rng": rng_state(),
                "steps": steps,
                "positions": positions,
                "loss": loss_value,
                "elapsed_s": elapsed_before + time.monotonic() - started,
                "planned_steps": schedule.total,
            },
        )

    bar = tqdm(total=int(budget), desc="speculator", unit="s", disable=not progress)
    for examples in batches:
        elapsed = elapsed_before + time.monotonic() - started
        if elapsed >= budget or (max_steps is not None and steps >= max_steps):
            break
        batch = target_batch(target, examples, speculator.config.num_steps)
        if steps == 5 and max_steps is None:
            schedule.total = int(steps * budget / max(elapsed, 1e-6))
        for group in optimizer.param_groups:
            group["lr"] = recipe.lr * schedule(steps)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = distillation_loss(speculator, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(speculator.parameters(), 1.0)
        optimizer.step()
        steps += 1
        positions += batch.hidden.shape[0]
        loss_value = float(loss.detach())
        bar.n = min(int(elapsed_before + time.monotonic() - started), int(budget))
        bar.set_postfix(step=steps, loss=f"{loss_value:.3f}")
        if checkpoints is not None and steps % checkpoints.every_steps == 0:
            checkpoint()
        if stop is not None and stop.is_set():
            checkpoint()
            bar.close()
            raise TrainingPreempted(steps)
    bar.close()
    checkpoint()
    speculator.eval()
    return steps, positions, loss_value


def train_speculator(
    main: str | Path = MAIN_MODEL,
    output: str | Path = BUNDLED_DIR / SPECULATOR_MODEL,
    recipe: SpeculatorRecipe | None = None,
    progress: bool = True,
    data: Path | None = None,
    checkpoint_dir: Path | None = None,
    resume: bool = False,
    stop: threading.Event | None = None,
    checkpoint_every: int = 50,
) -> SpeculatorTrainResult:
    """Train a speculator for `main`, measure its held-out agreement, and write its folder (bf16 weights,
    config, card) to `output`. The data: a fresh corpus of the bundled recipe's mix, or with `data` the
    conversations of that JSONL file rendered with the model's own template (`chat_data`), its last
    `recipe.eval_examples` held out (at most a fifth of it) and the rest repeated until the time is up.
    With `checkpoint_dir` the training is resumable (`fit_speculator`); `resume` continues it there."""
    recipe = recipe or SpeculatorRecipe()
    checkpoints = None
    if checkpoint_dir is not None:
        run = {
            "model": str(main),
            "data": None if data is None else str(data),
            "recipe": {k: v for k, v in asdict(recipe).items() if k != "minutes"},
        }
        checkpoints = SpeculatorCheckpoints(Path(checkpoint_dir), resume, checkpoint_every, run)
    earlier_s = _seconds_before(checkpoints)
    torch.manual_seed(recipe.seed)
    started = time.monotonic()
    folder = resolve_model(main)
    # The target runs in bf16 where the CPU computes it natively, as the engine serves it.
    target = load_target(folder, torch.bfloat16 if cpu_has_native_bf16() else torch.float32)
    target.requires_grad_(False)
    speculator = new_speculator(target, recipe.num_steps)
    if data is None:
        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        default = DefaultRecipe()
        corpus = CorpusConfig(
            seed=recipe.seed,
            size=10_000_000,  # a stream: training stops on time, not on data
            entities=training_entities(default.entity_count, default.real_entity_share),
            weights=recipe.corpus_weights,
            grounded_forms=default.grounded_forms,
        )
        train: Iterable[TokenizedExample] = tokenized_corpus(corpus, tokenizer)
        held_out: Iterable[TokenizedExample] = tokenized_corpus(
            heldout_config(size=recipe.eval_examples), tokenizer
        )
        source = "a fresh corpus of the bundled recipe's mix"
    else:
        examples = list(chat_examples(data, load_tokenizer(folder)))
        if len(examples) < 2:
            raise ValueError(f"{data.name} has fewer than two conversations with assistant turns to train on")
        split = len(examples) - min(recipe.eval_examples, max(1, len(examples) // 5))
        train, held_out = itertools.chain.from_iterable(itertools.repeat(examples[:split])), examples[split:]
        source = f"{split} conversations of {data.name}, rendered with the model's chat template"
    batches = conversation_batches(iter(train), recipe.batch_tokens)
    steps, positions, loss = fit_speculator(
        speculator, target, batches, recipe, progress=progress, checkpoints=checkpoints, stop=stop
    )
    per_step, run = evaluate(speculator, target, held_out, recipe)
    result = SpeculatorTrainResult(
        steps=steps,
        positions=positions,
        final_loss=loss,
        seconds=earlier_s + time.monotonic() - started,
        step_agreement=per_step,
        mean_accepted=run,
    )
    speculator.to(torch.bfloat16).save(output)
    Path(output, "README.md").write_text(speculator_card(Path(str(main)).name, recipe, result, source))
    return result


def _seconds_before(checkpoints: SpeculatorCheckpoints | None) -> float:
    """Training time the runs before this one spent (0 for a fresh start)."""
    state = checkpoints.load() if checkpoints is not None else None
    return 0.0 if state is None else float(state["elapsed_s"])


def evaluate(
    speculator: Speculator,
    target: transformers.PreTrainedModel,
    examples: Iterable[TokenizedExample],
    recipe: SpeculatorRecipe,
) -> tuple[list[float], float]:
    """Held-out agreement per step and mean leading run, over positions whose every step has a label."""
    sums = [0.0] * recipe.num_steps
    run_sum = 0.0
    count = 0
    for batch_examples in conversation_batches(iter(examples), recipe.batch_tokens):
        batch = target_batch(target, batch_examples, recipe.num_steps)
        per_step, run, used = agreement(speculator, batch)
        sums = [s + v * used for s, v in zip(sums, per_step, strict=True)]
        run_sum += run * used
        count += used
    count = max(count, 1)
    return [s / count for s in sums], run_sum / count


def speculator_card(
    main: str,
    recipe: SpeculatorRecipe,
    result: SpeculatorTrainResult,
    source: str = "a fresh corpus of the bundled recipe's mix",
) -> str:
    agreement_row = " | ".join(f"{a:.3f}" for a in result.step_agreement)
    header = " | ".join(f"step {i + 1}" for i in range(len(result.step_agreement)))
    return f"""# Speculator for `{main}`

Recurrent look-ahead heads over `{main}`'s final hidden state (`switchyard.models.speculator`), for
speculative decoding: `switchyard serve --model {main} --speculative-method speculator`. Each proposal step
is one small matrix product, one embedding row, a norm and the LM head, with no attention and no KV cache.
Where its first guess has less probability than `--spec-lookup-below` (0.6), the engine proposes prompt
lookup's continuation instead: the speculator does not see the context, and copying from it is lookup's job.

Trained by `switchyard train-speculator` ({result.steps} steps, {result.positions} positions, {result.seconds / 60:.1f}
minutes; final distillation loss {result.final_loss:.3f}), distilling `{main}`'s own distributions on
{source}.

Held-out agreement with `{main}`'s greedy token (teacher-forced, held-out conversations):

| {header} | mean leading run |
| {" | ".join("---" for _ in result.step_agreement)} | --- |
| {agreement_row} | {result.mean_accepted:.2f} |

Recipe: {json.dumps({k: v for k, v in asdict(recipe).items() if k != "corpus_weights"})}
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="switchyard train-speculator",
        description="Train a speculator (look-ahead heads on the main model's hidden state) for speculative "
        "decoding, distilled from the main model on a generated corpus.",
    )
    parser.add_argument("--model", default=MAIN_MODEL, help="the main model (folder or bundled name)")
    parser.add_argument("--output", type=Path, default=BUNDLED_DIR / SPECULATOR_MODEL, help="folder to write")
    parser.add_argument("--minutes", type=float, default=SpeculatorRecipe.minutes, help="training time")
    parser.add_argument("--steps", type=int, default=SpeculatorRecipe.num_steps, help="tokens per proposal")
    parser.add_argument("--seed", type=int, default=SpeculatorRecipe.seed)
    parser.add_argument(
        "--data",
        type=Path,
        default=None,
        help='train on these conversations instead of the bundled corpus: JSONL, one {"messages": [...], '
        '"tools": [...]} per line (OpenAI chat format), rendered with the model\'s chat template; the last '
        "--eval-examples (at most a fifth) are held out",
    )
    parser.add_argument(
        "--eval-examples",
        type=int,
        default=SpeculatorRecipe.eval_examples,
        help="held-out conversations for the agreement written to the card",
    )
    parser.add_argument(
        "--checkpoint-dir",
        type=Path,
        default=None,
        help="make the run preemptible: checkpoint here every --checkpoint-every steps, and on SIGTERM after "
        "the step in progress (then exit 75); without it the run keeps nothing and SIGTERM ends it",
    )
    parser.add_argument(
        "--checkpoint-every",
        type=int,
        default=SpeculatorCheckpoints.every_steps,
        help="steps between checkpoints (default: %(default)s; a step is a few seconds on the bundled model)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue from --checkpoint-dir's checkpoint (a fresh start when there is none yet): the time "
        "already spent counts against --minutes",
    )
    parser.add_argument("--threads", type=int, default=None)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.minutes <= 0 or args.steps < 1 or args.eval_examples < 1 or args.checkpoint_every < 1:
        build_parser().error("--minutes must be > 0, --steps, --eval-examples and --checkpoint-every >= 1")
    if args.threads:
        torch.set_num_threads(args.threads)
    recipe = SpeculatorRecipe(
        num_steps=args.steps, minutes=args.minutes, seed=args.seed, eval_examples=args.eval_examples
    )
    if args.data is not None and not args.data.is_file():
        build_parser().error(f"--data: no file {args.data}")
    if args.resume and args.checkpoint_dir is None:
        build_parser().error("--resume needs --checkpoint-dir")
    stop = None
    if args.checkpoint_dir is not None:
        # A scheduler's preemption (SIGTERM, then a grace period) checkpoints after the step in progress.
        stop = event = threading.Event()
        signal.signal(signal.SIGTERM, lambda _signum, _frame: event.set())
    try:
        result = train_speculator(
            args.model,
            args.output,
            recipe,
            data=args.data,
            checkpoint_dir=args.checkpoint_dir,
            resume=args.resume,
            stop=stop,
            checkpoint_every=args.checkpoint_every,
        )
    except TrainingPreempted as preempted:
        print(
            f"switchyard train-speculator: preempted after step {preempted.step}; checkpointed in "
            f"{args.checkpoint_dir}: continue with --resume",
            file=sys.stderr,
        )
        return PREEMPTED_EXIT
    except (SwitchyardError, ValueError) as exc:
        build_parser().error(str(exc))
    print(json.dumps(asdict(result), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
