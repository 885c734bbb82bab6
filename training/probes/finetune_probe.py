"""Fine-tune probe for corpus changes: continue a trained main model on a changed corpus, then grade it.

A full `switchyard train-default` run costs 90 minutes and single runs differ by up to 0.1 on the gate's
metrics, so a corpus change is first tried here: the trained main model continues a few hundred steps, with the
recipe's optimiser settings at a lower learning rate, its wired circuit guarded and the copy-start loss on, on a
fresh corpus draw made with the change; an arm without the change (same steps, same draw otherwise) is the
baseline. Both arms are then graded greedily on the held-out JSON and grounded conversations, as the gate
grades them (same scoring, same failure kinds).

    python training/probes/finetune_probe.py --model M --out /tmp/base
    python training/probes/finetune_probe.py --model M --out /tmp/value --grounded-forms quote=0.1,value=0.75

The arms are paired (same model, seed and draw), so a difference between them is the change's, at this horizon;
what a full run from scratch makes of the change needs that run.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer

from switchyard_training.chat_format import ENDOFTEXT, IM_END
from switchyard_training.corpus import CorpusConfig, generate_corpus, heldout_config
from switchyard_training.data import pack_examples, tokenize_examples
from switchyard_training.example import Category
from switchyard_training.export import write_model_folder
from switchyard_training.induction_init import SpaceVariants
from switchyard_training.model_builder import build_guarded_model, padded_vocab_size
from switchyard_training.pipeline import pointer_supervision
from switchyard_training.quality import EngineGenerator, evaluate
from switchyard_training.recipe import DefaultRecipe
from switchyard_training.tasks.context import GroundedForms
from switchyard_training.train import parse_grounded_forms, parse_mix
from switchyard_training.train_loop import train_model

GRADED = {Category.JSON_EXTRACTION: 1.0, Category.GROUNDED: 1.0}


def finetune(
    folder: Path,
    out: Path,
    steps: int,
    lr: float,
    corpus_size: int,
    corpus_seed: int,
    train_seed: int,
    grounded_forms: GroundedForms,
    mix: dict[Category, float],
) -> dict[str, float]:
    recipe = DefaultRecipe()
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    examples = generate_corpus(
        CorpusConfig(
            seed=corpus_seed,
            size=corpus_size,
            weights={**recipe.corpus_weights, **mix},
            group_size=recipe.group_size,
            grounded_forms=grounded_forms,
        )
    )
    pad = tokenizer.token_to_id(ENDOFTEXT)
    rows = pack_examples(tokenize_examples(tokenizer, examples), recipe.row_len, pad_id=pad)
    vocab, eos = padded_vocab_size(tokenizer), tokenizer.token_to_id(IM_END)
    variants = SpaceVariants.from_vocab(tokenizer.get_vocab())
    assert recipe.induction is not None
    induction = replace(recipe.induction, locator_layers=recipe.main_locator_layers)
    # the training seed rebuilds the same wired circuit, so the guard holds the values the model was trained with
    model, guard = build_guarded_model(recipe.main_shape, vocab, eos, pad, train_seed, induction, variants)
    state = {name: tensor.float() for name, tensor in load_file(str(folder / "model.safetensors")).items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise SystemExit(f"{folder} does not hold the recipe's main shape: {missing} {unexpected}")
    pointer = pointer_supervision(recipe, recipe.main_shape, induction, vocab, variants, tokenizer)
    config = replace(
        recipe.main,
        max_steps=steps,
        lr=lr,
        warmup_steps=min(20, steps),
        row_len=recipe.row_len,
        seed=corpus_seed,
    )
    result = train_model(model, rows, config, None, desc="finetune", guard=guard, pointer=pointer)
    write_model_folder(model, tokenizer, out, f"# fine-tune probe of {folder.name}\n", 2048)
    return {
        "steps": result.steps,
        "loss": round(result.final_loss, 4),
        "pointer_loss": round(result.final_pointer_loss or 0.0, 4),
        "minutes": round(result.wall_time_s / 60, 1),
    }


def grade(folder: Path, examples: int, seed: int) -> dict[str, object]:
    held = generate_corpus(replace(heldout_config(size=examples, seed=seed), weights=dict(GRADED)))
    generator = EngineGenerator(folder)
    generator.prefetch(held)
    report = evaluate(generator, held)
    metrics = {
        name: {"rate": round(m.rate, 3), "total": m.total}
        for name, m in report.metrics.items()
        if name in ("json_extraction", "grounded") and m.total
    }
    return {"metrics": metrics, "failure_kinds": report.failure_kinds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, required=True, help="folder of a trained main model")
    parser.add_argument("--out", type=Path, required=True, help="where the fine-tuned folder goes")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--corpus-size", type=int, default=8000)
    parser.add_argument("--corpus-seed", type=int, default=7, help="a draw the model was not trained on")
    parser.add_argument("--train-seed", type=int, default=0, help="seed the model was trained with")
    parser.add_argument("--grounded-forms", type=parse_grounded_forms, default=GroundedForms())
    parser.add_argument("--mix", type=parse_mix, default={}, help="corpus shares to change")
    parser.add_argument(
        "--eval-examples", type=int, default=600, help="held-out JSON and grounded conversations"
    )
    parser.add_argument(
        "--skip-train", action="store_true", help="grade --model as it is (the starting point)"
    )
    args = parser.parse_args(argv)
    torch.manual_seed(args.corpus_seed)
    report: dict[str, object] = {"grounded_forms": args.grounded_forms.__dict__}
    graded = args.model
    if not args.skip_train:
        started = time.monotonic()
        report["train"] = finetune(args.model, args.out, args.steps, args.lr, args.corpus_size,
                                   args.corpus_seed, args.train_seed, args.grounded_forms, args.mix)  # fmt: skip
        report["train"]["total_minutes"] = round((time.monotonic() - started) / 60, 1)  # type: ignore[index]
        graded = args.out
    report |= grade(graded, args.eval_examples, args.train_seed)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
