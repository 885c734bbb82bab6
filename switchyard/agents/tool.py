"""Function tools: a typed Python function becomes a tool whose JSON schema comes from its signature.

The schema is built by pydantic from the parameters' type hints and the docstring's `Args:` section, with no
extra properties allowed, and the same pydantic model validates the model's arguments before the function runs:
a call is never dispatched with guessed arguments (see `ToolArgumentsError`).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, get_type_hints

import pydantic


class SideEffects(StrEnum):
    """Whether a tool only reads or acts on the world; acting tools get extra checks once input is untrusted."""

    READ_ONLY = "read_only"
    ACTING = "acting"


@dataclass(frozen=True)
class ToolContext:
    """What the runtime passes to a tool that declares a `ToolContext` parameter (never shown to the model)."""

    run_id: str
    idempotency_key: str
    """Stable for one tool call of one run across crashes and resumes: acting tools dedupe on it."""
    caller: str
    scopes: frozenset[str]


class ToolArgumentsError(ValueError):
    """The model's arguments are not JSON or do not match the tool's schema; the message goes back to it."""


ApprovalPredicate = Callable[[dict[str, Any]], bool]


@dataclass(frozen=True)
class FunctionTool:
    """A tool the runtime can offer to a model and execute; build one with `@tool`."""

    name: str
    description: str
    parameters: dict[str, Any]
    """JSON schema of the arguments object (additionalProperties false)."""
    function: Callable[..., Any]
    arguments_model: type[pydantic.BaseModel]
    context_parameter: str | None = None
    """Name of the parameter that receives the `ToolContext`, if the function takes one."""
    timeout: float | None = None
    """Seconds a call may run; a late call ends with an error result (a sync function's thread runs on)."""
    needs_approval: bool | ApprovalPredicate = False
    """True, or a predicate on the validated arguments, to pause the run for a human decision first."""
    side_effects: SideEffects = SideEffects.READ_ONLY
    scopes: frozenset[str] = frozenset()
    """Permissions the caller must hold for the runtime to run (or even offer) this tool."""
    idempotent: bool = False
    """Safe to run again for the same idempotency key (the tool dedupes); decides what a resume may retry."""
    untrusted_output: bool = True
    """Results are data from outside the run's control: spotlighted and counted as taint."""
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def acting(self) -> bool:
        return self.side_effects is SideEffects.ACTING

    def spec(self) -> dict[str, Any]:
        """The OpenAI `tools` entry."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def parse_arguments(self, text: str) -> dict[str, Any]:
        """Validated arguments as plain JSON values; `ToolArgumentsError` says what is wrong."""
        try:
            raw = json.loads(text or "{}")
        except json.JSONDecodeError as exc:
            raise ToolArgumentsError(
                f"arguments are not valid JSON ({exc.msg} at position {exc.pos})"
            ) from None
        if not isinstance(raw, dict):
            raise ToolArgumentsError("arguments must be a JSON object")
        try:
            model = self.arguments_model.model_validate(raw)
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in exc.errors()
            )
            raise ToolArgumentsError(f"arguments do not match the schema: {problems}") from None
        return model.model_dump(mode="json")

    def approval_required(self, arguments: dict[str, Any]) -> bool:
        if callable(self.needs_approval):
            return bool(self.needs_approval(arguments))
        return self.needs_approval

    async def invoke(self, arguments: dict[str, Any], context: ToolContext) -> str:
        """Run the function on validated arguments and return its result as text for the tool message."""
        values = dict(self.arguments_model.model_validate(arguments))
        if self.context_parameter is not None:
            values[self.context_parameter] = context
        if inspect.iscoroutinefunction(self.function):
            call: Awaitable[Any] = self.function(**values)
        else:
            call = asyncio.to_thread(self.function, **values)
        result = await asyncio.wait_for(call, self.timeout) if self.timeout is not None else await call
        return result_text(result)


def result_text(result: Any) -> str:
    if isinstance(result, str):
        return result
    if isinstance(result, pydantic.BaseModel):
        return result.model_dump_json()
    return json.dumps(pydantic.TypeAdapter(Any).dump_python(result, mode="json"), ensure_ascii=False)


def tool(
    function: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    needs_approval: bool | ApprovalPredicate = False,
    side_effects: SideEffects | str = SideEffects.READ_ONLY,
    scopes: frozenset[str] | set[str] | tuple[str, ...] = (),
    idempotent: bool = False,
    untrusted_output: bool = True,
    schema: dict[str, Any] | None = None,
) -> Any:
    """Decorator: `@tool` or `@tool(needs_approval=True, side_effects="acting", ...)` over a typed function.

    `schema` replaces the advertised parameters schema (e.g. the exact one a model was trained on); the
    function's signature still validates every call.
    """

    def build(fn: Callable[..., Any]) -> FunctionTool:
        summary, arg_docs = parse_docstring(inspect.getdoc(fn) or "")
        model, context_parameter = arguments_model_of(fn, arg_docs)
        return FunctionTool(
            name=name or fn.__name__,
            description=description or summary,
            parameters=schema if schema is not None else strict_schema(model),
            function=fn,
            arguments_model=model,
            context_parameter=context_parameter,
            timeout=timeout,
            needs_approval=needs_approval,
            side_effects=SideEffects(side_effects),
            scopes=frozenset(scopes),
            idempotent=idempotent,
            untrusted_output=untrusted_output,
        )

    return build(function) if function is not None else build


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """(the text before `Args:`, {parameter: description}) from a Google-style docstring."""
    head, _, args = doc.partition("\nArgs:")
    descriptions: dict[str, str] = {}
    current: str | None = None
    for line in args.splitlines():
        match = re.match(r"\s+(\w+)(?:\s*\([^)]*\))?:\s*(.*)", line)
        if match and (current is None or len(line) - len(line.lstrip()) <= 4):
            current = match.group(1)
            descriptions[current] = match.group(2).strip()
        elif current is not None and line.strip():
            if not line.startswith((" ", "\t")):
                break  # a new section (Returns:, Raises:)
            descriptions[current] = f"{descriptions[current]} {line.strip()}".strip()
    return " ".join(head.split()), descriptions


def arguments_model_of(
    fn: Callable[..., Any], arg_docs: dict[str, str]
) -> tuple[type[pydantic.BaseModel], str | None]:
    hints = get_type_hints(fn)
    fields: dict[str, Any] = {}
    context_parameter = None
    for parameter in inspect.signature(fn).parameters.values():
        annotation = hints.get(parameter.name, Any)
        if annotation is ToolContext:
            context_parameter = parameter.name
            continue
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise TypeError(f"tool {fn.__name__}: *args and **kwargs cannot be described by a JSON schema")
        default = ... if parameter.default is parameter.empty else parameter.default
        fields[parameter.name] = (
            annotation,
            pydantic.Field(default, description=arg_docs.get(parameter.name)),
        )
    model = pydantic.create_model(  # type: ignore[call-overload]
        f"{fn.__name__}_arguments", __config__=pydantic.ConfigDict(extra="forbid"), **fields
    )
    return model, context_parameter


def strict_schema(model: type[pydantic.BaseModel]) -> dict[str, Any]:
    """The model's JSON schema without pydantic's titles (prompt tokens that teach nothing)."""
    schema = model.model_json_schema()
    schema = _drop_titles(schema)
    schema["additionalProperties"] = False
    schema.setdefault("properties", {})
    return schema


def _drop_titles(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _drop_titles(v) for k, v in node.items() if not (k == "title" and isinstance(v, str))}
    if isinstance(node, list):
        return [_drop_titles(v) for v in node]
    return node
