"""The chat format of the bundled models: a Qwen2.5-style ChatML template, in Jinja and mirrored in Python.

The Jinja template ships in tokenizer_config.json so any HF-compatible stack renders prompts the way the
models were trained. Training renders the same text in Python because it also needs to know which characters
the assistant wrote (the loss is taken only there); a test checks that both renderings agree on the corpus.

Layout (tool schemas inside the system turn, tool calls and tool results as tagged JSON):

    <|im_start|>system
    {system}

    # Tools
    You may call one or more functions to assist with the user query.
    <tools>
    {"type": "function", "function": {...}}
    </tools>
    To call a function, reply with:
    <tool_call>
    {"name": <function-name>, "arguments": <args-json-object>}
    </tool_call><|im_end|>
    <|im_start|>user
    ...<|im_end|>
    <|im_start|>assistant
    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Oslo"}}
    </tool_call><|im_end|>
    <|im_start|>user
    <tool_response>
    {"temperature_c": 4}
    </tool_response><|im_end|>
    <|im_start|>assistant
    It is 4°C in Oslo.<|im_end|>
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
ENDOFTEXT = "<|endoftext|>"
TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
TOOL_RESPONSE_OPEN = "<tool_response>"
TOOL_RESPONSE_CLOSE = "</tool_response>"

SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END)
"""Control tokens: never produced by text, skipped by `decode(skip_special_tokens=True)`."""
TAG_TOKENS = (TOOL_CALL_OPEN, TOOL_CALL_CLOSE, TOOL_RESPONSE_OPEN, TOOL_RESPONSE_CLOSE)
"""Single tokens that stay in decoded text, so a server's tool-call parser still sees them."""

TOOLS_PREAMBLE = "# Tools\nYou may call one or more functions to assist with the user query.\n<tools>"
TOOLS_POSTAMBLE = (
    '</tools>\nTo call a function, reply with:\n<tool_call>\n{"name": <function-name>, "arguments": '
    "<args-json-object>}\n</tool_call>"
)

CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- " + json.dumps(TOOLS_PREAMBLE) + " }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n' + " + json.dumps(TOOLS_POSTAMBLE) + " + '<|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>assistant' }}"
    "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
    "{%- for tool_call in message.tool_calls or [] %}"
    "{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}"
    '{{- \'\\n<tool_call>\\n{"name": "\' + tool_call.name + \'", "arguments": \' }}'
    "{%- if tool_call.arguments is string %}{{- tool_call.arguments }}"
    "{%- else %}{{- tool_call.arguments | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

ASSISTANT_HEADER = IM_START + "assistant\n"
"""What the prompt ends with; everything the model writes after it, through <|im_end|>, is trained on."""


@dataclass(frozen=True)
class RenderedChat:
    """A conversation as one string, plus the character spans the assistant wrote (its loss spans)."""

    text: str
    assistant_spans: tuple[tuple[int, int], ...]


def format_tool_call(call: dict[str, Any]) -> str:
    """The text of one tool call, as the template writes it (OpenAI nesting under "function" accepted)."""
    function = call.get("function", call)
    arguments = function["arguments"]
    args_text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return f'{TOOL_CALL_OPEN}\n{{"name": "{function["name"]}", "arguments": {args_text}}}\n{TOOL_CALL_CLOSE}'


def render_chat(
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = False,
) -> RenderedChat:
    """Render exactly what CHAT_TEMPLATE renders, recording where each assistant turn's output lies.

    An assistant span starts after "<|im_start|>assistant\\n" and ends after its "<|im_end|>", so the model
    learns to stop; the newline the template puts between content and a tool call is inside the span.
    """
    parts: list[str] = []
    spans: list[tuple[int, int]] = []
    length = 0

    def emit(text: str) -> None:
        nonlocal length
        parts.append(text)
        length += len(text)

    first_is_system = bool(messages) and messages[0]["role"] == "system"
    if tools:
        emit(IM_START + "system\n")
        if first_is_system:
            emit(messages[0]["content"] + "\n\n")
        emit(TOOLS_PREAMBLE)
        for tool in tools:
            emit("\n" + json.dumps(tool, ensure_ascii=False))
        emit("\n" + TOOLS_POSTAMBLE + IM_END + "\n")
    elif first_is_system:
        emit(IM_START + "system\n" + messages[0]["content"] + IM_END + "\n")

    for index, message in enumerate(messages):
        role = message["role"]
        if role == "user" or (role == "system" and index > 0):
            emit(f"{IM_START}{role}\n{message['content']}{IM_END}\n")
        elif role == "assistant":
            emit(IM_START + "assistant")
            # The "\n" after "assistant" belongs to the prompt (the generation prompt ends with it).
            start = length + 1
            body = ""
            if message.get("content"):
                body += "\n" + message["content"]
            for call in message.get("tool_calls") or []:
                body += "\n" + format_tool_call(call)
            emit(body + IM_END)
            spans.append((start, length))
            emit("\n")
        elif role == "tool":
            if index == 0 or messages[index - 1]["role"] != "tool":
                emit(IM_START + "user")
            emit(f"\n{TOOL_RESPONSE_OPEN}\n{message['content']}\n{TOOL_RESPONSE_CLOSE}")
            if index == len(messages) - 1 or messages[index + 1]["role"] != "tool":
                emit(IM_END + "\n")
    if add_generation_prompt:
        emit(ASSISTANT_HEADER)
    return RenderedChat(text="".join(parts), assistant_spans=tuple(spans))
