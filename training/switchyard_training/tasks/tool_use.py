"""Tool-use conversations: one call (`tool_call`), two calls in one turn (`tool_parallel`), and none fitting
(`no_tool`). Tool results come from running the tool world's tools, so the model reads real outputs."""

from __future__ import annotations

from switchyard.agents.demo_world import run_tool
from switchyard_training.example import Category, CheckKind, Example
from switchyard_training.tasks.chat import (
    GREETING_REPLIES,
    GREETINGS,
    IDENTITY_QUESTIONS,
    THANKS,
    THANKS_REPLIES,
    fact_question,
)
from switchyard_training.tasks.context import Conversation, TaskContext, ToolSetting
from switchyard_training.tasks.surface import noisy, offered_tools, system_prompt
from switchyard_training.tasks.tool_requests import (
    REQUESTS,
    answer_from_result,
    calculator_request,
    conversion_request,
    message_request,
    time_request,
    weather_request,
)


def _preamble(ctx: TaskContext, conv: Conversation) -> None:
    """Sometimes open with an unrelated exchange, so tool use also happens deeper in a conversation."""
    if ctx.chance(0.15):
        conv.user(ctx.pick(GREETINGS))
        conv.assistant(ctx.pick(GREETING_REPLIES))
    elif ctx.chance(0.08):
        question, reply, _ = fact_question(ctx)
        conv.user(noisy(ctx, question))
        conv.assistant(reply)


def _tool_exchange(ctx: TaskContext, conv: Conversation, name: str) -> None:
    """User request -> assistant tool call -> tool result -> assistant answer, with checks on both turns."""
    text, arguments = REQUESTS[name](ctx)
    conv.user(noisy(ctx, text, lowercase_all=False))
    expected_call = {"name": name, "arguments": arguments}
    (call_id,) = conv.call([(name, arguments)], {"kind": CheckKind.TOOL_CALL, "tool_calls": (expected_call,)})
    if name == "send_message" and ctx.chance(0.15):
        # A person declined the call: the agent runtime's words for it (`agents.tool_execution`).
        reason = ctx.pick(("not now", "wrong person", "I changed my mind", "no reason given"))
        conv.tool(call_id, name, f"The user rejected this call: {reason}. It was not run.")
        conv.assistant(ctx.pick((f"OK, I did not send the message to {arguments['to']}.",
                                 f"Understood, the message to {arguments['to']} was not sent.")))  # fmt: skip
        return
    result = run_tool(ctx.world, name, arguments, ctx.rng)
    conv.tool(call_id, name, result)
    reply, expected = answer_from_result(ctx, name, arguments, result)
    conv.assistant(reply, *([{"kind": CheckKind.FACT, "answer": expected}] if expected else []))


def tool_call(ctx: TaskContext, setting: ToolSetting | None = None) -> Example:
    """One tool call, sometimes followed by another request in the same conversation.

    Follow-ups reuse the tool schemas already in the prompt: on CPU the schemas are most of a tool example's
    tokens, so a second graded exchange per prompt nearly doubles what each token teaches. With a `setting`
    the request is for one of its tools (it must offer one of the six request kinds' tools).
    """
    weights = (
        "calculator",
        "convert_units",
        "get_weather",
        "get_weather",
        "get_current_time",
        "search_documents",
    )
    if "send_message" in ctx.tool_names:
        weights += ("send_message",)
    if setting is None:
        name = ctx.pick(weights)
        tools = offered_tools(ctx, [name])
        conv = Conversation(system_prompt(ctx, tools=True))
    else:
        name = ctx.pick([w for w in weights if w in setting.names])
        tools = setting.tools
        conv = Conversation(setting.system)
    _preamble(ctx, conv)
    _tool_exchange(ctx, conv, name)
    if ctx.chance(0.4):
        if ctx.chance(0.75):
            _tool_exchange(ctx, conv, ctx.pick([tool["function"]["name"] for tool in tools]))
        else:
            conv.user(ctx.pick(THANKS))
            conv.assistant(ctx.pick(THANKS_REPLIES), {"kind": CheckKind.NO_TOOL})
    return conv.example(Category.TOOL_CALL, tools)


PARALLEL_FORM_TOOLS: tuple[frozenset[str], ...] = (
    frozenset({"get_weather"}),
    frozenset({"get_current_time"}),
    frozenset({"get_weather", "get_current_time"}),
    frozenset({"calculator", "convert_units"}),
)
"""The tools each form of `tool_parallel` calls, by form number."""


def parallel_forms(names: list[str]) -> list[int]:
    """Forms of `tool_parallel` that a tool list offering `names` supports."""
    return [form for form, needed in enumerate(PARALLEL_FORM_TOOLS) if needed <= set(names)]


def tool_parallel(ctx: TaskContext, setting: ToolSetting | None = None) -> Example:
    """Two calls in one assistant turn, two tool results, one combined answer. With a `setting` the form is
    one its tools support (`parallel_forms` must not be empty)."""
    city_a, city_b = ctx.rng.sample(ctx.entities.cities, 2)
    form = ctx.rng.randint(0, 3) if setting is None else ctx.rng.choice(parallel_forms(setting.names))
    if form == 0:
        calls = [("get_weather", {"city": city_a}), ("get_weather", {"city": city_b})]
        text = ctx.pick((f"Compare the weather in {city_a} and {city_b}.", f"What's the weather in {city_a} and in {city_b}?",
                         f"Is it warmer in {city_a} or {city_b} right now?"))  # fmt: skip
    elif form == 1:
        calls = [("get_current_time", {"city": city_a}), ("get_current_time", {"city": city_b})]
        text = ctx.pick(
            (
                f"What time is it in {city_a} and {city_b}?",
                f"Tell me the local time in {city_a} and {city_b}.",
            )
        )
    elif form == 2:
        calls = [("get_weather", {"city": city_a}), ("get_current_time", {"city": city_a})]
        text = ctx.pick(
            (
                f"What's the weather and the local time in {city_a}?",
                f"Give me the time and weather for {city_a}.",
            )
        )
        if "time and weather" in text:
            calls.reverse()
    else:
        (text_a, args_a), (text_b, args_b) = calculator_request(ctx), conversion_request(ctx)
        calls = [("calculator", args_a), ("convert_units", args_b)]
        text = f"Two things: {text_a[0].lower() + text_a[1:]} And {text_b[0].lower() + text_b[1:]}"
    names = list(dict.fromkeys(name for name, _ in calls))
    if setting is None:
        tools = offered_tools(ctx, names)
        conv = Conversation(system_prompt(ctx, tools=True))
    else:
        tools = setting.tools
        conv = Conversation(setting.system)
    conv.user(noisy(ctx, text, lowercase_all=False))
    expected = tuple({"name": n, "arguments": a} for n, a in calls)
    ids = conv.call(calls, {"kind": CheckKind.TOOL_CALL, "tool_calls": expected})
    replies = []
    for call_id, (name, arguments) in zip(ids, calls, strict=True):
        result = run_tool(ctx.world, name, arguments, ctx.rng)
        conv.tool(call_id, name, result)
        replies.append(answer_from_result(ctx, name, arguments, result)[0])
    conv.assistant(" ".join(replies))
    return conv.example(Category.TOOL_PARALLEL, tools)


_UNSUPPORTED_REQUESTS = (
    ("Book me a flight to {city} next Friday.", "I can't book flights with the tools I have."),
    ("Send an email to {person} saying I'll be late.", "I can't send emails; none of my tools does that."),
    ("Order a {product} for me.", "I'm not able to place orders with the available tools."),
    ("Play some music.", "I can't play music with the tools I have."),
    ("Set an alarm for 7am.", "None of my tools can set alarms, sorry."),
    (
        "Translate 'good morning' into Japanese.",
        "I don't have a translation tool, so I can't do that reliably.",
    ),
)
_MESSAGE_REQUESTS = frozenset(
    request for request, _ in _UNSUPPORTED_REQUESTS if request.startswith("Send an email")
)
"""Unsupported only while no `send_message` is offered: with it, a message is what the request asks for."""
_TOOL_FOR_REQUEST = {
    "get_weather": weather_request,
    "get_current_time": time_request,
    "calculator": calculator_request,
    "send_message": message_request,
}
_MISSING_TOOL_REPLIES = {
    "get_weather": "I don't have a weather tool available, so I can't check the weather right now.",
    "get_current_time": "I can't look up the current time; none of my tools provides it.",
    "calculator": "I don't have a calculator tool here, so I won't guess the exact result.",
    "send_message": "I can't send messages; none of my tools does that.",
}


def no_tool(ctx: TaskContext, setting: ToolSetting | None = None) -> Example:
    """Tools are offered but none fits: answer directly, decline, or explain the missing tool. With a
    `setting`, a missing tool is one it does not offer (when it offers them all, another kind of turn)."""
    conv = Conversation(system_prompt(ctx, tools=True) if setting is None else setting.system)
    roll = ctx.rng.random()
    check = {"kind": CheckKind.NO_TOOL}
    absent = [name for name in _TOOL_FOR_REQUEST
              if name in ctx.tool_names and (setting is None or name not in setting.names)]  # fmt: skip
    if roll < 0.3 and absent:
        missing = ctx.pick(absent)
        tools = offered_tools(ctx, [], exclude=(missing,)) if setting is None else setting.tools
        text, _ = _TOOL_FOR_REQUEST[missing](ctx)
        conv.user(noisy(ctx, text))
        conv.assistant(_MISSING_TOOL_REPLIES[missing], check)
    elif roll < 0.55:
        tools = offered_tools(ctx, []) if setting is None else setting.tools
        unsupported = _UNSUPPORTED_REQUESTS
        if any(tool["function"]["name"] == "send_message" for tool in tools):
            unsupported = tuple(pair for pair in unsupported if pair[0] not in _MESSAGE_REQUESTS)
        request, reply = ctx.pick(unsupported)
        conv.user(noisy(ctx, request.format(city=ctx.pick(ctx.entities.cities), person=ctx.person(),
                                            product=ctx.pick(ctx.entities.products))))  # fmt: skip
        conv.assistant(reply, check)
    elif roll < 0.8:
        tools = offered_tools(ctx, []) if setting is None else setting.tools
        question, reply, short = fact_question(ctx)
        conv.user(noisy(ctx, question))
        conv.assistant(reply, check, {"kind": CheckKind.FACT, "answer": short})
    else:
        tools = offered_tools(ctx, []) if setting is None else setting.tools
        conv.user(ctx.pick(GREETINGS + THANKS + IDENTITY_QUESTIONS))
        conv.assistant(ctx.pick(GREETING_REPLIES), check)
    return conv.example(Category.NO_TOOL, tools)
