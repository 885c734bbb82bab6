"""The two choices a trained main model makes when it answers a grounded question (issue 4 diagnosis).

Every grounded reply in the corpus that quotes a passage or says the passages lack the answer opens with the
asked company's name, copied from the question; what follows the name decides between quoting a passage and
"not in the passages". Teacher-forced on held-out grounded conversations, this reports:

- the greedy first token of the reply: the asked company's first piece, another passage's company, or anything
  else (a value, "According", "The"), and the mean probability of the asked and the other company;
- after the asked company's name (teacher-forced through it): whether the next token continues the right way
  ("quote" replies: the passage's next word; "not found" replies: the colon), or goes the other way; and where
  a wrong next token comes from: the word after the name in the question, in another passage, or neither;
- where the heads look from the reply's first position: for each head that puts at least 5% of its attention
  on company pieces, the mean mass on the asked company's first piece (in the question and the passages) and on
  the other companies' (the wired induction head is layer 1's head 0, locator heads the last kv head's queries).

With `--form attribute`, for a model trained on attribute replies ("Acme: its founder is Diego Novak [2].",
"Acme: its founder is not in the passages."): the one choice at the value, teacher-forced through "Acme: its
founder is": the right value's first piece (or " not"), "not" where a value was due, another piece of the
passages (a value of the wrong passage), or anything else; and the mean probability of the right token.

Usage: python training/probes/grounded_choices.py --model <folder of switchyard-chat> [--cases 300] [--form attribute]
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import transformers
from tokenizers import Tokenizer

from switchyard_training.chat_format import render_chat
from switchyard_training.corpus import generate_corpus, heldout_config
from switchyard_training.entities import HELDOUT_ENTITIES
from switchyard_training.example import Category, CheckKind
from switchyard_training.induction_init import SpaceVariants
from switchyard_training.tasks.context import GroundedForms

PASSAGE_LINE = re.compile(r"^(.*) \[(\d+)\]\.$", re.MULTILINE)


@dataclass(frozen=True)
class GroundedCase:
    """One reply, rendered: token ids, where the reply starts, the asked company and the other companies."""

    ids: list[int]
    reply_start: int
    after_company: int
    """Index of the first reply token after the asked company's name."""
    form: str
    """'quote' or 'not found' (replies that open with a value or "According to [k]" are left out)."""
    asked: int
    others: frozenset[int]


def bare_forms(tokenizer: Tokenizer) -> dict[int, int]:
    """Spaced piece -> its bare form, so spaced and bare pieces compare alike."""
    return dict(SpaceVariants.from_vocab(tokenizer.get_vocab()).pairs)


def grounded_cases(tokenizer: Tokenizer, count: int, seed: int) -> list[GroundedCase]:
    def first_piece(text: str) -> int:
        return tokenizer.encode(text, add_special_tokens=False).ids[0]

    cases: list[GroundedCase] = []
    # longest first: "Acme Labs" over "Acme"
    companies = sorted(HELDOUT_ENTITIES.companies, key=len, reverse=True)
    for example in generate_corpus(heldout_config(size=count * 12, seed=seed)):
        if example.category != Category.GROUNDED or example.checks[0].kind != CheckKind.GROUNDED:
            continue
        check = example.checks[0]
        rendered = render_chat(example.messages[: check.turn + 1], example.tools)
        start = rendered.assistant_spans[-1][0]
        prompt, reply = rendered.text[:start], example.messages[check.turn]["content"]
        question = prompt.rstrip().splitlines()[-2]  # the line before "<|im_start|>assistant"
        asked = next((c for c in companies if c in question), None)
        if asked is None or not reply.startswith(asked):
            continue  # a reply that does not open with the company (a value first, "According to")
        lines = {int(n): text for text, n in PASSAGE_LINE.findall(prompt)}
        form = "not found" if check.citation is None else "quote"
        if form == "quote" and reply.startswith(f"{asked}:"):
            continue  # an attribute reply ("Acme: its founder is ..."): the colon is right there
        encoding = tokenizer.encode(rendered.text, add_special_tokens=False)
        reply_start = next(i for i, (s, _) in enumerate(encoding.offsets) if s >= start)
        after = next(i for i, (s, _) in enumerate(encoding.offsets) if s >= start + len(asked))
        asked_id = encoding.ids[reply_start]
        if asked_id != first_piece(asked):
            continue  # the name's first piece merged with what follows it
        others = frozenset(first_piece(t) for t in lines.values() if not t.startswith(asked)) - {asked_id}
        cases.append(GroundedCase(encoding.ids, reply_start, after, form, asked_id, others))
        if len(cases) >= count:
            break
    return cases


def continuation_source(case: GroundedCase, token: int, bare_of: dict[int, int]) -> str:
    """Where a token predicted after the asked company's name also follows that name in the prompt: the last
    occurrence is the question's (the question comes after the passages), earlier ones are passages'. Pieces are
    compared spaced and bare alike (the question has " Acme", the passage lines and the reply "Acme")."""
    canon = [bare_of.get(i, i) for i in case.ids[: case.after_company]]
    name = canon[case.reply_start : case.after_company]
    follows = [
        canon[end] for end in range(len(name), case.reply_start) if canon[end - len(name) : end] == name
    ]
    token = bare_of.get(token, token)
    if follows and follows[-1] == token:
        return "the question's next word"
    if token in follows[:-1]:
        return "another passage's next word"
    return "neither"


def measure(model: torch.nn.Module, tokenizer: Tokenizer, cases: list[GroundedCase]) -> dict[str, object]:
    colon = tokenizer.encode(":", add_special_tokens=False).ids[0]
    bare_of = bare_forms(tokenizer)
    wrong_source: collections.Counter[str] = collections.Counter()
    first: collections.Counter[str] = collections.Counter()
    second: dict[str, collections.Counter[str]] = {
        "quote": collections.Counter(),
        "not found": collections.Counter(),
    }
    p_asked = p_other = 0.0
    mass: collections.defaultdict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    with torch.no_grad():
        for case in cases:
            out = model(torch.tensor([case.ids[: case.after_company + 1]]), output_attentions=True)
            logits = out.logits[0].float()
            prompt = torch.tensor(case.ids[: case.reply_start])
            on_asked = prompt == case.asked
            on_other = torch.isin(prompt, torch.tensor(sorted(case.others), dtype=torch.long))
            for layer, attention in enumerate(out.attentions):
                rows = attention[0, :, case.reply_start - 1, : case.reply_start].float()
                for head, row in enumerate(rows):
                    mass[f"L{layer}H{head}"][0] += float(row[on_asked].sum())
                    mass[f"L{layer}H{head}"][1] += float(row[on_other].sum())
            probs = logits[case.reply_start - 1].softmax(-1)
            p_asked += float(probs[case.asked])
            p_other += float(probs[list(case.others)].sum()) if case.others else 0.0
            top = int(probs.argmax())
            first[
                "asked company" if top == case.asked else "other company" if top in case.others else "other"
            ] += 1
            nxt = int(logits[case.after_company - 1].argmax())
            gold = case.ids[case.after_company]
            if nxt == gold:
                second[case.form]["right"] += 1
            elif case.form == "quote" and nxt == colon:
                second[case.form]["said not found"] += 1
            elif case.form == "not found" and nxt != colon:
                second[case.form]["went on to quote"] += 1
            else:
                second[case.form]["other"] += 1
            if nxt != gold:
                wrong_source[f"{case.form}: {continuation_source(case, nxt, bare_of)}"] += 1
    n = max(len(cases), 1)
    return {
        "cases": len(cases),
        "first_token": dict(first),
        "p_asked": round(p_asked / n, 3),
        "p_other": round(p_other / n, 3),
        "after_company": {form: dict(counts) for form, counts in second.items()},
        "wrong_after_company": dict(sorted(wrong_source.items())),
        "reply_start_attention": {
            head: {"asked": round(asked / n, 3), "other": round(other / n, 3)}
            for head, (asked, other) in mass.items()
            if (asked + other) / n >= 0.05
        },
    }


@dataclass(frozen=True)
class ValueCase:
    """An attribute reply, rendered, cut where the value (or " not") starts."""

    ids: list[int]
    choice: int
    """Index of the token that starts the value, or "not"."""
    answerable: bool
    passage_pieces: frozenset[int]
    """Pieces of the passage lines in bare form (`bare_forms`), where a wrongly chosen value comes from."""


def value_cases(tokenizer: Tokenizer, count: int, seed: int) -> list[ValueCase]:
    bare_of = bare_forms(tokenizer)
    config = replace(heldout_config(size=count * 12, seed=seed), grounded_forms=GroundedForms(0.0, 0.0, 1.0))
    cases: list[ValueCase] = []
    for example in generate_corpus(config):
        if example.category != Category.GROUNDED or example.checks[0].kind != CheckKind.GROUNDED:
            continue
        check = example.checks[0]
        reply = example.messages[check.turn]["content"]
        head, sep, _ = reply.partition(" is ")
        if not sep or ": its " not in head:
            continue  # the other "not found" wording ("Acme: the passages do not say its founder.")
        rendered = render_chat(example.messages[: check.turn + 1], example.tools)
        start = rendered.assistant_spans[-1][0]
        value_char = start + len(head) + len(sep)
        encoding = tokenizer.encode(rendered.text, add_special_tokens=False)
        choice = next(i for i, (s, e) in enumerate(encoding.offsets) if e > value_char)
        lines = "\n".join(f"{t} [{n}]." for t, n in PASSAGE_LINE.findall(rendered.text[:start]))
        pieces = frozenset(bare_of.get(i, i) for i in tokenizer.encode(lines, add_special_tokens=False).ids)
        cases.append(ValueCase(encoding.ids, choice, check.citation is not None, pieces))
        if len(cases) >= count:
            break
    return cases


def measure_values(model: torch.nn.Module, tokenizer: Tokenizer, cases: list[ValueCase]) -> dict[str, object]:
    nots = {tokenizer.encode(w, add_special_tokens=False).ids[0] for w in (" not", "not")}
    bare_of = bare_forms(tokenizer)
    outcome: dict[str, collections.Counter[str]] = {
        "answerable": collections.Counter(),
        "not found": collections.Counter(),
    }
    p_right = {"answerable": 0.0, "not found": 0.0}
    with torch.no_grad():
        for case in cases:
            kind = "answerable" if case.answerable else "not found"
            probs = model(torch.tensor([case.ids[: case.choice]])).logits[0, -1].float().softmax(-1)
            gold, top = case.ids[case.choice], int(probs.argmax())
            p_right[kind] += float(probs[gold])
            if top == gold:
                outcome[kind]["right"] += 1
            elif top in nots:
                outcome[kind]["said not found"] += 1
            elif bare_of.get(top, top) in case.passage_pieces:
                outcome[kind]["a piece of the passages" if case.answerable else "went on to a value"] += 1
            else:
                outcome[kind]["other"] += 1
    return {
        "cases": len(cases),
        "at_value": {kind: dict(counts) for kind, counts in outcome.items()},
        "p_right": {k: round(v / max(sum(outcome[k].values()), 1), 3) for k, v in p_right.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, required=True, help="folder of a trained main model")
    parser.add_argument("--cases", type=int, default=300, help="grounded replies that open with the company")
    parser.add_argument("--seed", type=int, default=0, help="training seed the held-out corpus derives from")
    parser.add_argument(
        "--form",
        choices=("quote", "attribute"),
        default="quote",
        help="which reply form's choices to measure",
    )
    args = parser.parse_args(argv)
    tokenizer = Tokenizer.from_file(str(args.model / "tokenizer.json"))
    model = transformers.AutoModelForCausalLM.from_pretrained(
        args.model,
        dtype=torch.float32,
        attn_implementation="eager",  # eager: attention weights
    ).eval()
    if args.form == "attribute":
        report = measure_values(model, tokenizer, value_cases(tokenizer, args.cases, args.seed))
    else:
        report = measure(model, tokenizer, grounded_cases(tokenizer, args.cases, args.seed))
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
