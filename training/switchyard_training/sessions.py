"""Corpus groups: several conversations generated to share the beginning of their prompt.

A tool conversation is mostly its tool schemas (about two thirds of its tokens), and a grounded one mostly its
passages. Training packs a group's common token prefix once and each conversation's remainder after it
(`data.pack_examples`, `packed_attention`), so a group of four costs about what two conversations cost alone,
and each member is still trained on exactly as if it were alone. A group here is what one deployment sees:
one system prompt and tool list with different users' requests, or one set of retrieved passages with
different questions about them.

Members of a group are drawn with the same generators and shares as lone conversations (`tasks`), from their
own random streams; only the shared part (the setting) comes from the group's.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from switchyard.agents.demo_world import TOOLS
from switchyard_training.example import Category, Example
from switchyard_training.tasks.context import TaskContext, ToolSetting
from switchyard_training.tasks.grounded import ATTRIBUTES, company_facts, grounded_question, passage_layout
from switchyard_training.tasks.open_tools import open_tool_session
from switchyard_training.tasks.surface import system_prompt
from switchyard_training.tasks.tool_use import no_tool, parallel_forms, tool_call, tool_parallel

TOOL_FAMILY: tuple[Category, ...] = (Category.TOOL_CALL, Category.TOOL_PARALLEL, Category.NO_TOOL)
"""Categories whose conversations open with a system prompt and tool list that a group can share."""
OPEN_FAMILY: tuple[Category, ...] = (
    Category.OPEN_TOOL_CALL,
    Category.OPEN_TOOL_PARALLEL,
    Category.OPEN_NO_TOOL,
)
"""The same over generated tools: a group shares one generated tool list (`tasks.open_tools`)."""
GROUPED: frozenset[Category] = frozenset((*TOOL_FAMILY, *OPEN_FAMILY, Category.GROUNDED))
MAX_GROUP_SIZE = 10
"""A grounded group asks each of its two companies' 10 facts at most once."""

_TOOL_GENERATORS: dict[Category, Callable[[TaskContext, ToolSetting], Example]] = {
    Category.TOOL_CALL: tool_call,
    Category.TOOL_PARALLEL: tool_parallel,
    Category.NO_TOOL: no_tool,
}


def tool_session(
    ctx: TaskContext, members: list[TaskContext], weights: dict[Category, float], group: int
) -> list[Example]:
    """One system prompt and tool list (drawn from ctx), one conversation per member context; each member's
    category is drawn by `weights` over the tool family. A member drawn to make parallel calls the tools
    cannot support gets tools of its own and stands alone (no group), so the shares stay the weights'."""
    names = ctx.rng.sample(list(ctx.tool_names), ctx.rng.randint(1, len(ctx.tool_names)))
    setting = ToolSetting(system=system_prompt(ctx, tools=True), tools=[TOOLS[name] for name in names])
    categories = [c for c in TOOL_FAMILY if weights.get(c, 0) > 0]
    examples = []
    for member in members:
        category = member.rng.choices(categories, [weights[c] for c in categories])[0]
        if category is Category.TOOL_PARALLEL and not parallel_forms(names):
            examples.append(tool_parallel(member))
            continue
        example = _TOOL_GENERATORS[category](member, setting)
        example.group = group
        examples.append(example)
    return examples


def grounded_session(ctx: TaskContext, members: list[TaskContext], group: int) -> list[Example]:
    """One set of 3-5 passages about two companies (drawn from ctx), one question per member context.

    As in `tasks.grounded.grounded`, a quarter of the questions ask what no passage says (often a fact the passages
    give for the other company). Members ask different questions (`MAX_GROUP_SIZE`)."""
    company, other = ctx.rng.sample(ctx.entities.companies, 2)
    facts = company_facts(ctx, company)
    other_facts = company_facts(ctx, other)
    entries = [facts[a] for a in ATTRIBUTES] + [other_facts[a] for a in ATTRIBUTES]
    shown = ctx.rng.sample(range(len(entries)), ctx.rng.randint(3, 5))
    passages = [entries[i].sentence for i in shown]
    layout = passage_layout(ctx)
    unasked = {True: list(shown), False: [i for i in range(len(entries)) if i not in shown]}
    examples = []
    for member in members:
        answerable = member.chance(0.75)
        if not unasked[answerable]:  # every question of this kind asked: ask one of the other kind
            answerable = not answerable
        entry = unasked[answerable].pop(member.rng.randrange(len(unasked[answerable])))
        citation = shown.index(entry) + 1 if answerable else None
        example = grounded_question(member, layout, passages, entries[entry], citation)
        example.group = group
        examples.append(example)
    return examples


def session(
    category: Category,
    ctx: TaskContext,
    members: list[TaskContext],
    weights: dict[Category, float],
    group: int,
) -> list[Example]:
    """The group numbered `group` for a corpus draw of `category` (one of `GROUPED`)."""
    if category is Category.GROUNDED:
        return grounded_session(ctx, members, group)
    if category in TOOL_FAMILY:
        return tool_session(ctx, members, weights, group)
    if category in OPEN_FAMILY:
        return open_tool_session(ctx, members, weights, group)
    raise ValueError(f"{category} conversations are not generated in groups")


def member_rng(seed: int, index: int, member: int) -> random.Random:
    return random.Random(f"switchyard-corpus:{seed}:{index}:{member}")
