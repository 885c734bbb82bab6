"""The synthetic, seeded corpus the bundled models are trained and gated on.

`generate_corpus(CorpusConfig(seed=..., size=...))` returns a list of `Example`s: chat-formatted conversations
(OpenAI-style messages, plus `tools` where a tool list is offered) covering plain chat, tool use (one call, two
calls, no fitting tool), JSON extraction, grounded answers with citations and injected instructions. Each
example records what the quality gate checks (see `switchyard_training.example`).

Example i is generated from its own RNG seeded with (seed, i), so a corpus is reproducible element by element
and a larger corpus extends a smaller one with the same seed. `heldout_config` uses a different seed *and* the
held-out entity lists, so the gate measures generalisation to names the model never saw.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from switchyard.agents.demo_world import READING_TOOLS, TOOLS, ToolWorld
from switchyard_training.entities import HELDOUT_ENTITIES, TRAIN_ENTITIES, EntityLists
from switchyard_training.example import Category, Check, CheckKind, Example
from switchyard_training.sessions import GROUPED, MAX_GROUP_SIZE, member_rng, session
from switchyard_training.tasks.context import GroundedForms, TaskContext
from switchyard_training.tasks.generators import GENERATORS
from switchyard_training.tasks.tool_vocab import HELDOUT_TOOL_VOCAB, TRAIN_TOOL_VOCAB, ToolVocab

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
    "unseen_tools_config",
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
    Category.OPEN_TOOL_CALL: 0.06,
    Category.OPEN_TOOL_PARALLEL: 0.02,
    Category.OPEN_NO_TOOL: 0.03,
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
    group_size: int = 1
    """Conversations per group for the categories that share a prompt (`sessions.GROUPED`); 1 makes every
    conversation on its own. The shares of `weights` stay shares of conversations either way."""
    grounded_forms: GroundedForms = field(default_factory=GroundedForms)
    message_tool: bool = True
    """Whether `send_message` is among the offered tools (the agent demo's acting tool). Corpora before it
    (runs up to 27) offered only the reading tools; False reproduces them exactly."""
    tool_vocab: ToolVocab = TRAIN_TOOL_VOCAB
    """What the open-tool categories' generated tools are made of (`tasks.tool_vocab`)."""
    math_tools: bool = True

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(TOOLS) if self.message_tool else READING_TOOLS

    def __post_init__(self) -> None:
        if self.size < 0:
            raise ValueError(f"corpus size must be >= 0, got {self.size}")
        if not 1 <= self.group_size <= MAX_GROUP_SIZE:
            raise ValueError(f"group size must be 1 to {MAX_GROUP_SIZE}, got {self.group_size}")
        unknown = set(self.weights) - set(GENERATORS)
        if unknown or not any(w > 0 for w in self.weights.values()):
            raise ValueError(
                f"weights need a positive weight and known categories; unknown: {sorted(unknown)}"
            )


def heldout_config(size: int = 400, seed: int = 0, message_tool: bool = True) -> CorpusConfig:
    """The held-out corpus for a training seed: another seed and the held-out entity lists (and the tools the
    model was trained with)."""
    return CorpusConfig(
        seed=seed + HELDOUT_SEED_OFFSET,
        size=size,
        entities=HELDOUT_ENTITIES,
        weights=dict(HELDOUT_WEIGHTS),
        message_tool=message_tool,
    )


UNSEEN_TOOLS_WEIGHTS: dict[Category, float] = {
    Category.OPEN_TOOL_CALL: 0.5,
    Category.OPEN_TOOL_PARALLEL: 0.2,
    Category.OPEN_NO_TOOL: 0.3,
}


def unseen_tools_config(size: int = 600, seed: int = 0) -> CorpusConfig:
    """Tool use on tools never seen in training: the open-tool categories drawn from the held-out tool vocabulary
    (names, domains, wordings) and the held-out entity lists, without the generated calculators (the calculator
    suite has its own held-out wordings)."""
    return CorpusConfig(
        seed=seed + UNSEEN_SEED_OFFSET,
        size=size,
        entities=HELDOUT_ENTITIES,
        weights=dict(UNSEEN_TOOLS_WEIGHTS),
        tool_vocab=HELDOUT_TOOL_VOCAB,
        math_tools=False,
    )


UNSEEN_SEED_OFFSET = 2_000_003


def iter_corpus(config: CorpusConfig) -> Iterator[Example]:
    """`config.size` conversations; with `group_size` > 1, those of the grouped categories come in groups
    (`Example.group` is the draw's index; the last group may be cut short, and a member whose request the
    group's setting cannot hold stands alone)."""
    world = ToolWorld.build(config.entities, config.seed)
    categories = list(config.weights)
    grouped = GROUPED if config.group_size > 1 else frozenset()
    # A grouped draw yields group_size conversations, so it is drawn that much less often.
    weights = [config.weights[c] / (config.group_size if c in grouped else 1) for c in categories]
    made, index = 0, 0
    while made < config.size:
        rng = random.Random(f"switchyard-corpus:{config.seed}:{index}")
        category = rng.choices(categories, weights)[0]
        ctx = TaskContext(rng, config.entities, world, config.grounded_forms, config.tool_names, config.tool_vocab,
                          config.math_tools)  # fmt: skip
        if category not in grouped:
            yield GENERATORS[category](ctx)
            made += 1
        else:
            count = min(config.group_size, config.size - made)
            members = [TaskContext(member_rng(config.seed, index, m), config.entities, world, config.grounded_forms,
                                   config.tool_names, config.tool_vocab, config.math_tools)
                       for m in range(count)]  # fmt: skip
            yield from session(category, ctx, members, config.weights, group=index)
            made += count
        index += 1


def generate_corpus(config: CorpusConfig) -> list[Example]:
    return list(iter_corpus(config))


def save_jsonl(examples: Iterable[Example], path: str | Path) -> None:
    with Path(path).open("w", encoding="utf-8") as out:
        for example in examples:
            out.write(example.to_json() + "\n")


def load_jsonl(path: str | Path) -> list[Example]:
    with Path(path).open(encoding="utf-8") as lines:
        return [Example.from_json(line) for line in lines if line.strip()]
