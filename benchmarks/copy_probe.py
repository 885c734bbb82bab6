"""Copy probe for bundled-model recipes: a few hundred training steps, then how much of the prompt is copied.

Cheaper than a full `switchyard train-default` plus the gate (minutes, not 90): trains the main shape on a small
corpus and reports, on held-out examples with teacher forcing, accuracy on reply tokens that are rare tokens of
the prompt ("copy") and on the others, plus the wired circuit's health on repeated random tokens (copy accuracy,
previous-token attention of layer 0 head 0, induction attention of layer 1 head 0).

    python benchmarks/copy_probe.py --steps 300                 # the default recipe
    python benchmarks/copy_probe.py --steps 300 --no-circuit    # plain random init
"""

from __future__ import annotations

import argparse
import collections
import json
import time
from dataclasses import replace

import torch

from switchyard.bundled.chat_format import ENDOFTEXT, IM_END
from switchyard.bundled.corpus import CorpusConfig, generate_corpus, heldout_config
from switchyard.bundled.data import TokenizedExample, pack_examples, tokenize_examples
from switchyard.bundled.induction_init import InductionInit, SpaceVariants
from switchyard.bundled.tokenizer_training import corpus_texts, train_tokenizer
from switchyard.bundled.train import (
    MAIN_SHAPE,
    DefaultRecipe,
    WarmupCosine,
    assistant_loss,
    batch_rows,
    build_guarded_model,
    make_optimizer,
    padded_vocab_size,
)


def evaluate(model: torch.nn.Module, held: list[TokenizedExample], common: set[int]) -> dict[str, float]:
    model.eval()
    hit: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    with torch.no_grad():
        for example in held:
            ids = torch.tensor([example.ids])
            predicted = model(input_ids=ids, use_cache=False).logits[0, :-1].argmax(-1)
            prompt = {t for t, m in zip(example.ids, example.loss_mask, strict=True) if not m}
            for i, target in enumerate(example.ids[1:]):
                if example.loss_mask[i + 1]:
                    kind = "copy" if target in prompt and target not in common else "other"
                    total[kind] += 1
                    hit[kind] += int(predicted[i] == target)
        high = model.config.vocab_size
        first = torch.randint(high // 10, high, (4, 80), generator=torch.Generator().manual_seed(5))
        ids = torch.cat([first, first], dim=1)
        model.config._attn_implementation = "eager"
        out = model(input_ids=ids, use_cache=False, output_attentions=True)
        model.config._attn_implementation = "sdpa"
        repeat = float((out.logits[:, 80:-1].argmax(-1) == ids[:, 81:]).float().mean())
        positions, second = torch.arange(1, 160), torch.arange(80, 159)
        previous = float(out.attentions[0][:, 0, positions, positions - 1].mean())
        induction = float(out.attentions[1][:, 0, second, second - 79].mean())
    model.train()
    rates = {k: round(hit[k] / total[k], 3) for k in total}
    return rates | {
        "repeat": round(repeat, 3),
        "prev_att": round(previous, 3),
        "ind_att": round(induction, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--corpus-size", type=int, default=12_000)
    parser.add_argument("--no-circuit", action="store_true", help="plain random init")
    parser.add_argument("--report-every", type=int, default=50)
    args = parser.parse_args()
    recipe = DefaultRecipe()
    examples = generate_corpus(CorpusConfig(seed=0, size=args.corpus_size))
    tokenizer = train_tokenizer(corpus_texts(examples[: args.corpus_size // 2]), recipe.vocab_size)
    rows = pack_examples(
        tokenize_examples(tokenizer, examples), recipe.row_len, tokenizer.token_to_id(ENDOFTEXT)
    )
    held = tokenize_examples(tokenizer, generate_corpus(heldout_config(300)))
    seen = collections.Counter(t for e in tokenize_examples(tokenizer, examples[:3000]) for t in set(e.ids))
    common = {t for t, count in seen.items() if count > 150}
    induction = None if args.no_circuit else (recipe.induction or InductionInit())
    model, guard = build_guarded_model(MAIN_SHAPE, padded_vocab_size(tokenizer), tokenizer.token_to_id(IM_END),
                                       tokenizer.token_to_id(ENDOFTEXT), 0, induction,
                                       SpaceVariants.from_vocab(tokenizer.get_vocab()))  # fmt: skip
    config = replace(recipe.main, max_steps=4000)  # the full run's early learning rate, not a short cosine
    optimizer = make_optimizer(model, config)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, WarmupCosine(config.warmup_steps, config.max_steps, config.min_lr_ratio)
    )
    hooks = guard.attach() if guard is not None else []
    print(json.dumps({"step": 0} | evaluate(model, held, common)), flush=True)
    started, losses = time.monotonic(), []
    for step in range(args.steps):
        index = batch_rows(rows.num_rows, config.batch_rows, step, 0)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = assistant_loss(model, rows.input_ids[index], rows.position_ids[index], rows.labels[index])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        if guard is not None:
            guard.restore()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
        losses.append(float(loss.detach()))
        if (step + 1) % args.report_every == 0 or step + 1 == args.steps:
            report = {"step": step + 1, "loss": round(sum(losses[-20:]) / len(losses[-20:]), 3),
                      "seconds": round(time.monotonic() - started)}  # fmt: skip
            print(json.dumps(report | evaluate(model, held, common)), flush=True)
    for hook in hooks:
        hook.remove()


if __name__ == "__main__":
    main()
