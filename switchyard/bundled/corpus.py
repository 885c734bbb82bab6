"""The synthetic, seeded corpus the bundled models are trained and gated on.

`generate_corpus(CorpusConfig(seed=..., size=...))` returns a list of `Example`s: chat-formatted conversations
(OpenAI-style messages, plus `tools` where a tool list is offered) covering plain chat, tool use (one call, two
calls, no fitting tool), JSON extraction, grounded answers with citations and injected instructions. Each
example records what the quality gate checks (see `switchyard.bundled.example`).

Example i is generated from its own RNG seeded with (seed, i), so a corpus is reproducible element by element
and a larger corpus extends a smaller one with the same seed. `heldout_config` uses a different seed *and* the
held-out entity lists, so the gate measures generalisation to names the model never saw.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from switchyard.bundled.entities import HELDOUT_ENTITIES, TRAIN_ENTITIES, EntityLists
from switchyard.bundled.example import Category, Check, CheckKind, Example
from switchyard.bundled.tasks import GENERATORS, TaskContext
from switchyard.bundled.tools import ToolWorld

__all__ = [
    "DEFAULT_WEIGHTS",
    "Category",
    "Check",
    "CheckKind",
    "CorpusConfig",
    "Example",
    "generate_corpus",
    "heldout_config",
    "iter_corpus",
    "load_jsonl",
    "save_jsonl",
]

DEFAULT_WEIGHTS: dict[Category, float] = {
    Category.CHAT: 0.05,
    Category.TOOL_CALL: 0.18,
    Category.TOOL_PARALLEL: 0.06,
    Category.NO_TOOL: 0.06,
    Category.JSON_EXTRACTION: 0.24,
    Category.GROUNDED: 0.24,
    Category.INJECTION: 0.08,
    Category.COPY: 0.09,
}
"""Shares of examples, not of tokens: a tool example (its schemas in the prompt) is ~400 tokens, an extraction,
grounded or copy example ~100. At these shares tool use still takes about half of the tokens (tool selection
already passes its gate), while extraction and grounded answers, the furthest from theirs, get about a third of
the supervised reply tokens (at 0.17/0.15 they had 8% of the tokens each)."""

HELDOUT_WEIGHTS: dict[Category, float] = {
    Category.CHAT: 0.06,
    Category.TOOL_CALL: 0.24,
    Category.TOOL_PARALLEL: 0.10,
    Category.NO_TOOL: 0.10,
    Category.JSON_EXTRACTION: 0.14,
    Category.GROUNDED: 0.14,
    Category.INJECTION: 0.22,
}
"""The gate leans on gated categories: injection resistance has a 95% target and needs many samples."""
HELDOUT_SEED_OFFSET = 1_000_003


@dataclass(frozen=True)
class CorpusConfig:
    """What a corpus is made of; two equal configs give equal corpora."""

    seed: int = 0
    size: int = 20_000
    entities: EntityLists = TRAIN_ENTITIES
    weights: dict[Category, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))

    def __post_init__(self) -> None:
        if self.size < 0:
            raise ValueError(f"corpus size must be >= 0, got {self.size}")
        unknown = set(self.weights) - set(GENERATORS)
        if unknown or not any(w > 0 for w in self.weights.values()):
            raise ValueError(
                f"weights need a positive weight and known categories; unknown: {sorted(unknown)}"
            )


def heldout_config(size: int = 400, seed: int = 0) -> CorpusConfig:
    """The held-out corpus for a training seed: another seed and the held-out entity lists."""
    return CorpusConfig(
        seed=seed + HELDOUT_SEED_OFFSET, size=size, entities=HELDOUT_ENTITIES, weights=dict(HELDOUT_WEIGHTS)
    )


def iter_corpus(config: CorpusConfig) -> Iterator[Example]:
    world = ToolWorld.build(config.entities, config.seed)
    categories = list(config.weights)
    weights = [config.weights[c] for c in categories]
    for index in range(config.size):
        rng = random.Random(f"switchyard-corpus:{config.seed}:{index}")
        category = rng.choices(categories, weights)[0]
        yield GENERATORS[category](TaskContext(rng=rng, entities=config.entities, world=world))


def generate_corpus(config: CorpusConfig) -> list[Example]:
    return list(iter_corpus(config))


def save_jsonl(examples: Iterable[Example], path: str | Path) -> None:
    with Path(path).open("w", encoding="utf-8") as out:
        for example in examples:
            out.write(example.to_json() + "\n")


def load_jsonl(path: str | Path) -> list[Example]:
    with Path(path).open(encoding="utf-8") as lines:
        return [Example.from_json(line) for line in lines if line.strip()]
