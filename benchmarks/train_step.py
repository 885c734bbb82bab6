"""Seconds per training step of a bundled model shape: attention over the whole packed row under
transformers' block-diagonal mask ("masked") against one causal SDPA per packed example ("packed").

Both run in the same process on the same rows of the real corpus, interleaved in rounds so a neighbour's load
hits both alike; the model, optimizer and data order are those of `switchyard train-default`.

    python benchmarks/train_step.py --steps 8 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from switchyard.bundled.chat_format import ENDOFTEXT
from switchyard.bundled.corpus import CorpusConfig, generate_corpus
from switchyard.bundled.data import pack_examples, tokenize_examples
from switchyard.bundled.induction_init import InductionInit
from switchyard.bundled.packed_attention import PACKED_SDPA, packed_segment_lengths
from switchyard.bundled.tokenizer_training import corpus_texts, train_tokenizer
from switchyard.bundled.train import (
    DRAFT_SHAPE,
    MAIN_SHAPE,
    DefaultRecipe,
    TrainConfig,
    apply_update,
    assistant_loss,
    batch_rows,
    build_guarded_model,
    make_optimizer,
    padded_vocab_size,
)

BACKENDS = {"masked": "sdpa", "packed": PACKED_SDPA}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=("main", "draft"), default="main")
    parser.add_argument("--examples", type=int, default=3000, help="corpus conversations to pack")
    parser.add_argument("--steps", type=int, default=8, help="timed steps per backend per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    recipe = DefaultRecipe()
    examples = generate_corpus(CorpusConfig(seed=11, size=args.examples))
    tokenizer = train_tokenizer(corpus_texts(examples[:2000]), recipe.vocab_size)
    rows = pack_examples(
        tokenize_examples(tokenizer, examples), recipe.row_len, tokenizer.token_to_id(ENDOFTEXT)
    )
    segments = len(packed_segment_lengths(rows.position_ids)) / rows.num_rows
    shape = MAIN_SHAPE if args.shape == "main" else DRAFT_SHAPE
    config = TrainConfig(max_steps=1_000_000, lr=1e-4)
    vocab = padded_vocab_size(tokenizer)
    model, guard = build_guarded_model(shape, vocab, 1, 0, 0, InductionInit())
    optimizer = make_optimizer(model, config)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    hooks = guard.attach() if guard is not None else []
    times: dict[str, list[float]] = {name: [] for name in BACKENDS}
    step = 0
    for _ in range(args.rounds):
        for name, backend in BACKENDS.items():
            model.set_attn_implementation(backend)
            for i in range(args.steps + 1):
                index = batch_rows(rows.num_rows, config.batch_rows, step, seed=0)
                step += 1
                started = time.perf_counter()
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    loss = assistant_loss(
                        model, rows.input_ids[index], rows.position_ids[index], rows.labels[index]
                    )
                apply_update(model, loss, optimizer, scheduler, config.grad_clip, guard)
                if i > 0:  # the first step after a switch warms the other kernels
                    times[name].append(time.perf_counter() - started)
    for hook in hooks:
        hook.remove()
    median = {name: statistics.median(values) for name, values in times.items()}
    result = {
        "shape": args.shape,
        "threads": torch.get_num_threads(),
        "examples_per_row": round(segments, 2),
        "seconds_per_step": {name: round(value, 4) for name, value in median.items()},
        "packed_speedup": round(median["masked"] / median["packed"], 3),
        "steps_per_backend": len(times["masked"]),
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
