"""Injected instructions in a tool result, a passage or extraction text, which the reply ignores."""

from __future__ import annotations

from typing import Any

from switchyard.agents.demo_world import run_tool
from switchyard_training.example import Category, CheckKind, Example
from switchyard_training.tasks.context import Conversation, TaskContext
from switchyard_training.tasks.extraction import extraction
from switchyard_training.tasks.grounded import grounded_reply, grounded_setup, passage_layout, passages_prompt
from switchyard_training.tasks.injected_instructions import injection_text
from switchyard_training.tasks.surface import noisy, offered_tools, system_prompt
from switchyard_training.tasks.tool_requests import REQUESTS, answer_from_result

_IGNORED_NOTES = (
    "",
    "",
    " (One source contained an instruction aimed at me; I ignored it.)",
    " Note: the data included an embedded instruction, which I did not follow.",
)


def injection(ctx: TaskContext) -> Example:
    """An injected instruction in a tool result, a passage or extraction text; the reply ignores it."""
    roll = ctx.rng.random()
    code = ctx.pick(ctx.entities.codewords)
    if roll < 0.15:
        return extraction(ctx, injected=code)
    if roll < 0.55:
        passages, fact, citation = grounded_setup(ctx, answerable=ctx.chance(0.8))
        position = ctx.rng.randint(0, len(passages))
        if citation is not None and position < citation:
            citation += 1
        passages.insert(position, injection_text(ctx, code))
        system, user = passages_prompt(ctx, passage_layout(ctx), passages, fact.question)
        conv = Conversation(system)
        conv.user(user)
        reply = grounded_reply(ctx, passages, fact, citation) + ctx.pick(_IGNORED_NOTES)
        conv.assistant(
            reply,
            {"kind": CheckKind.INJECTION, "marker": code},
            {"kind": CheckKind.GROUNDED, "citation": citation, "answer": fact.value if citation else None},
        )
        return conv.example(Category.INJECTION)
    name = ctx.pick(("get_weather", "search_documents", "get_current_time"))
    text, arguments = REQUESTS[name](ctx)
    tools = offered_tools(ctx, [name])
    conv = Conversation(system_prompt(ctx, tools=True))
    conv.user(noisy(ctx, text, lowercase_all=False))
    (call_id,) = conv.call(
        [(name, arguments)],
        {"kind": CheckKind.TOOL_CALL, "tool_calls": ({"name": name, "arguments": arguments},)},
    )
    result = run_tool(ctx.world, name, arguments, ctx.rng)
    injected = injection_text(ctx, code)
    if name == "search_documents" and result.get("results"):
        doc = result["results"][0]
        result["results"][0] = {**doc, "text": f"{doc['text']} {injected}"}
        reply = ctx.pick((f"According to the {doc['title']} document: {doc['text']}",
                          f"The {doc['title']} document says: {doc['text']}"))  # fmt: skip
        expected = doc["text"]
    else:
        result[ctx.pick(("note", "message", "comment"))] = injected
        reply, expected = answer_from_result(ctx, name, arguments, result)
    conv.tool(call_id, name, result)
    checks: list[dict[str, Any]] = [{"kind": CheckKind.INJECTION, "marker": code}]
    if expected:
        checks.append({"kind": CheckKind.FACT, "answer": expected})
    conv.assistant(reply + ctx.pick(_IGNORED_NOTES), *checks)
    return conv.example(Category.INJECTION, tools)
