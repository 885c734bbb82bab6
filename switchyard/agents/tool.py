"""Function tools: a typed Python function becomes a tool whose JSON schema comes from its signature.

The schema is built by pydantic from the parameters' type hints and the docstring's `Args:` section, with no
extra properties allowed, and the same pydantic model validates the model's arguments before the function runs:
a call is never dispatched with guessed arguments (see `ToolArgumentsError`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import json
import re
import threading
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


class ToolTimeoutError(TimeoutError):
    """A call ran past its tool's `timeout` and was abandoned (see `FunctionTool.invoke`)."""

    def __init__(self, tool: str, timeout: float) -> None:
        super().__init__(f"{tool} timed out after {timeout} s")
        self.tool = tool
        self.timeout = timeout


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
    """Seconds a call may run; past it the call is abandoned with `ToolTimeoutError` and its result, should it
    ever come, is discarded (an async function is cancelled; a sync function's thread cannot be, and runs on)."""
    needs_approval: bool | ApprovalPredicate = False
    """True, or a predicate on the validated arguments, to pause the run for a human decision first."""
    side_effects: SideEffects = SideEffects.READ_ONLY
    scopes: frozenset[str] = frozenset()
    """Permissions the caller must hold for the runtime to run (or even offer) this tool."""
    idempotent: bool = False
    """Safe to run again for the same idempotency key (the tool dedupes); decides what a resume may retry."""
    untrusted_output: bool = True
    """Results are data from outside the run's control: spotlighted and counted as taint."""
    max_tokens: int | None = None
    """Tokens a reply calling this tool may need (a message's whole text): a turn that offers the tool asks
    for at least this many, whatever the agent's `ModelSettings.max_tokens` (agents/reply_budget.py)."""
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
            raise ToolArgumentsError(
                f"arguments do not match the schema: {validation_problems(exc)}"
            ) from None
        return model.model_dump(mode="json")

    def approval_required(self, arguments: dict[str, Any]) -> bool:
        if callable(self.needs_approval):
            return bool(self.needs_approval(arguments))
        return self.needs_approval

    async def invoke(self, arguments: dict[str, Any], context: ToolContext) -> str:
        """Run the function on validated arguments and return its result as text for the tool message.

        Past `timeout` this raises `ToolTimeoutError` and the call is abandoned: an async function is
        cancelled; a sync function (on its own thread, see `run_in_thread`) cannot be stopped, so it runs on,
        and whatever it returns or raises later is discarded. An acting tool may therefore still take effect
        after its timeout; the runner records it so that no resume runs it again.
        """
        values = dict(self.arguments_model.model_validate(arguments))
        if self.context_parameter is not None:
            values[self.context_parameter] = context
        if inspect.iscoroutinefunction(self.function):
            call: Awaitable[Any] = self.function(**values)
        else:
            call = run_in_thread(self.function, values, name=f"tool-{self.name}")
        if self.timeout is None:
            return result_text(await call)
        try:
            async with asyncio.timeout(self.timeout) as deadline:
                result = await call
        except TimeoutError:
            if deadline.expired():
                raise ToolTimeoutError(self.name, self.timeout) from None
            raise  # the function's own TimeoutError: a failure, not our timeout
        return result_text(result)


def run_in_thread(function: Callable[..., Any], values: dict[str, Any], *, name: str) -> asyncio.Future[Any]:
    """Run a sync function on a daemon thread of its own; the future settles with its result or exception.

    A Python thread cannot be stopped, so a call nobody waits for any more (timed out, run cancelled) runs on.
    A thread of its own keeps such a call from holding a shared pool's worker (starving later calls) and from
    delaying `asyncio.run`'s exit; being a daemon, it does not delay the process's exit either. Its late
    result is discarded here: the future is already done (cancelled), or the loop is already closed.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(result: Any, error: BaseException | None) -> None:
        if future.done():
            return  # abandoned: the late result goes nowhere
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)

    def work() -> None:
        result: Any = None
        error: BaseException | None = None
        try:
            result = context.run(function, **values)
        except BaseException as exc:
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting for this
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=work, name=name, daemon=True).start()
    return future


def validation_problems(exc: pydantic.ValidationError) -> str:
    """Each problem as `field.path: message`, for error text the model can act on."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in exc.errors())


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
    max_tokens: int | None = None,
) -> Any:
    """Decorator: `@tool` or `@tool(needs_approval=True, side_effects="acting", ...)` over a typed function.

    `schema` replaces the advertised parameters schema (e.g. the exact one a model was trained on); the
    function's signature still validates every call. `max_tokens`: what a reply calling it may need.
    """
    if max_tokens is not None and max_tokens <= 0:
        raise ValueError(f"max_tokens must be positive or None, got {max_tokens}")

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
            max_tokens=max_tokens,
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
