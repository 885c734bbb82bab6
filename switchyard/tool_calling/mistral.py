"""Mistral tool calls (Mistral-7B-Instruct-v0.3, Ministral; tokenizers v3): after the [TOOL_CALLS] control
token, a JSON list of calls:

[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_time", "arguments": {}}]

[TOOL_CALLS] is a special token, so replies that may hold calls are detokenized with special tokens kept (the
server does that for formats whose trigger is special). Mistral's chat templates raise unless every tool call
id is nine letters and digits, so parsed calls get such ids, and ids a client sent in another shape are
rewritten the same way in the assistant's calls and in the tool results that answer them.
"""

from __future__ import annotations

import hashlib
import secrets
import string

from switchyard.tool_calling.format import ToolCallFormat, register_format

_ALPHANUMERIC = string.ascii_letters + string.digits
ID_LENGTH = 9


def new_mistral_call_id() -> str:
    return "".join(secrets.choice(_ALPHANUMERIC) for _ in range(ID_LENGTH))


def mistral_template_call_id(call_id: str) -> str:
    """`call_id` when it is already nine letters and digits, else nine drawn from its hash (the same id always
    maps to the same nine, so a call and its result still match)."""
    if len(call_id) == ID_LENGTH and call_id.isascii() and call_id.isalnum():
        return call_id
    digest = int.from_bytes(hashlib.sha256(call_id.encode()).digest()[:8], "big")
    chars = []
    for _ in range(ID_LENGTH):
        digest, index = divmod(digest, len(_ALPHANUMERIC))
        chars.append(_ALPHANUMERIC[index])
    return "".join(chars)


_NAME = r'\{\s*"name"\s*:\s*"(?P<name>(?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*'

MISTRAL = register_format(
    ToolCallFormat(
        name="mistral",
        trigger="[TOOL_CALLS]",
        header=r"\[TOOL_CALLS\]\s*\[\s*" + _NAME,
        tail=r"\s*\}\s*\]",
        next_call=r"\s*\}\s*,\s*" + _NAME,
        begin_template='[TOOL_CALLS] [{"name": "{name}", "arguments": ',
        call_end="}]",
        separator="",
        template_markers=("[TOOL_CALLS]",),
        new_call_id=new_mistral_call_id,
        template_call_id=mistral_template_call_id,
    )
)
