"""Training speed of a bundled model shape under three layouts of the same conversations:

- "masked": attention over the whole packed row under transformers' block-diagonal mask;
- "packed": one causal SDPA per packed example (`packed_attention`), the recipe's backend;
- "grouped": the corpus drawn in shared-prefix groups (`sessions`), each group's common prompt packed once.

All run in the same process, on corpora drawn with the same seed, interleaved in rounds so a neighbour's load
hits each alike; the model, optimizer and data order are those of `switchyard train-default`. The measure that
compares the layouts is conversations per second (a grouped step holds more conversations in the same tokens).

    python training/probes/train_step.py --steps 6 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from switchyard.models.cpu_bf16 import cpu_has_native_bf16
from switchyard_training.chat_format import ENDOFTEXT
from switchyard_training.corpus import CorpusConfig, generate_corpus
from switchyard_training.data import PackedRows, pack_examples, tokenize_examples
from switchyard_training.induction_init import InductionInit
from switchyard_training.model_builder import build_guarded_model, padded_vocab_size
from switchyard_training.packed_attention import PACKED_SDPA
from switchyard_training.recipe import DRAFT_SHAPE, MAIN_SHAPE, DefaultRecipe, TrainConfig
from switchyard_training.tokenizer_training import corpus_texts, train_tokenizer
from switchyard_training.train_loop import apply_update, assistant_loss, batch_rows, make_optimizer


@dataclass
class Layout:
    backend: str
    rows: PackedRows
    batch_rows: int

    @property
    def conversations_per_step(self) -> float:
        return self.rows.num_examples / self.rows.num_rows * self.batch_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=("main", "draft"), default="main")
    parser.add_argument("--examples", type=int, default=3000, help="corpus conversations to pack")
    recipe = DefaultRecipe()
    parser.add_argument(
        "--group-size",
        type=int,
        default=recipe.group_size,
        help="conversations per group in the grouped layout (default: the recipe's, %(default)s)",
    )
    parser.add_argument(
        "--group-row-len",
        type=int,
        default=recipe.row_len,
        help="row length of the grouped layout (default: the recipe's, %(default)s)",
    )
    parser.add_argument("--lone-row-len", type=int, default=768,
                        help="row length of the masked and packed layouts (default: %(default)s)")  # fmt: skip
    parser.add_argument("--layouts", default="masked,packed,grouped")
    parser.add_argument("--steps", type=int, default=8, help="timed steps per layout per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int)
    parser.add_argument("--precision", choices=("auto", "bf16", "fp32"), default="auto",
                        help="bf16 autocast or float32 (auto: bf16 where this CPU computes it natively)")  # fmt: skip
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    bf16 = args.precision == "bf16" or (args.precision == "auto" and cpu_has_native_bf16())
    step_tokens = recipe.main.batch_rows * recipe.row_len
    if step_tokens % args.group_row_len or step_tokens % args.lone_row_len:
        parser.error(f"row lengths must divide the recipe's {step_tokens} tokens per step")
    lone = generate_corpus(CorpusConfig(seed=11, size=args.examples))
    tokenizer = train_tokenizer(corpus_texts(lone[:2000]), recipe.vocab_size)
    pad = tokenizer.token_to_id(ENDOFTEXT)
    lone_rows = pack_examples(tokenize_examples(tokenizer, lone), args.lone_row_len, pad)
    grouped = generate_corpus(CorpusConfig(seed=11, size=args.examples, group_size=args.group_size))
    grouped_rows = pack_examples(tokenize_examples(tokenizer, grouped), args.group_row_len, pad)
    available = {
        "masked": Layout("sdpa", lone_rows, step_tokens // args.lone_row_len),
        "packed": Layout(PACKED_SDPA, lone_rows, step_tokens // args.lone_row_len),
        "grouped": Layout(PACKED_SDPA, grouped_rows, step_tokens // args.group_row_len),
    }
    layouts = {name: available[name] for name in args.layouts.split(",")}
    shape = MAIN_SHAPE if args.shape == "main" else DRAFT_SHAPE
    config = TrainConfig(max_steps=1_000_000, lr=1e-4)
    model, guard = build_guarded_model(shape, padded_vocab_size(tokenizer), 1, 0, 0, InductionInit())
    optimizer = make_optimizer(model, config)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    hooks = guard.attach() if guard is not None else []
    times: dict[str, list[float]] = {name: [] for name in layouts}
    step = 0
    for _ in range(args.rounds):
        for name, layout in layouts.items():
            model.set_attn_implementation(layout.backend)
            rows = layout.rows
            for i in range(args.steps + 1):
                index = batch_rows(rows.num_rows, layout.batch_rows, step, seed=0)
                step += 1
                started = time.perf_counter()
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                    loss = assistant_loss(
                        model, rows.input_ids[index], rows.position_ids[index], rows.labels[index]
                    )
                apply_update(model, loss, optimizer, scheduler, config.grad_clip, guard)
                if i > 0:  # the first step after a switch warms the other kernels
                    times[name].append(time.perf_counter() - started)
    for hook in hooks:
        hook.remove()
    median = {name: statistics.median(values) for name, values in times.items()}
    per_second = {name: layouts[name].conversations_per_step / median[name] for name in layouts}
    baseline = "packed" if "packed" in layouts else next(iter(layouts))
    result = {
        "shape": args.shape,
        "threads": torch.get_num_threads(),
        "bf16_autocast": bf16,
        "group_size": args.group_size,
        "seconds_per_step": {name: round(value, 4) for name, value in median.items()},
        "conversations_per_step": {name: round(layout.conversations_per_step, 2) for name, layout in layouts.items()},
        "conversations_per_second": {name: round(value, 2) for name, value in per_second.items()},
        f"speedup_over_{baseline}": {name: round(value / per_second[baseline], 3) for name, value in per_second.items()},
        "steps_per_layout": len(next(iter(times.values()))),
    }  # fmt: skip
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
