"""Tool use on tools the model has never seen: conversations over procedurally generated tools (`tool_factory`),
1 to 10 offered at a time, so what is learned is reading a tool list, not six tools.

- `open_tool_call`: the request names what one offered tool does; the call copies or derives its arguments;
  the reply reads the result back. Sometimes a follow-up: another tool, the same tool for another value
  ("and for Ada?"), or thanks (no call).
- `open_tool_parallel`: two or three requests in one message, all calls in one turn.
- `open_no_tool`: nothing offered fits (another object, or the right object but an action no tool has, or
  plain chat): no call, and never a tool that was not offered.

Offered lists mix the right tool with its near neighbours (the same object under other actions, the same action
on other objects) and tools of other domains, so picking by one word is not enough. A share of the tools are
calculators under many names and wordings, since users write their own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from switchyard.agents.demo_world import evaluate_expression, format_number
from switchyard_training.example import Category, CheckKind, Example
from switchyard_training.tasks.chat import GREETING_REPLIES, GREETINGS, THANKS, THANKS_REPLIES, fact_question
from switchyard_training.tasks.context import Conversation, TaskContext
from switchyard_training.tasks.surface import noisy, system_prompt
from switchyard_training.tasks.tool_factory import (
    Parameter,
    ToolSpec,
    answer_generated,
    make_tool,
    request_for,
    run_generated,
)
from switchyard_training.tasks.tool_requests import calculator_request
from switchyard_training.tasks.tool_vocab import Action, Domain, ToolVocab

MAX_TOOLS_CHARS = 2000
"""Offered tools' JSON beyond this is trimmed (never the needed ones): ~650 tokens, so a conversation fits a training row."""

_MATH_NAMES = ("calc", "calculate", "compute", "evaluate", "math", "arithmetic", "do_math", "eval_expression",
               "solve_math", "calculator_tool", "mathEval", "compute_expression")  # fmt: skip
_MATH_PARAMS = ("expression", "expr", "formula", "input", "equation", "math")
_MATH_DESCRIPTIONS = (
    "Evaluates a math expression.", "Does arithmetic on numbers.", "Computes the value of a formula like 2*(3+4).",
    "A calculator.", "Performs basic math: + - * / and parentheses.", "Returns the numeric result of an expression.",
    "Use for any calculation the user asks for.", "Exact arithmetic; do not compute in your head.",
)  # fmt: skip
_MATH_RESULT_KEYS = ("result", "value", "answer")
_MATH_FRAMES = (
    "What's {words}?", "whats {words}", "how much is {words}", "Could you calculate {expr}?", "quick math: {expr}",
    "I need {words}.", "{expr}", "Do the math: {expr}", "what do you get for {words}?", "Please compute {words}.",
    "Help me with {expr}", "{words} = ?", "Solve {expr}", "what does {words} make",
)  # fmt: skip
_OP_WORDS = {"+": ("plus", "and", "+", "add"), "-": ("minus", "take away", "-", "less"),
             "*": ("times", "multiplied by", "x", "*"), "/": ("divided by", "over", "/")}  # fmt: skip
_WORDED = {
    "+": ("What is the sum of {a} and {b}?", "Add {b} to {a}.", "{a} increased by {b}?", "Increase {a} by {b}."),
    "-": ("Subtract {b} from {a}.", "{a} reduced by {b}", "What remains when {b} is taken from {a}?",
          "Reduce {a} by {b}."),
    "*": ("Multiply {a} by {b}.", "the product of {a} and {b}", "{b} packs of {a}, how many in total?",
          "Multiply {a} with {b}."),
    "/": ("Divide {a} by {b}.", "What is {a} split {b} ways?", "How many {b}s fit in {a}?",
          "{a} shared by {b} people: how much each?"),
}  # fmt: skip
"""Operations worded whole ("Subtract 4 from 10"): the call's expression keeps `a` first (`a - b`, `a / b`)."""
_STEPS = {"+": ("add {n}", "plus {n}", "increase by {n}"), "-": ("subtract {n}", "minus {n}", "take off {n}"),
          "*": ("multiply by {n}", "times {n}"), "/": ("divide by {n}", "split {n} ways")}  # fmt: skip
_CHAINS = ("From {a}: {s1}, then {s2}.", "Take {a}. First {s1}, then {s2}.", "{a}, {s1}, {s2}: what's the result?",
           "Calculate {a}, {s1}, then {s2}.")  # fmt: skip
"""Step-by-step chains, read left to right: ((a op1 b) op2 c)."""


def math_tool(ctx: TaskContext) -> ToolSpec:
    """A calculator as users write their own: many names, parameter names and wordings; a quarter of them simply
    `calculator`, the name most users give theirs (run 33, which never saw it, declined a `calculator` whose
    description was not the demo's)."""
    name = "calculator" if ctx.chance(0.25) else ctx.pick(_MATH_NAMES)
    param = ctx.pick(_MATH_PARAMS)
    schema_param: dict[str, Any] = {"type": "string"}
    if ctx.chance(0.5):
        schema_param["description"] = ctx.pick(
            ("The expression to evaluate", "e.g. 3 * (4 + 5)", "Math to do")
        )
    schema = {"type": "function", "function": {
        "name": name, "description": ctx.pick(_MATH_DESCRIPTIONS),
        "parameters": {"type": "object", "properties": {param: schema_param}, "required": [param]}}}  # fmt: skip
    action = Action("calculate", ("calculate",))
    return ToolSpec(name, action, Domain("math", ("sum",)), "sum", (Parameter(param, None, schema_param, True),),
                    schema)  # fmt: skip


def math_request(ctx: TaskContext, tool: ToolSpec) -> tuple[str, dict[str, Any]]:
    """An arithmetic request, the expression as the call's argument: the demo corpus's wordings, an expression
    inline with operators as symbols or words, an operation worded whole, or a chain of steps."""
    param = tool.parameters[0].name
    roll = ctx.rng.random()
    if roll < 0.3:
        text, arguments = calculator_request(ctx)
        return text, {param: arguments["expression"]}
    a, b, c = ctx.rng.randint(2, 999), ctx.rng.randint(2, 99), ctx.rng.randint(2, 50)
    op, op2 = ctx.pick("+-*/"), ctx.pick("+-*/")
    if roll < 0.6:
        expr, words = f"{a} {op} {b}", f"{a} {ctx.pick(_OP_WORDS[op])} {b}"
        if ctx.chance(0.35):
            expr, words = f"{expr} {op2} {c}", f"{words} {ctx.pick(_OP_WORDS[op2])} {c}"
        return ctx.pick(_MATH_FRAMES).format(expr=expr, words=words), {param: expr}
    if roll < 0.8:
        return ctx.pick(_WORDED[op]).format(a=a, b=b), {param: f"{a} {op} {b}"}
    s1, s2 = ctx.pick(_STEPS[op]).format(n=b), ctx.pick(_STEPS[op2]).format(n=c)
    return ctx.pick(_CHAINS).format(a=a, s1=s1, s2=s2), {param: f"({a} {op} {b}) {op2} {c}"}


def _math_result(ctx: TaskContext, arguments: dict[str, Any]) -> dict[str, Any] | str:
    """A result object, or (two times in five) the bare number as text, as a user's `@tool` returning a number
    gives it back (run 33 saw only objects, and read a bare "42" back wrong)."""
    (expression,) = arguments.values()
    try:
        value = evaluate_expression(expression)
    except (ValueError, ZeroDivisionError) as exc:
        return {"error": str(exc) or "invalid expression"}
    if ctx.chance(0.4):
        return format_number(value)
    return {ctx.pick(_MATH_RESULT_KEYS): float(format_number(value))}


@dataclass(frozen=True)
class OpenSetting:
    """A system prompt and generated tools that one or more conversations share."""

    system: str | None
    specs: tuple[ToolSpec, ...]

    @property
    def tools(self) -> list[dict[str, Any]]:
        return [spec.schema for spec in self.specs]


def open_setting(ctx: TaskContext, count: int | None = None) -> OpenSetting:
    """1 to 10 tools around one domain: the same object under other actions, other objects, other domains."""
    vocab = ctx.tool_vocab
    count = count or ctx.rng.choices(range(1, 11), (3, 5, 6, 6, 5, 4, 3, 2, 2, 1))[0]
    anchor = make_tool(ctx, vocab)
    specs = [anchor]
    attempts = 0
    while len(specs) < count and attempts < 40:
        attempts += 1
        roll = ctx.rng.random()
        if roll < 0.35:
            spec = make_tool(ctx, vocab, domain=anchor.domain, obj=anchor.object)
        elif roll < 0.55:
            spec = make_tool(ctx, vocab, action=anchor.action, domain=anchor.domain)
        elif roll < 0.65 and ctx.math_tools:
            spec = math_tool(ctx)
        else:
            spec = make_tool(ctx, vocab)
        if all(s.name != spec.name and (s.action.meaning, s.object) != (spec.action.meaning, spec.object)
               for s in specs):  # fmt: skip
            specs.append(spec)
    ctx.rng.shuffle(specs)
    while len(specs) > 1 and len(str(OpenSetting(None, tuple(specs)).tools)) > MAX_TOOLS_CHARS:
        specs.pop()
    return OpenSetting(system_prompt(ctx, tools=True), tuple(specs))


def _request(ctx: TaskContext, tool: ToolSpec) -> tuple[str, dict[str, Any]]:
    if tool.domain.name == "math":
        return math_request(ctx, tool)
    request = request_for(ctx, ctx.tool_vocab, tool)
    return request.text, request.arguments


def _result(ctx: TaskContext, tool: ToolSpec, arguments: dict[str, Any]) -> dict[str, Any] | str:
    return _math_result(ctx, arguments) if tool.domain.name == "math" else run_generated(ctx, tool, arguments)


def _answer(
    ctx: TaskContext, tool: ToolSpec, arguments: dict[str, Any], result: dict[str, Any] | str
) -> tuple[str, str | None]:
    if isinstance(result, str):
        value = result
    elif tool.domain.name != "math" or "error" in result:
        return answer_generated(ctx, tool, result)
    else:
        value = format_number(next(iter(result.values())))
    (expression,) = arguments.values()
    return ctx.pick((f"{expression} = {value}.", f"The result is {value}.", f"That comes to {value}.",
                     f"It's {value}.")), value  # fmt: skip


def _exchange(
    ctx: TaskContext, conv: Conversation, tool: ToolSpec, text: str, arguments: dict[str, Any]
) -> None:
    conv.user(noisy(ctx, text, lowercase_all=False))
    expected = {"name": tool.name, "arguments": arguments}
    (call_id,) = conv.call([(tool.name, arguments)], {"kind": CheckKind.TOOL_CALL, "tool_calls": (expected,)})
    result = _result(ctx, tool, arguments)
    conv.tool(call_id, tool.name, result)
    reply, value = _answer(ctx, tool, arguments, result)
    conv.assistant(reply, *([{"kind": CheckKind.FACT, "answer": value}] if value else []))


_COPIED_KINDS = frozenset(("person", "city", "code", "product", "company"))
"""Slots whose value a follow-up can swap for another ("And for Ada?")."""


def _same_for_another(
    ctx: TaskContext, tool: ToolSpec, arguments: dict[str, Any]
) -> tuple[str, dict[str, Any]] | None:
    """A follow-up that repeats the last call with one copied value changed ("And for Ada Lovelace?")."""
    for parameter in tool.parameters:
        slot = parameter.slot
        if slot is not None and slot.kind in _COPIED_KINDS and parameter.name in arguments:
            value = slot.value(ctx, parameter.schema)
            if value != arguments[parameter.name]:
                text = ctx.pick((f"And for {value}?", f"Now do the same for {value}.", f"What about {value}?",
                                 f"Same again, but {value}."))  # fmt: skip
                return text, {**arguments, parameter.name: value}
    return None


def open_tool_call(ctx: TaskContext, setting: OpenSetting | None = None) -> Example:
    setting = setting or open_setting(ctx)
    conv = Conversation(setting.system)
    if ctx.chance(0.1):
        conv.user(ctx.pick(GREETINGS))
        conv.assistant(ctx.pick(GREETING_REPLIES))
    tool = ctx.rng.choice(setting.specs)
    text, arguments = _request(ctx, tool)
    _exchange(ctx, conv, tool, text, arguments)
    if ctx.chance(0.4):
        roll = ctx.rng.random()
        again = _same_for_another(ctx, tool, arguments) if roll < 0.35 else None
        if again is not None:
            _exchange(ctx, conv, tool, *again)
        elif roll < 0.8:
            other = ctx.rng.choice(setting.specs)
            _exchange(ctx, conv, other, *_request(ctx, other))
        else:
            conv.user(ctx.pick(THANKS))
            conv.assistant(ctx.pick(THANKS_REPLIES), {"kind": CheckKind.NO_TOOL})
    return conv.example(Category.OPEN_TOOL_CALL, setting.tools)


def _joined(ctx: TaskContext, texts: list[str]) -> str:
    lowered = [t[0].lower() + t[1:] for t in texts[1:]]
    if len(texts) == 2:
        return ctx.pick((f"{texts[0]} Also, {lowered[0]}", f"{texts[0]} And {lowered[0]}", f"Two things. {texts[0]} "
                         f"{texts[1]}", f"{texts[0]} Then {lowered[0]}"))  # fmt: skip
    return f"{texts[0]} Also, {lowered[0]} And {lowered[1]}"


def open_tool_parallel(ctx: TaskContext, setting: OpenSetting | None = None) -> Example:
    """Two or three calls in one turn: one tool for several values, or several tools."""
    setting = setting or open_setting(ctx)
    conv = Conversation(setting.system)
    count = 2 if ctx.chance(0.8) else 3
    calls: list[tuple[ToolSpec, dict[str, Any]]] = []
    texts = []
    for _ in range(count):
        tool = ctx.rng.choice(setting.specs)
        text, arguments = _request(ctx, tool)
        if any(t.name == tool.name and a == arguments for t, a in calls):
            continue
        calls.append((tool, arguments))
        texts.append(text)
    if len(calls) == 1:
        again = _same_for_another(ctx, *calls[0])
        if again is not None:
            calls.append((calls[0][0], again[1]))
            texts.append(again[0])
    conv.user(noisy(ctx, _joined(ctx, texts) if len(texts) > 1 else texts[0], lowercase_all=False))
    expected = tuple({"name": t.name, "arguments": a} for t, a in calls)
    ids = conv.call([(t.name, a) for t, a in calls], {"kind": CheckKind.TOOL_CALL, "tool_calls": expected})
    replies = []
    for call_id, (tool, arguments) in zip(ids, calls, strict=True):
        result = _result(ctx, tool, arguments)
        conv.tool(call_id, tool.name, result)
        replies.append(_answer(ctx, tool, arguments, result)[0])
    conv.assistant(" ".join(replies))
    return conv.example(Category.OPEN_TOOL_PARALLEL, setting.tools)


def _unoffered(ctx: TaskContext, setting: OpenSetting) -> ToolSpec:
    """A tool no offered one does: another object, or an offered object under an action of another sense."""
    offered = {(s.action.meaning, s.object) for s in setting.specs}
    objects = [s for s in setting.specs if s.domain.name != "math"]
    for _ in range(30):
        if objects and ctx.chance(0.4):
            near = ctx.rng.choice(objects)
            spec = make_tool(ctx, ctx.tool_vocab, domain=near.domain, obj=near.object)
        else:
            spec = make_tool(ctx, ctx.tool_vocab)
        if (spec.action.meaning, spec.object) not in offered:
            return spec
    raise RuntimeError("every action on every object is offered")  # 10 tools cannot cover a vocabulary


def open_no_tool(ctx: TaskContext, setting: OpenSetting | None = None) -> Example:
    setting = setting or open_setting(ctx)
    conv = Conversation(setting.system)
    check = {"kind": CheckKind.NO_TOOL}
    if ctx.chance(0.75):
        wanted = _unoffered(ctx, setting)
        request = request_for(ctx, ctx.tool_vocab, wanted)
        conv.user(noisy(ctx, request.text, lowercase_all=False))
        decline = ctx.pick(ctx.tool_vocab.declines).format(verb=request.verb, object=request.object_phrase)
        conv.assistant(decline, check)
    elif ctx.chance(0.7):
        question, reply, short = fact_question(ctx)
        conv.user(noisy(ctx, question))
        conv.assistant(reply, check, {"kind": CheckKind.FACT, "answer": short})
    else:
        conv.user(ctx.pick(GREETINGS + THANKS))
        conv.assistant(ctx.pick(GREETING_REPLIES), check)
    return conv.example(Category.OPEN_NO_TOOL, setting.tools)


OPEN_GENERATORS = {
    Category.OPEN_TOOL_CALL: open_tool_call,
    Category.OPEN_TOOL_PARALLEL: open_tool_parallel,
    Category.OPEN_NO_TOOL: open_no_tool,
}
"""The open-tool family, each taking an optional shared `OpenSetting` (`sessions.open_tool_session`)."""


def open_tool_session(ctx: TaskContext, members: list[TaskContext], weights: dict[Category, float],
                      group: int) -> list[Example]:  # fmt: skip
    """One setting drawn from ctx, one conversation per member, each member's category drawn by `weights`."""
    setting = open_setting(ctx)
    categories = [c for c in OPEN_GENERATORS if weights.get(c, 0) > 0]
    examples = []
    for member in members:
        category = member.rng.choices(categories, [weights[c] for c in categories])[0]
        example = OPEN_GENERATORS[category](member, setting)
        example.group = group
        examples.append(example)
    return examples


__all__ = ["OPEN_GENERATORS", "OpenSetting", "ToolVocab", "open_setting", "open_tool_session"]
