"""A chat request -> the prompt, sampling params and reply plan the engine and the reply need, in one trip.

Everything that needs the tokenizer (rendering the chat template, tokenizing, reading whether the prompt ends
inside a <think> block) is one call to the text thread (engine/text_worker.py). The rest is request checking:
tools and tool_choice, the output constraint (a response format, vLLM's structured outputs, or the tool-call
grammar), and the sampling fields a constraint cannot live with. Compiling the grammar and truncating the
prompt are the engine's, in `AsyncLLMEngine.add_request`, the server's one engine call per request.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from switchyard.engine.sampling_params import SamplingParams
from switchyard.engine.structured.reasoning import after_reasoning
from switchyard.engine.text_worker import RenderedChat
from switchyard.errors import InvalidRequestError
from switchyard.reasoning import prompt_closes_reasoning, prompt_opens_reasoning
from switchyard.server.chat_protocol import ChatCompletionRequest, ChatMessage
from switchyard.server.response_format import structured_outputs_of
from switchyard.server.state import ServerState, TokenTexts
from switchyard.tool_calling import (
    ToolCallFormat,
    parse_tool_choice,
    parse_tools,
    tool_call_structure,
)

MAX_TOOLS = 128
"""Tools one request may offer (OpenAI's limit): checked before any schema work."""

PROMPT_TAIL_TOKENS = 16
"""Prompt tokens read to tell whether the template opened the reply's reasoning ("<think>\n" at its end)."""


@dataclass(frozen=True)
class ReasoningPlan:
    """How a request's replies split into reasoning and answer (the server's --reasoning-parser)."""

    opened: bool
    """The prompt ends inside a <think> block: replies start in their reasoning."""
    include: bool
    """The request's include_reasoning: False drops the reasoning from the reply."""


@dataclass(frozen=True)
class ChatReplyPlan:
    """How a chat request's engine outputs become its reply: what parses them and what the reply reports."""

    n: int
    """Choices per request (the request's `n`)."""
    tokens: TokenTexts
    """Names the tokens of logprob entries (token text, or "token_id:N")."""
    want_logprobs: bool
    """The request's `logprobs`: each choice carries its tokens' logprobs."""
    prompt_logprobs: int | None = None
    """vLLM's: this many alternatives per prompt token on the whole response; None: not asked."""
    tool_format: ToolCallFormat | None = None
    """The model's tool-call format, when the reply may call tools; None: the reply is plain content."""
    reasoning: ReasoningPlan | None = None
    """None without a reasoning parser: the reply is not split."""


@dataclass(frozen=True)
class PreparedChat:
    """A chat request ready for the engine: what to generate from, how, and how to read the outputs."""

    prompt_token_ids: list[int]
    """The rendered conversation, before any `truncate_prompt_tokens` (the engine applies that)."""
    params: SamplingParams
    """With the output constraint set, still to be compiled (by `add_request`)."""
    reply: ChatReplyPlan


async def prepare_chat(body: ChatCompletionRequest, state: ServerState) -> PreparedChat:
    """Check `body` and render it; InvalidRequestError names the field at fault."""
    engine = state.engine
    params = body.build_sampling_params(
        engine.generation_defaults, body.resolved_max_tokens(), body.resolved_logprobs()
    )
    if engine.tokenizer is None:
        raise InvalidRequestError("this model has no tokenizer, so it cannot chat", param="messages")
    if body.tools is not None and len(body.tools) > MAX_TOOLS:
        raise InvalidRequestError(
            f"at most {MAX_TOOLS} tools may be given (got {len(body.tools)})", param="tools"
        )
    tools = parse_tools(body.tools)
    choice = parse_tool_choice(body.tool_choice, tools)
    tool_format = state.tool_format if choice.mode != "none" else None
    constraint = structured_outputs_of(body.response_format, body.structured_outputs, body.guided_fields())
    answer_format = constraint
    if tool_format is not None:
        constraint = tool_call_structure(
            tool_format, tools, choice, parallel=body.parallel_tool_calls, answer=answer_format
        )
    if constraint is not None:
        free_text = (
            choice.mode == "auto" and tool_format is not None and answer_format is None and bool(tools)
        )
        _check_compatible(params, whole_reply=not free_text)
    if tool_format is not None and state.tool_trigger_is_special:
        params.skip_special_tokens = False  # the trigger is a special token: the parser must see it
    parsing_reasoning = state.settings.reasoning_parser is not None
    rendered = await render_conversation(
        state,
        body.messages,
        body.tools,
        body.template_options(),
        tail_tokens=PROMPT_TAIL_TOKENS if parsing_reasoning else 0,
        truncating=params.truncate_prompt_tokens is not None,
    )
    reasoning = None
    if parsing_reasoning:
        tail = rendered.tail_text
        reasoning = ReasoningPlan(opened=prompt_opens_reasoning(tail), include=body.include_reasoning)
        if state.reasoning_tags_are_special:
            params.skip_special_tokens = False  # else the splitter would never see the tags
        if constraint is not None and not prompt_closes_reasoning(tail):
            # The model reasons first, freely; the constraint holds from the answer on (and a tool-call
            # trigger inside the reasoning starts no call).
            constraint = after_reasoning(constraint, reasoning.opened)
    params.structured_outputs = constraint
    reply = ChatReplyPlan(
        n=params.n,
        tokens=state.logprob_texts(body.return_tokens_as_token_ids),
        want_logprobs=body.logprobs,
        prompt_logprobs=body.prompt_logprobs,
        tool_format=tool_format,
        reasoning=reasoning,
    )
    return PreparedChat(prompt_token_ids=rendered.prompt_token_ids, params=params, reply=reply)


async def render_conversation(
    state: ServerState,
    messages: Sequence[ChatMessage],
    tools: list[dict[str, Any]] | None,
    options: dict[str, Any],
    *,
    tail_tokens: int = 0,
    truncating: bool = False,
) -> RenderedChat:
    """A conversation rendered as the chat endpoint sends it to the engine (`options`: from
    `chat_template_options`), with the text of its last `tail_tokens` tokens. One trip to the text thread: a
    long conversation takes seconds to tokenize, which must stall neither the event loop nor the engine."""
    rendered = [m.for_template() for m in messages]
    if state.tool_format.template_call_id is not None:  # a template that accepts only its own call ids
        _rewrite_call_ids(rendered, state.tool_format.template_call_id)
    return await state.engine.text.render_chat(
        rendered, tools=tools, tail_tokens=tail_tokens, truncating=truncating, **options
    )


def _rewrite_call_ids(messages: list[dict[str, Any]], rewrite: Callable[[str], str]) -> None:
    """Call ids in the assistant's calls and in the tool results answering them, as the template wants them."""
    for message in messages:
        for call in message.get("tool_calls") or []:
            if isinstance(call.get("id"), str):
                call["id"] = rewrite(call["id"])
        if isinstance(message.get("tool_call_id"), str):
            message["tool_call_id"] = rewrite(message["tool_call_id"])


def _check_compatible(params: SamplingParams, whole_reply: bool) -> None:
    """Refuse sampling fields that would end a constrained reply where its grammar does not allow an end.

    `min_tokens` forbids the end of the reply even once the grammar allows nothing else. A stop string or
    stop token can match inside the JSON (a stop string "}" in a string value) and cut it, leaving invalid
    output reported as a normal stop; this holds when the grammar covers the `whole_reply` (a response
    format, or tool_choice "required" or named), not for tool_choice "auto", whose free text may stop.
    """
    if params.min_tokens:
        raise InvalidRequestError(
            "min_tokens cannot be combined with structured outputs or tool calls: the grammar decides "
            "where the reply ends",
            param="min_tokens",
        )
    if not whole_reply:
        return
    for name in ("stop", "stop_token_ids"):
        if getattr(params, name):
            raise InvalidRequestError(
                f"{name} cannot be combined with a response format or a required tool call: it could cut "
                "the constrained output short, leaving it invalid",
                param=name,
            )
