"""Where a quality-gate run fails, by what the held-out conversation holds (issue 4 diagnosis).

Reads a report written by `switchyard eval-default --json R --max-failures N` (N at least the number of failed
checks, so every failure is in it), regenerates the same held-out corpus, and reports:

- grounded answers by the asked company's suffix ("Works", "Analytics", ...) and by answerable or not;
- JSON extraction and tool arguments split by whether an expected value holds a *rare piece*: a token that is a
  reply token fewer than `--rare` times in `--train-examples` conversations of the training corpus (tokenized
  with the model's own tokenizer). A piece the replies never use is one the model has only been taught not to
  write (`switchyard_training.vocab_drill`).

Usage: python training/probes/gate_breakdown.py --report gate.json --model <folder of switchyard-chat>
       [--examples 1200] [--seed 0] [--train-examples 20000] [--rare 2]
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path
from typing import Any

from switchyard_training.corpus import CorpusConfig, generate_corpus, heldout_config
from switchyard_training.data import tokenize_examples
from switchyard_training.entities import HELDOUT_ENTITIES, training_entities
from switchyard_training.example import CheckKind, Example
from switchyard_training.quality import GATE_EXAMPLES, METRICS
from switchyard_training.recipe import DefaultRecipe
from switchyard_training.tokenizer_training import load_tokenizer
from switchyard_training.vocab_drill import reply_counts


def asked_company(example: Example, turn: int) -> str | None:
    """The held-out company the grounded question at `turn` names (the longest one it contains)."""
    text = str(example.messages[turn - 1].get("content") or "").rsplit("Question:", 1)[-1]
    named = [c for c in HELDOUT_ENTITIES.companies if c in text]
    return max(named, key=len) if named else None


def expected_values(example: Example, turn: int) -> list[str]:
    values: list[Any] = []
    for check in example.checks:
        if check.turn != turn:
            continue
        if check.json_object:
            values += check.json_object.values()
        for call in check.tool_calls:
            values += call["arguments"].values()
    return [v for v in values if isinstance(v, str)]


def breakdown(
    report: dict[str, Any], examples: list[Example], counts: list[int], encode: Any, rare: int
) -> dict:
    failed = {(f["metric"], f["example"], f["turn"]) for f in report["failures"]}
    tallies: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    metric_kinds = {m.name: set(m.kinds) for m in METRICS}
    for index, example in enumerate(examples):
        for turn in sorted({c.turn for c in example.checks}):
            kinds = {c.kind for c in example.checks if c.turn == turn}
            for metric in ("grounded", "json_extraction", "tool_arguments"):
                if not kinds & metric_kinds[metric]:
                    continue
                if metric == "grounded":
                    check = next(c for c in example.checks if c.turn == turn and c.kind == CheckKind.GROUNDED)
                    company = asked_company(example, turn) or "?"
                    group = f"suffix {company.split()[-1]}"
                    groups = [group, "answerable" if check.citation else "unanswerable"]
                else:
                    pieces = [t for v in expected_values(example, turn) for t in encode(v)]
                    groups = ["rare piece" if any(counts[t] < rare for t in pieces) else "no rare piece"]
                ok = (metric, index, turn) not in failed
                for group in groups:
                    tallies[metric][(group, "total")] += 1
                    tallies[metric][(group, "right")] += ok
    out: dict[str, dict[str, dict[str, float]]] = {}
    for metric, tally in tallies.items():
        groups = sorted({g for g, _ in tally})
        out[metric] = {
            g: {"right": tally[(g, "right")], "total": tally[(g, "total")],
                "rate": round(tally[(g, "right")] / tally[(g, "total")], 3)}
            for g in groups
        }  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--report", type=Path, required=True, help="eval-default --json report")
    parser.add_argument("--model", type=Path, required=True, help="the graded model's folder (its tokenizer)")
    parser.add_argument(
        "--examples", type=int, default=GATE_EXAMPLES, help="held-out conversations the gate ran"
    )
    parser.add_argument("--seed", type=int, default=0, help="the gate's --seed (also the training corpus')")
    parser.add_argument("--train-examples", type=int, default=20_000)
    parser.add_argument("--rare", type=int, default=2, help="reply-token count below which a piece is rare")
    parser.add_argument(
        "--entity-count",
        type=int,
        default=DefaultRecipe().entity_count,
        help="the run's --entity-count, so rarity is counted on its training lists",
    )
    parser.add_argument("--real-entity-share", type=float, default=DefaultRecipe().real_entity_share, help="the run's --real-entity-share")  # fmt: skip
    parser.add_argument("--no-message-tool", action="store_true", help="the run's --no-message-tool")
    parser.add_argument("--json", type=Path, help="also write the breakdown here")
    args = parser.parse_args(argv)

    report = json.loads(args.report.read_text())
    failed_total = sum(sum(kinds.values()) for kinds in report["failure_kinds"].values())
    if len(report["failures"]) < failed_total or any(f.get("example", -1) < 0 for f in report["failures"]):
        print(f"the report keeps {len(report['failures'])} of {failed_total} failures (or no turn indices): "
              "rerun eval-default with --max-failures above that", file=sys.stderr)  # fmt: skip
        return 2
    message_tool = not args.no_message_tool
    examples = generate_corpus(heldout_config(size=args.examples, seed=args.seed, message_tool=message_tool))
    if sum(len({c.turn for c in e.checks}) for e in examples) != report["graded_turns"]:
        print(
            "the regenerated corpus does not match the report: check --examples and --seed", file=sys.stderr
        )
        return 2
    tokenizer = load_tokenizer(args.model)
    recipe = DefaultRecipe()
    train = generate_corpus(CorpusConfig(seed=args.seed, size=args.train_examples,
                                         entities=training_entities(args.entity_count, args.real_entity_share),
                                         weights=dict(recipe.corpus_weights), group_size=recipe.group_size,
                                         grounded_forms=recipe.grounded_forms, message_tool=message_tool))  # fmt: skip
    counts = reply_counts(tokenize_examples(tokenizer, train), tokenizer.get_vocab_size())

    def encode(value: str) -> list[int]:
        return tokenizer.encode(value, add_special_tokens=False).ids

    result = breakdown(report, examples, counts, encode, args.rare)
    for metric, groups in result.items():
        print(metric)
        for group, tally in groups.items():
            print(f"  {group:<22} {tally['right']:>4} / {tally['total']:<4} {tally['rate']:.3f}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
