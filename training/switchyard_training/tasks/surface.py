"""User text as people type it, and the system prompts and tool lists a conversation opens with."""

from __future__ import annotations

from typing import Any

from switchyard.agents.demo_world import TOOLS
from switchyard_training.tasks.context import TaskContext

_PREFIXES = (
    "",
    "",
    "",
    "",
    "Hi! ",
    "Hey, ",
    "Hello. ",
    "Quick question: ",
    "Please help: ",
    "Hi there, ",
    "So, ",
)
_SUFFIXES = ("", "", "", "", "", " Thanks!", " Thank you.", " Thanks in advance.", " :)", " Cheers.")
_SYSTEM_PROMPTS = (
    "You are a helpful assistant.",
    "You are Switchyard Chat, a small and concise assistant.",
    "You are a friendly assistant. Keep answers short.",
    "Answer briefly and accurately.",
    "You are an assistant for a small company. Be precise.",
    "You are a helpful, honest assistant.",
)
_TOOL_SYSTEM_PROMPTS = (
    "You are a helpful assistant with access to tools.",
    "You are Switchyard Chat. Use a tool when it helps answer the user.",
    "You are an assistant. Call tools when you need live data or exact arithmetic.",
    "Be concise. Use the available functions when needed.",
)


def noisy(ctx: TaskContext, text: str, lowercase_all: bool = True) -> str:
    """User text as people type it: a greeting in front, lower case, a missing question mark.

    Requests whose tool arguments copy the user's words pass lowercase_all=False, so the arguments still
    match what the user typed; lowering only the first letter never touches an argument.
    """
    text = ctx.pick(_PREFIXES) + text if ctx.chance(0.3) else text
    if ctx.chance(0.12):
        text = text[0].lower() + text[1:]
    elif lowercase_all and ctx.chance(0.05):
        text = text.lower()
    if text.endswith("?") and ctx.chance(0.15):
        text = text[:-1]
    return text + ctx.pick(_SUFFIXES) if ctx.chance(0.15) else text


def system_prompt(ctx: TaskContext, tools: bool = False) -> str | None:
    if ctx.chance(0.35):
        return None
    return ctx.pick(_TOOL_SYSTEM_PROMPTS if tools and ctx.chance(0.6) else _SYSTEM_PROMPTS)


def offered_tools(ctx: TaskContext, needed: list[str], exclude: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The needed tools plus a random handful of others, shuffled, so the model must read the list."""
    others = [name for name in ctx.tool_names if name not in needed and name not in exclude]
    ctx.rng.shuffle(others)
    extra = ctx.rng.randint(1 if not needed else 0, len(others))
    names = list(needed) + others[:extra]
    ctx.rng.shuffle(names)
    return [TOOLS[name] for name in names]
