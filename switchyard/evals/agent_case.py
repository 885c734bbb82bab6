"""An agent case: the agents runtime (`switchyard.agents.Runner`) runs the configured agent on the case's input
against the endpoint, its tools answering from recordings, and the run's transcript becomes the `Outcome`.

Nobody is at the terminal, so approvals are the case's: a call listed in its `approve` is approved, every other
request is refused (and the model is told, as the runtime tells it). Which calls came after an injected tool
result is read back from the transcript, so the injection scorer sees exactly what the model saw.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping, Sequence
from typing import Any

import jsonschema
import pydantic

from switchyard.agents.agent import Agent, ModelSettings
from switchyard.agents.injection import InjectionPolicy
from switchyard.agents.limits import RunLimits, RunStatus
from switchyard.agents.model import ModelClient
from switchyard.agents.result import RunResult
from switchyard.agents.runner import Runner
from switchyard.agents.tool import FunctionTool, SideEffects, result_text
from switchyard.evals.agent_config import AgentConfig, ToolConfig
from switchyard.evals.endpoint import Prices
from switchyard.evals.outcome import Outcome, ToolCall
from switchyard.evals.scorers.normal_form import normalize
from switchyard.evals.scorers.tool_calls import call_key
from switchyard.evals.suite import AgentCase, Recording

NO_RECORDING = "no recorded result for these arguments"


class UnknownToolError(ValueError):
    """A case offers or records a tool its agent config does not define."""


class AgentEndpointError(RuntimeError):
    """The endpoint failed during an agent run: the case is recorded as not run, and retried on resume."""


def _recording_for(recordings: Sequence[Recording], arguments: Mapping[str, Any]) -> Recording | None:
    wanted = normalize(dict(arguments))
    for recording in recordings:
        if recording.arguments is None or normalize(dict(recording.arguments)) == wanted:
            return recording
    return None


def _arguments_model(tool: ToolConfig) -> type[pydantic.BaseModel]:
    """Arguments checked against the tool's JSON schema, as a real tool's would be (the model is told why)."""
    validator = jsonschema.Draft202012Validator(tool.parameters)

    class Arguments(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(extra="allow")

        @pydantic.model_validator(mode="before")
        @classmethod
        def follows_schema(cls, value: Any) -> Any:
            error = next(iter(validator.iter_errors(value)), None)
            if error is not None:
                where = "/".join(str(p) for p in error.absolute_path) or "(root)"
                raise ValueError(f"{where}: {error.message}")
            return value

    Arguments.__name__ = f"{tool.name}_arguments"
    return Arguments


def simulated_tool(tool: ToolConfig, recordings: Sequence[Recording], rng: random.Random) -> FunctionTool:
    """A tool that answers from `recordings` (the case's first), else from its live implementation, else with
    an error result naming the missing recording."""

    live = None
    if tool.implementation == "demo":
        from switchyard.agents.demo import DemoWorld

        live = DemoWorld().world

    def answer(**arguments: Any) -> Any:
        recording = _recording_for(recordings, arguments)
        if recording is not None:
            return recording.result
        if live is not None:
            from switchyard.agents.demo_world import run_tool

            return run_tool(live, tool.name, arguments, rng)
        if tool.implementation == "arithmetic":
            return arithmetic(tool.name, arguments)
        return {"error": NO_RECORDING}

    return FunctionTool(
        name=tool.name,
        description=tool.description,
        parameters=tool.parameters,
        function=answer,
        arguments_model=_arguments_model(tool),
        needs_approval=tool.needs_approval,
        side_effects=SideEffects.ACTING if tool.acting else SideEffects.READ_ONLY,
        max_tokens=tool.max_tokens,
    )


def arithmetic(name: str, arguments: Mapping[str, Any]) -> str:
    """A user's own calculator: the call's one string argument evaluated (+ - * / and parentheses only, the
    demo world's evaluator), the number back as text as the demo formats it ("84", "3.33"); a bad expression
    raises, and the runtime tells the model why, as it would for the user's function."""
    from switchyard.agents.demo_world import ToolError, evaluate_expression, format_number

    texts = [v for v in arguments.values() if isinstance(v, str)]
    if len(texts) != 1:
        raise ToolError(f"{name} takes one expression, got {dict(arguments)}")
    return format_number(evaluate_expression(texts[0]))


def build_agent(case: AgentCase, config: AgentConfig, model: str, client: ModelClient) -> Agent:
    names = case.tools if case.tools is not None else tuple(t.name for t in config.tools)
    for name in [*names, *case.recorded]:
        if config.tool(name) is None:
            raise UnknownToolError(f"case {case.id}: tool {name!r} is not in the agent config")
    rng = random.Random(case.id)
    tools = []
    for name in names:
        tool = config.tool(name)
        assert tool is not None
        tools.append(simulated_tool(tool, (*case.recorded.get(name, ()), *tool.recorded), rng))
    return Agent(
        name=config.name,
        instructions=case.instructions if case.instructions is not None else config.instructions,
        tools=tools,
        model=model,
        client=client,
        settings=ModelSettings(temperature=config.temperature, max_tokens=config.max_tokens),
    )


def _approves(case: AgentCase, tool: str, arguments: Mapping[str, Any]) -> bool:
    key = call_key({"name": tool, "arguments": dict(arguments)})
    return any(call_key(call) == key for call in case.approve)


def transcript_calls(
    result: RunResult, config: AgentConfig, injected: Sequence[str], decisions: Mapping[str, bool]
) -> tuple[ToolCall, ...]:
    """Every call of the run in order, marked acting, approved, and whether an injected result preceded it."""
    calls: list[ToolCall] = []
    seen_injection = False
    for message in result.messages:
        if message.get("role") == "tool" and any(
            text in str(message.get("content") or "") for text in injected
        ):
            seen_injection = True
        if message.get("role") != "assistant":
            continue
        for call in message.get("tool_calls") or []:
            function = call.get("function", {})
            tool = config.tool(function.get("name", ""))
            calls.append(
                ToolCall(
                    name=function.get("name", ""),
                    arguments=function.get("arguments") or "",
                    acting=tool is not None and tool.acting,
                    approved=decisions.get(call.get("id", "")),
                    after_injection=seen_injection,
                )
            )
    return tuple(calls)


async def run_agent_case(
    case: AgentCase, config: AgentConfig, model: str, client: ModelClient, prices: Prices
) -> Outcome:
    agent = build_agent(case, config, model, client)
    runner = Runner(
        limits=RunLimits(max_turns=config.max_turns, timeout=config.timeout),
        policy=InjectionPolicy(spotlight=config.spotlight),
    )
    decisions: dict[str, bool] = {}
    started = time.perf_counter()
    result = await runner.run(agent, case.input)
    for _ in range(config.max_turns):
        if not result.interrupted:
            break
        for item in result.pending_approvals:
            approved = _approves(case, item.tool, item.arguments)
            decisions[item.call_id] = approved
            if approved:
                result.state.approve(item.call_id)
            else:
                result.state.reject(item.call_id, "the user declined")
        result = await runner.resume(result.state)
    latency = time.perf_counter() - started
    if result.status is RunStatus.MODEL_ERROR:
        raise AgentEndpointError(result.status_detail)
    injected = [
        result_text(r.result)
        for tool in config.tools
        for r in (*case.recorded.get(tool.name, ()), *tool.recorded)
        if r.injected
    ]
    content = result.final_output if result.completed else result.partial_output
    usage = result.usage
    return Outcome(
        content=str(content or ""),
        tool_calls=transcript_calls(result, config, injected, decisions),
        finish_reason=str(result.status),
        prompt=case.input,
        latency_s=latency,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cost=prices.cost(usage.input_tokens, usage.output_tokens),
        details={"status": str(result.status), "status_detail": result.status_detail, "turns": result.turns},
    )
