"""Grounded answers by prompt layout, paired: the same passages and question in each layout (issue 4 diagnosis).

The corpus shows passages three ways: in the system prompt with the question as the user message, in the user
message with the question after them, and in the user message with the question before them as well as after
(`tasks.grounded.PassageLayout`). A small model may match question to passage more easily when it reads the passages
knowing the question. This script puts every held-out case in all three layouts, runs the main model greedily
(Switchyard's engine, one batch), and reports per layout: accuracy (the gate's grounded check), the paired
wins and losses against the question-last layout, the failure kinds, and which reply form the model chose.

Usage: python training/probes/grounded_layouts.py --model <folder of switchyard-chat> [--cases 300] [--json F]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections import Counter
from pathlib import Path

from switchyard.agents.demo_world import ToolWorld
from switchyard_training.corpus import heldout_config
from switchyard_training.entities import HELDOUT_ENTITIES
from switchyard_training.example import Example
from switchyard_training.failure_kinds import failure_kind
from switchyard_training.quality import EngineGenerator, prompt_text, says_not_found, score_grounded
from switchyard_training.tasks.context import TaskContext
from switchyard_training.tasks.grounded import (
    PASSAGE_INSTRUCTIONS,
    PassageLayout,
    grounded_question,
    grounded_setup,
)

INSTRUCTION = PASSAGE_INSTRUCTIONS[0]
LAYOUTS = {
    "system": PassageLayout(INSTRUCTION, in_system=True),
    "question last": PassageLayout(INSTRUCTION, in_system=False),
    "question first": PassageLayout(INSTRUCTION, in_system=False, question_first=True),
}


def paired_cases(count: int, seed: int) -> list[dict[str, Example]]:
    """`count` held-out grounded cases (3 in 4 answerable), each rendered in every layout from one RNG state."""
    config = heldout_config(seed=seed)
    world = ToolWorld.build(HELDOUT_ENTITIES, config.seed)
    cases = []
    for index in range(count):
        rng = random.Random(f"grounded-layouts:{config.seed}:{index}")
        setup_ctx = TaskContext(rng=rng, entities=HELDOUT_ENTITIES, world=world)
        passages, fact, citation = grounded_setup(setup_ctx, answerable=index % 4 != 0)
        state = rng.getstate()
        case = {}
        for name, layout in LAYOUTS.items():
            rng.setstate(state)  # the same noisy question and gold reply form in every layout
            case[name] = grounded_question(setup_ctx, layout, passages, fact, citation)
        cases.append(case)
    return cases


def reply_form(reply: str) -> str:
    text = reply.strip()
    if says_not_found(text):
        return "not found"
    if not re.search(r"\[\d+\]", text):
        return "no citation"
    if text.startswith("According to"):
        return "According to [k], ..."
    if len(text.split()) <= 4:
        return "value [k]."
    return "sentence [k]."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="folder of a trained switchyard-chat")
    parser.add_argument("--cases", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0, help="training seed the held-out cases derive from")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    cases = paired_cases(args.cases, args.seed)
    generator = EngineGenerator(args.model, max_new_tokens=96)
    generator.prefetch([example for case in cases for example in case.values()], progress=True)
    verdicts: dict[str, list[bool]] = {name: [] for name in LAYOUTS}
    kinds: dict[str, Counter[str]] = {name: Counter() for name in LAYOUTS}
    forms: dict[str, Counter[str]] = {name: Counter() for name in LAYOUTS}
    for case in cases:
        for name, example in case.items():
            check = example.checks[0]
            reply = generator(example.messages[: check.turn], example.tools)
            ok = score_grounded(check, reply)
            verdicts[name].append(ok)
            forms[name][reply_form(reply)] += 1
            if not ok:
                prompt = prompt_text(example.messages[: check.turn])
                kinds[name][failure_kind("grounded", check, reply, prompt)] += 1

    base = verdicts["question last"]
    report = {"model": str(args.model), "cases": args.cases, "layouts": {}}
    print(f"{'layout':<16} {'accuracy':>8} {'vs question last (wins/losses)':>32}  failures")
    for name, oks in verdicts.items():
        wins = sum(o and not b for o, b in zip(oks, base, strict=True))
        losses = sum(b and not o for o, b in zip(oks, base, strict=True))
        rate = sum(oks) / len(oks)
        top = ", ".join(f"{k} {n}" for k, n in kinds[name].most_common(5))
        print(f"{name:<16} {rate:>8.3f} {f'{wins}/{losses}':>32}  {top}")
        report["layouts"][name] = {
            "accuracy": rate,
            "wins_vs_question_last": wins,
            "losses_vs_question_last": losses,
            "failure_kinds": dict(kinds[name]),
            "reply_forms": dict(forms[name]),
        }
    for name in LAYOUTS:
        print(f"reply forms, {name}: " + ", ".join(f"{k} {n}" for k, n in forms[name].most_common()))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
