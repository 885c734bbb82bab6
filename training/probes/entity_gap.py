"""How much of the quality gate's shortfall is the held-out names (issue 4 diagnosis).

The gate asks about people, cities, companies and products the training corpus never names. This script grades
the main model, greedy, on the same conversations (same seed, same templates) built from different entity
lists: the gate's held-out lists, the training lists, and mixes that hold out only the companies, only what is
not a company, or only the company stems or suffixes. A rate that is high on training names and low on held-out
ones is memorisation, not reading; one that is low on both is a skill the model lacks.

The training lists are the current code's (`TRAIN_ENTITIES`): a model trained on other lists sees them as new.

Usage: python training/probes/entity_gap.py --model <folder of switchyard-chat> [--examples 300]
       [--categories grounded,json_extraction] [--seed 0] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import replace
from pathlib import Path

from switchyard_training.corpus import HELDOUT_SEED_OFFSET, CorpusConfig, generate_corpus
from switchyard_training.entities import HELDOUT_ENTITIES, TRAINING_NAME_COUNT, EntityLists, training_entities
from switchyard_training.example import Category
from switchyard_training.quality import EngineGenerator, evaluate
from switchyard_training.recipe import DefaultRecipe


def _stem_and_suffix(company: str) -> tuple[str, str]:
    stem, _, suffix = company.rpartition(" ")
    return stem, suffix


def entity_variants(
    seed: int = 0, entity_count: int = TRAINING_NAME_COUNT, real_share: float = 0.0
) -> dict[str, EntityLists]:
    """The entity lists compared, by name; each has as many companies as the held-out lists. `entity_count`
    is the run's `--entity-count`, which sets its training lists."""
    held, train = HELDOUT_ENTITIES, training_entities(entity_count, real_share)
    rng = random.Random(f"entity-gap-{seed}")
    count = len(held.companies)
    train_companies = tuple(rng.sample(train.companies, count))
    held_parts = [_stem_and_suffix(c) for c in held.companies]
    train_parts = [_stem_and_suffix(c) for c in train_companies]
    return {
        "held out (the gate)": held,
        "training names": replace(train, companies=train_companies),
        "training companies, rest held out": replace(held, companies=train_companies),
        "held-out companies, rest training": replace(train, companies=held.companies),
        "held-out stems, training suffixes": replace(
            held,
            companies=tuple(
                f"{stem} {suffix}" for (stem, _), (_, suffix) in zip(held_parts, train_parts, strict=True)
            ),
        ),
        "training stems, held-out suffixes": replace(
            held,
            companies=tuple(
                f"{stem} {suffix}" for (stem, _), (_, suffix) in zip(train_parts, held_parts, strict=True)
            ),
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="folder of the main model")
    parser.add_argument("--examples", type=int, default=300, help="conversations per entity variant")
    parser.add_argument("--categories", default="grounded,json_extraction", help="comma-separated categories")
    parser.add_argument("--seed", type=int, default=0, help="training seed the held-out seed is derived from")
    parser.add_argument("--json", type=Path, help="also write the rates to this file")
    parser.add_argument(
        "--entity-count",
        type=int,
        default=DefaultRecipe().entity_count,
        help="the run's --entity-count (training lists)",
    )
    parser.add_argument(
        "--real-entity-share",
        type=float,
        default=DefaultRecipe().real_entity_share,
        help="the run's --real-entity-share",
    )
    args = parser.parse_args(argv)
    try:
        categories = [Category(c.strip()) for c in args.categories.split(",") if c.strip()]
    except ValueError as err:
        parser.error(f"--categories: {err}; known: {', '.join(c.value for c in Category)}")
    if not categories or args.examples < 1:
        parser.error("need at least one category and one example")
    weights = {c: 1.0 / len(categories) for c in categories}
    generator = EngineGenerator(args.model, max_new_tokens=96)
    rates: dict[str, dict[str, dict[str, float | int]]] = {}
    for name, entities in entity_variants(args.seed, args.entity_count, args.real_entity_share).items():
        config = CorpusConfig(
            seed=args.seed + HELDOUT_SEED_OFFSET, size=args.examples, entities=entities, weights=weights
        )
        examples = generate_corpus(config)
        generator.prefetch(examples)
        report = evaluate(generator, examples, max_failures=0)
        rates[name] = {
            metric: {"rate": round(result.rate, 3), "n": result.total}
            for metric, result in report.metrics.items()
            if result.total
        }
        cells = "  ".join(f"{m} {r['rate']:.3f} (n={r['n']})" for m, r in rates[name].items())
        print(f"{name:<36} {cells}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rates, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
