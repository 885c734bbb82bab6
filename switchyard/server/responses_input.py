"""A Responses API request -> the equivalent chat completions request, checked field by field.

The Responses endpoint serves through the chat path (responses.py), so this is where the two shapes meet:
input items become chat messages (a `function_call` joins the assistant message before it, a
`function_call_output` becomes a `tool` message), flat function tools and `{"type": "function", "name"}`
choices get chat's nested `function` object, and `text.format` becomes `response_format`. Errors name the
Responses field (`input[2].call_id`, `text.format.schema`, `max_output_tokens`), also for errors the chat path
raises in its own words (`rename_error`).
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

from switchyard.errors import InvalidRequestError
from switchyard.server.chat_protocol import ChatCompletionRequest
from switchyard.server.responses_protocol import ResponsesRequest

_MESSAGE_ROLES = ("user", "system", "developer", "assistant")
_TEXT_PARTS = ("input_text", "output_text", "text")


def chat_request_of(body: ResponsesRequest, *, stream: bool) -> ChatCompletionRequest:
    """The chat request that computes `body`'s response; InvalidRequestError naming the Responses field."""
    _check_stateless(body)
    messages = input_messages(body.input, body.instructions)
    chat: dict[str, Any] = {
        "model": body.model,
        "messages": messages,
        "max_completion_tokens": body.max_output_tokens,
        "temperature": body.temperature,
        "top_p": body.top_p,
        "parallel_tool_calls": body.parallel_tool_calls,
        "response_format": response_format_of(body.text.format if body.text else None),
        "user": body.user,
        "seed": body.seed,
        "top_k": body.top_k,
        "min_p": body.min_p,
        "repetition_penalty": body.repetition_penalty,
        "presence_penalty": body.presence_penalty,
        "frequency_penalty": body.frequency_penalty,
        "stop": body.stop,
        "ignore_eos": body.ignore_eos,
        "priority": body.priority,
        "stream": stream,
    }
    if body.tools is not None:
        chat["tools"] = chat_tools_of(body.tools)
    if body.tool_choice is not None:
        chat["tool_choice"] = chat_tool_choice_of(body.tool_choice)
    if stream:
        chat["stream_options"] = {"include_usage": True}  # the final response carries the usage
    try:
        return ChatCompletionRequest.model_validate({k: v for k, v in chat.items() if v is not None})
    except ValidationError as exc:  # a shape the checks above let through: still the client's error
        raise InvalidRequestError(f"invalid request: {exc.errors()[0].get('msg')}", param="input") from None


def _check_stateless(body: ResponsesRequest) -> None:
    """This server stores no responses: refuse what needs them rather than silently dropping it."""
    if body.previous_response_id is not None:
        raise InvalidRequestError(
            "previous_response_id is not supported: this server keeps no response state; "
            "send the whole conversation in input instead",
            param="previous_response_id",
        )
    if body.store:
        raise InvalidRequestError(
            "store=true is not supported: this server keeps no response state; set store to false or omit it",
            param="store",
        )
    if body.background:
        raise InvalidRequestError(
            "background responses are not supported: they need stored responses", param="background"
        )
    if body.truncation not in (None, "disabled"):
        raise InvalidRequestError(
            "truncation must be 'disabled': an input longer than the context is refused, never cut",
            param="truncation",
        )
    if any(entry == "message.output_text.logprobs" for entry in body.include or []):
        raise InvalidRequestError("output logprobs are not supported on /v1/responses", param="include")


def input_messages(raw: Any, instructions: str | None) -> list[dict[str, Any]]:
    """Chat messages for `instructions` and `input` (a string or a list of input items)."""
    messages: list[dict[str, Any]] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    if isinstance(raw, str):
        messages.append({"role": "user", "content": raw})
        return messages
    if not isinstance(raw, list) or not raw:
        raise InvalidRequestError("input must be a string or a non-empty list of input items", param="input")
    call_ids: set[str] = set()
    reasoning: list[str] = []
    """Reasoning items waiting for the assistant turn they belong to (they come right before it)."""
    for index, item in enumerate(raw):
        where = f"input[{index}]"
        if not isinstance(item, dict):
            raise InvalidRequestError(f"{where} must be an object", param=where)
        kind = item.get("type", "message")
        if kind == "reasoning":
            reasoning.append(_reasoning_of(item, where))
            continue
        if kind == "message":
            messages.append(_message_of(item, where))
        elif kind == "function_call":
            call = _function_call_of(item, where)
            call_ids.add(call["id"])
            previous = messages[-1] if messages else None
            if previous is not None and previous["role"] == "assistant" and not reasoning:
                previous.setdefault("tool_calls", []).append(call)  # one assistant turn: its text and calls
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append(_function_output_of(item, where, call_ids))
        else:
            raise InvalidRequestError(
                f"{where}.type {kind!r} is not supported; use message, function_call, function_call_output "
                "or reasoning",
                param=f"{where}.type",
            )
        if reasoning and messages[-1]["role"] == "assistant":
            messages[-1]["reasoning"] = "".join(reasoning)  # replayed by templates that show past reasoning
        reasoning = []
    return messages


def _reasoning_of(item: dict[str, Any], where: str) -> str:
    """A reasoning item's text (its reasoning_text parts; summaries and encrypted content carry none we use)."""
    content = item.get("content") or []
    if not isinstance(content, list):
        raise InvalidRequestError(
            f"{where}.content must be a list of reasoning_text parts", param=f"{where}.content"
        )
    texts = []
    for index, part in enumerate(content):
        if not isinstance(part, dict) or not isinstance(part.get("text"), str):
            place = f"{where}.content[{index}]"
            raise InvalidRequestError(f"{place} must be a reasoning_text part with text", param=place)
        texts.append(part["text"])
    return "".join(texts)


def _message_of(item: dict[str, Any], where: str) -> dict[str, Any]:
    role = item.get("role")
    if role not in _MESSAGE_ROLES:
        raise InvalidRequestError(
            f"{where}.role must be one of {', '.join(_MESSAGE_ROLES)}", param=f"{where}.role"
        )
    return {"role": role, "content": _text_of(item.get("content"), f"{where}.content")}


def _text_of(content: Any, where: str) -> str:
    """Content as one string: a string, or a list of text parts joined (images and files are refused)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidRequestError(f"{where} must be a string or a list of content parts", param=where)
    texts = []
    for index, part in enumerate(content):
        place = f"{where}[{index}]"
        if not isinstance(part, dict) or part.get("type") not in _TEXT_PARTS:
            kind = part.get("type") if isinstance(part, dict) else None
            raise InvalidRequestError(
                f"{place}.type {kind!r} is not supported; only input_text parts are", param=f"{place}.type"
            )
        text = part.get("text")
        if not isinstance(text, str):
            raise InvalidRequestError(f"{place}.text must be a string", param=f"{place}.text")
        texts.append(text)
    return "".join(texts)


def _function_call_of(item: dict[str, Any], where: str) -> dict[str, Any]:
    for field_name in ("call_id", "name", "arguments"):
        if not isinstance(item.get(field_name), str):
            raise InvalidRequestError(f"{where}.{field_name} must be a string", param=f"{where}.{field_name}")
    function = {"name": item["name"], "arguments": item["arguments"]}
    return {"id": item["call_id"], "type": "function", "function": function}


def _function_output_of(item: dict[str, Any], where: str, call_ids: set[str]) -> dict[str, Any]:
    call_id = item.get("call_id")
    if not isinstance(call_id, str):
        raise InvalidRequestError(f"{where}.call_id must be a string", param=f"{where}.call_id")
    if call_id not in call_ids:
        raise InvalidRequestError(
            f"{where}.call_id {call_id!r} answers no function_call earlier in input "
            "(this server keeps no state: include the call)",
            param=f"{where}.call_id",
        )
    output = _text_of(item.get("output"), f"{where}.output")
    return {"role": "tool", "tool_call_id": call_id, "content": output}


def chat_tools_of(tools: list[Any]) -> list[dict[str, Any]]:
    """Responses function tools (flat) -> chat tools (nested under `function`).

    The Responses API makes `strict` default to true (chat's default is false), so an omitted one is true.
    """
    chat_tools = []
    for index, tool in enumerate(tools):
        where = f"tools[{index}]"
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else None
            raise InvalidRequestError(
                f"{where}.type {kind!r} is not supported; only function tools are", param=f"{where}.type"
            )
        function = {
            key: tool[key] for key in ("name", "description", "parameters") if tool.get(key) is not None
        }
        function["strict"] = tool.get("strict") is not False
        chat_tools.append({"type": "function", "function": function})
    return chat_tools


def chat_tool_choice_of(choice: Any) -> Any:
    """ "auto" / "none" / "required" pass as they are; `{"type": "function", "name"}` gets chat's nesting."""
    if isinstance(choice, dict) and choice.get("type") == "function":
        name = choice.get("name")
        if not isinstance(name, str):
            raise InvalidRequestError("tool_choice.name must be a string", param="tool_choice")
        return {"type": "function", "function": {"name": name}}
    if choice in ("auto", "none", "required"):
        return choice
    raise InvalidRequestError(
        "tool_choice must be 'none', 'auto', 'required' or {'type': 'function', 'name': ...}",
        param="tool_choice",
    )


def response_format_of(text_format: dict[str, Any] | None) -> dict[str, Any] | None:
    """`text.format` -> chat's `response_format` (None for plain text)."""
    if text_format is None:
        return None
    kind = text_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        name = text_format.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidRequestError(
                "text.format.name is required for json_schema", param="text.format.name"
            )
        schema = text_format.get("schema")
        if not isinstance(schema, dict):
            raise InvalidRequestError(
                "text.format.schema must be a JSON schema object", param="text.format.schema"
            )
        body = {"name": name, "schema": schema, "strict": bool(text_format.get("strict"))}
        return {"type": "json_schema", "json_schema": body}
    raise InvalidRequestError(
        "text.format.type must be 'text', 'json_object' or 'json_schema'", param="text.format.type"
    )


_PARAMS = {
    "messages": "input",
    "prompt": "input",
    "max_tokens": "max_output_tokens",
    "max_completion_tokens": "max_output_tokens",
    "response_format": "text.format",
}
_WORDS = [
    (re.compile(r"\bmax_(completion_)?tokens\b"), "max_output_tokens"),
    (re.compile(r"\bresponse_format\b"), "text.format"),
    (re.compile(r"\.function\.(name|parameters)\b"), r".\1"),
    (re.compile(r"\bprompt\b"), "input"),
]


def rename_error(exc: InvalidRequestError) -> InvalidRequestError:
    """An error the chat path raised, in the Responses API's field names."""
    message = str(exc)
    for pattern, replacement in _WORDS:
        message = pattern.sub(replacement, message)
    param = _PARAMS.get(exc.param, exc.param) if exc.param is not None else None
    return InvalidRequestError(message, param=param)
