"""Copy probe for bundled-model recipes: a few hundred training steps, then how much of the prompt is copied.

Cheaper than a full `switchyard train-default` plus the gate (minutes, not 90): trains the main shape on a small
corpus and reports, on held-out examples with teacher forcing, accuracy on reply tokens by kind: rare tokens of
the prompt that start a copied span ("copy_first": finding where a value is) or continue one ("copy_next"),
every token of a JSON string value ("value": digits and common pieces included), and the rest ("other"); plus
the wired circuit's health on repeated random tokens (copy accuracy, previous-token attention of layer 0 head
0, induction attention of layer 1 head 0).

    python training/probes/copy_probe.py --steps 400                       # the main model's recipe
    python training/probes/copy_probe.py --steps 400 --locator-layers none # without locator heads
    python training/probes/copy_probe.py --steps 400 --bigram-dims 0       # one-token induction
    python training/probes/copy_probe.py --steps 300 --no-circuit          # plain random init

It also reports how often a quoted grounded reply starts with the asked company rather than another one in the
passages (`company_right`, `company_other`), the choice the run-11 model got wrong most.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import re
import time
from dataclasses import dataclass, replace

import torch
from tokenizers import Tokenizer

from switchyard.models.cpu_bf16 import cpu_has_native_bf16
from switchyard_training.chat_format import ENDOFTEXT, IM_END
from switchyard_training.corpus import CorpusConfig, generate_corpus, heldout_config
from switchyard_training.data import TokenizedExample, pack_examples, tokenize_examples
from switchyard_training.example import Category
from switchyard_training.induction_init import InductionInit, SpaceVariants
from switchyard_training.model_builder import build_guarded_model, padded_vocab_size
from switchyard_training.pipeline import pointer_supervision
from switchyard_training.recipe import MAIN_SHAPE, DefaultRecipe
from switchyard_training.tokenizer_training import WordStarts, corpus_texts, train_tokenizer
from switchyard_training.train_loop import (
    WarmupCosine,
    apply_update,
    assistant_loss,
    batch_rows,
    make_optimizer,
)


def evaluate(
    model: torch.nn.Module, held: list[TokenizedExample], common: set[int], opens: set[int], quotes: set[int]
) -> dict[str, float]:
    """Teacher-forced accuracy by kind of reply token; `value` is every token of a JSON string value (from the
    one after `: "` through the closing quote), common pieces and digits included."""
    model.eval()
    hit: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    with torch.no_grad():
        for example in held:
            ids = torch.tensor([example.ids])
            predicted = model(input_ids=ids, use_cache=False).logits[0, :-1].argmax(-1)
            prompt = {t for t, m in zip(example.ids, example.loss_mask, strict=True) if not m}
            rare = prompt - common
            inside = False
            for i, target in enumerate(example.ids[1:]):
                if example.loss_mask[i]:
                    inside = example.ids[i] in opens or (inside and example.ids[i] not in quotes)
                if example.loss_mask[i + 1] and inside:
                    total["value"] += 1
                    hit["value"] += int(predicted[i] == target)
                if example.loss_mask[i + 1]:
                    kind = "other"
                    if target in rare:  # first: a copied span starts here; next: it continues
                        kind = "copy_next" if example.ids[i] in rare else "copy_first"
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


@dataclass
class CompanyChoice:
    """A grounded question whose reply quotes the cited passage, so its first token starts the asked company's
    name: the prompt's ids up to the reply, that token, and the first tokens of the passages about other
    companies."""

    prompt: list[int]
    asked: int
    others: set[int]


PASSAGE_LINE = re.compile(r"^(.*) \[(\d+)\]\.$")


def company_choices(tokenizer: Tokenizer, count: int) -> list[CompanyChoice]:
    """Held-out grounded questions answered by a quote (`tasks.grounded.grounded_reply`), up to `count`."""
    examples = [e for e in generate_corpus(heldout_config(count * 25)) if e.category == Category.GROUNDED]
    choices = []
    for example, tokens in zip(examples, tokenize_examples(tokenizer, examples), strict=True):
        check = example.checks[0]
        lines = {int(m[2]): m[1] for message in example.messages if message["role"] in ("system", "user")
                 for m in map(PASSAGE_LINE.match, message["content"].splitlines()) if m}  # fmt: skip
        reply = example.messages[check.turn]["content"]
        if check.citation is None or reply != f"{lines[check.citation]} [{check.citation}].":
            continue
        start = tokens.loss_mask.index(True)
        first = {n: tokenizer.encode(text, add_special_tokens=False).ids[0] for n, text in lines.items()}
        asked = tokens.ids[start]
        if first[check.citation] != asked:
            continue  # the reply's first token is not the line's own first token (a space, a merge)
        others = {t for n, t in first.items() if t != asked}
        if others:
            choices.append(CompanyChoice(tokens.ids[:start], asked, others))
    return choices[:count]


def company_choice_rates(model: torch.nn.Module, choices: list[CompanyChoice]) -> dict[str, float]:
    """Greedy first token of a quoted grounded reply: the asked company (`company_right`) or another passage's
    company (`company_other`); and the mean probability given to each."""
    model.eval()
    right = other = 0
    p_asked = p_other = 0.0
    with torch.no_grad():
        for choice in choices:
            logits = model(input_ids=torch.tensor([choice.prompt]), use_cache=False).logits[0, -1]
            probs = logits.float().softmax(-1)
            best = int(probs.argmax())
            right += best == choice.asked
            other += best in choice.others
            p_asked += float(probs[choice.asked])
            p_other += float(probs[list(choice.others)].max())
    model.train()
    n = max(1, len(choices))
    return {"company_right": round(right / n, 3), "company_other": round(other / n, 3),
            "p_asked": round(p_asked / n, 3), "p_other": round(p_other / n, 3)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--corpus-size", type=int, default=12_000)
    parser.add_argument("--no-circuit", action="store_true", help="plain random init")
    parser.add_argument("--report-every", type=int, default=50)
    parser.add_argument(
        "--locator-layers", default=None, help="comma-separated, or 'none' (default: recipe's)"
    )
    parser.add_argument("--locator-strength", type=float, default=InductionInit.locator_strength)
    parser.add_argument("--grounded", type=int, default=150,
                        help="held-out quoted grounded replies whose first token is checked")  # fmt: skip
    parser.add_argument("--lr", type=float, default=None)
    parser.add_argument("--bigram-dims", type=int, default=None, help="override the recipe's bigram_dims")
    parser.add_argument("--context-loss-weight", type=float, default=0.0)
    parser.add_argument("--pointer-weight", type=float, default=0.0,
                        help="copy-start attention loss on the locator heads (the recipe's is 0.1)")  # fmt: skip
    parser.add_argument("--word-starts", choices=[w.value for w in WordStarts], default=None,
                        help="the tokenizer's word-start merges (default: the recipe's)")  # fmt: skip
    args = parser.parse_args()
    recipe = DefaultRecipe()
    examples = generate_corpus(CorpusConfig(seed=0, size=args.corpus_size))
    word_starts = WordStarts(args.word_starts) if args.word_starts else recipe.word_starts
    tokenizer = train_tokenizer(
        corpus_texts(examples[: args.corpus_size // 2]), recipe.vocab_size, word_starts=word_starts
    )
    rows = pack_examples(
        tokenize_examples(tokenizer, examples), recipe.row_len, tokenizer.token_to_id(ENDOFTEXT)
    )
    held = tokenize_examples(tokenizer, generate_corpus(heldout_config(300)))
    seen = collections.Counter(t for e in tokenize_examples(tokenizer, examples[:3000]) for t in set(e.ids))
    common = {t for t, count in seen.items() if count > 150}
    vocab = tokenizer.get_vocab()
    opens = {i for t, i in vocab.items() if t.endswith('\u0120"')}
    quotes = {i for t, i in vocab.items() if '"' in t}
    induction = None if args.no_circuit else (recipe.induction or InductionInit())
    if induction is not None and args.bigram_dims is not None:
        induction = replace(induction, bigram_dims=args.bigram_dims)
    if induction is not None:
        layers = recipe.main_locator_layers
        if args.locator_layers is not None:
            layers = (
                () if args.locator_layers == "none" else tuple(int(x) for x in args.locator_layers.split(","))
            )
        induction = replace(induction, locator_layers=layers, locator_strength=args.locator_strength)
    variants = SpaceVariants.from_vocab(tokenizer.get_vocab())
    model, guard = build_guarded_model(MAIN_SHAPE, padded_vocab_size(tokenizer), tokenizer.token_to_id(IM_END),
                                       tokenizer.token_to_id(ENDOFTEXT), 0, induction, variants)  # fmt: skip
    pointer = pointer_supervision(replace(recipe, pointer_weight=args.pointer_weight), MAIN_SHAPE, induction,
                                  padded_vocab_size(tokenizer), variants, tokenizer)  # fmt: skip
    # the full run's early learning rate, not a short cosine
    config = replace(recipe.main, max_steps=4000, lr=args.lr or recipe.main.lr)
    optimizer = make_optimizer(model, config)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, WarmupCosine(config.warmup_steps, config.max_steps, config.min_lr_ratio)
    )
    hooks = guard.attach() if guard is not None else []
    choices = company_choices(tokenizer, args.grounded)

    def measure() -> dict[str, float]:
        return evaluate(model, held, common, opens, quotes) | company_choice_rates(model, choices)

    print(json.dumps({"step": 0, "grounded_questions": len(choices)} | measure()), flush=True)
    started, losses, pointer_losses = time.monotonic(), [], []
    for step in range(args.steps):
        index = batch_rows(rows.num_rows, config.batch_rows, step, 0)
        ids, positions, labels = rows.input_ids[index], rows.position_ids[index], rows.labels[index]
        with (
            torch.autocast("cpu", dtype=torch.bfloat16, enabled=cpu_has_native_bf16()),
            pointer.capture(model) if pointer is not None else contextlib.nullcontext({}) as captured,
        ):
            loss = assistant_loss(
                model, ids, positions, labels, args.context_loss_weight, rows.row_tokens[index]
            )
            losses.append(float(loss.detach()))
            if pointer is not None:
                pointer_loss = pointer.loss(model, captured, pointer.targets(ids, positions, labels))
                pointer_losses.append(float(pointer_loss.detach()))
                loss = loss + pointer.weight * pointer_loss
        apply_update(model, loss, optimizer, scheduler, config.grad_clip, guard)
        if (step + 1) % args.report_every == 0 or step + 1 == args.steps:
            report = {"step": step + 1, "loss": round(sum(losses[-20:]) / len(losses[-20:]), 3),
                      "seconds": round(time.monotonic() - started)}  # fmt: skip
            if pointer_losses:
                report["pointer_loss"] = round(sum(pointer_losses[-20:]) / len(pointer_losses[-20:]), 3)
            print(json.dumps(report | measure()), flush=True)
    for hook in hooks:
        hook.remove()


if __name__ == "__main__":
    main()
