"""`switchyard train-default`: trains Switchyard's two bundled models from nothing (`pipeline.train_default`)
with the recipe (`recipe.DefaultRecipe`), whose fields the flags here change for ablations."""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading
from dataclasses import replace
from pathlib import Path

import torch

from switchyard.models.registry import BUNDLED_DIR
from switchyard_training.checkpoint import ResumeMismatchError
from switchyard_training.example import Category
from switchyard_training.pipeline import train_default
from switchyard_training.recipe import DefaultRecipe, with_row_len
from switchyard_training.sessions import MAX_GROUP_SIZE
from switchyard_training.tasks.context import GroundedForms
from switchyard_training.tokenizer_training import WordStarts
from switchyard_training.train_loop import TrainingPreempted


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
                        help="folder to write <model-name>/ folders into (default: the runtime package's models/bundled)")  # fmt: skip
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
                " which needs Faker: pip install faker (or pass --real-entity-share 0)"
            )
    # A scheduler's preemption (SIGTERM, then a grace period) checkpoints after the step in progress.
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda _signum, _frame: stop.set())
    try:
        results = train_default(args.output, args.checkpoint_dir, args.minutes, args.seed, args.resume, recipe,
                                progress=not args.no_progress, stop=stop)  # fmt: skip
    except ResumeMismatchError as error:
        print(f"switchyard train-default: error: {error}", file=sys.stderr)
        return 2
    except TrainingPreempted as preempted:
        print(
            f"switchyard train-default: preempted after step {preempted.step}; checkpointed in "
            f"{args.checkpoint_dir}: continue with --resume",
            file=sys.stderr,
        )
        return PREEMPTED_EXIT
    for name, result in results.items():
        print(
            f"{name}: {result.steps} steps, {result.tokens_seen:,} tokens, final loss {result.final_loss:.4f}, "
            f"{result.wall_time_s / 60:.1f} min -> {Path(args.output) / name}"
        )
    return 0


PREEMPTED_EXIT = 75
"""EX_TEMPFAIL: stopped by a preemption with a checkpoint; run again with --resume."""


if __name__ == "__main__":
    raise SystemExit(main())
