"""A request's prompt as token ids, computed in the gateway exactly as a Switchyard replica computes them.

`kv_aware` routing hashes the prompt's token ids, so the gateway must tokenize as the replica does: chat
messages prepared as the chat endpoint prepares them (server/chat_protocol.py's `for_template`) and rendered
with the model's chat template by transformers' `apply_chat_template`, a completion's text encoded with the
tokenizer's special tokens (BOS). The tokenizer is loaded from the model folder's tokenizer.json through
`PreTrainedTokenizerFast`, not `AutoTokenizer`, which would import torch into the gateway.

Not reproduced: a replica's `--chat-template` override (pass the same template as `chat_template`) and the
call-id rewriting some tool formats do. Whatever cannot be rendered gives None, and kv_aware then routes that
request by load: a routing hint must never fail a request the replica would serve.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import jinja2
import transformers

from switchyard.errors import ModelLoadError
from switchyard.fleet.piece_encoder import PieceEncoder

logger = logging.getLogger(__name__)

TOKENIZER_FILE = "tokenizer.json"

CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"
RESPONSES_PATH = "/v1/responses"


class _Unrenderable(Exception):
    """The body is not something this module reproduces (or not valid): no token ids for it."""


class PromptTokenizer:
    """Token ids of request bodies for one model. The tokenizer lives on a thread of its own (fast tokenizers
    are not safe to share between threads, and a long prompt must not stall the gateway's event loop)."""

    def __init__(
        self, tokenizer: transformers.PreTrainedTokenizerFast, chat_template: str | None = None
    ) -> None:
        self._tokenizer = tokenizer
        self.chat_template = chat_template
        """Renders chats instead of the tokenizer's own template (a replica's --chat-template)."""
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="switchyard-prompt-tokens")
        self._pieces = PieceEncoder(tokenizer)
        """Encodes rendered chats from remembered pieces (system prompts, earlier turns): piece_encoder.py."""

    @classmethod
    def from_folder(cls, folder: str | Path, chat_template: str | None = None) -> PromptTokenizer:
        """The tokenizer of the model in `folder` (never from the network); ModelLoadError naming the folder."""
        path = Path(folder)
        if not (path / TOKENIZER_FILE).is_file():
            raise ModelLoadError(
                f"no {TOKENIZER_FILE}: kv_aware routing needs the model's fast tokenizer", str(path)
            )
        try:
            tokenizer = transformers.PreTrainedTokenizerFast.from_pretrained(str(path), local_files_only=True)
        except Exception as error:  # transformers raises many types (OSError, ValueError, KeyError, ...)
            raise ModelLoadError(
                f"cannot load tokenizer: {type(error).__name__}: {error}", str(path)
            ) from error
        return cls(tokenizer, chat_template)

    def token_ids(self, path: str, body: Mapping[str, Any]) -> tuple[int, ...] | None:
        """The prompt of a request to `path` (/v1/chat/completions, /v1/completions or /v1/responses) with JSON
        `body`, as the replica tokenizes it; None when it cannot be reproduced here."""
        return self._executor.submit(self._token_ids, path, body).result()

    async def token_ids_async(self, path: str, body: Mapping[str, Any]) -> tuple[int, ...] | None:
        """`token_ids` without blocking the event loop."""
        return await asyncio.wrap_future(self._executor.submit(self._token_ids, path, body))

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------ on the worker thread
    def _token_ids(self, path: str, body: Mapping[str, Any]) -> tuple[int, ...] | None:
        try:
            if path == CHAT_PATH:
                return self._chat(body)
            if path == COMPLETIONS_PATH:
                return self._completion(body.get("prompt"))
            if path == RESPONSES_PATH:
                return self._chat({"messages": _responses_messages(body)})
        except (_Unrenderable, jinja2.TemplateError, ValueError, TypeError, KeyError) as error:
            logger.debug("no token ids for a %s request: %r", path, error)
        return None

    def _chat(self, body: Mapping[str, Any]) -> tuple[int, ...]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _Unrenderable("messages must be a non-empty list")
        continue_final = bool(body.get("continue_final_message", False))
        generation_prompt = bool(body.get("add_generation_prompt", True)) and not continue_final
        kwargs = body.get("chat_template_kwargs") or {}
        if not isinstance(kwargs, dict):
            raise _Unrenderable("chat_template_kwargs must be an object")
        tools = body.get("tools")
        # Rendered to text, then encoded as apply_chat_template(tokenize=True) would (no special tokens added).
        rendered = self._tokenizer.apply_chat_template(
            [_message_for_template(message) for message in messages],
            tools=list(tools) if tools is not None else None,
            add_generation_prompt=generation_prompt,
            continue_final_message=continue_final,
            tokenize=False,
            chat_template=self.chat_template,
            **kwargs,
        )
        if not isinstance(rendered, str):
            raise _Unrenderable("the chat template did not render one text")
        return self._pieces.encode(rendered)

    def _completion(self, prompt: Any) -> tuple[int, ...]:
        if isinstance(prompt, list) and prompt and not all(isinstance(item, int) for item in prompt):
            prompt = prompt[0]  # a batch goes to one replica: the first prompt stands for it
        if isinstance(prompt, str):
            return tuple(self._tokenizer.encode(prompt, add_special_tokens=True))
        if isinstance(prompt, list) and all(isinstance(item, int) for item in prompt):
            return tuple(prompt)
        raise _Unrenderable("prompt must be a string, token ids, or a list of them")


def _message_for_template(raw: Any) -> dict[str, Any]:
    """A chat message as the replica hands it to the template (chat_protocol.ChatMessage.for_template)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("role"), str):
        raise _Unrenderable("a message must be an object with a role")
    message: dict[str, Any] = {
        "role": "system" if raw["role"] == "developer" else raw["role"],
        "content": _content_text(raw.get("content")),
    }
    if raw.get("name") is not None:
        message["name"] = raw["name"]
    if raw.get("tool_calls"):
        message["tool_calls"] = [_call_for_template(call) for call in raw["tool_calls"]]
    if raw.get("tool_call_id") is not None:
        message["tool_call_id"] = raw["tool_call_id"]
    reasoning = raw.get("reasoning_content")
    if reasoning is None:
        reasoning = raw.get("reasoning")
    if reasoning is not None:
        message["reasoning_content"] = message["reasoning"] = reasoning
    return message


def _content_text(content: Any) -> str | None:
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            part.get("text") for part in content if isinstance(part, dict) and part.get("type") == "text"
        ]
        if len(texts) == len(content) and all(isinstance(text, str) for text in texts):
            return "".join(texts)
    raise _Unrenderable("only text content is rendered")


def _call_for_template(call: Any) -> dict[str, Any]:
    """A tool call with its JSON-object arguments parsed, as the replica passes it (ToolCall.for_template)."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict):
        raise _Unrenderable("a tool call must have a function")
    arguments = function.get("arguments")
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) else None
    except ValueError:
        parsed = None
    return {
        "id": call.get("id"),
        "type": "function",
        "function": {
            "name": function.get("name"),
            "arguments": parsed if isinstance(parsed, dict) else arguments,
        },
    }


def _responses_messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The chat messages of a Responses request made of instructions and text messages (server/responses_input.py);
    function calls and tools are not reproduced."""
    if body.get("tools"):
        raise _Unrenderable("responses with tools are not reproduced")
    messages: list[dict[str, Any]] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": body["instructions"]})
    raw = body.get("input")
    if isinstance(raw, str):
        return [*messages, {"role": "user", "content": raw}]
    if not isinstance(raw, list):
        raise _Unrenderable("input must be a string or a list")
    for item in raw:
        if not isinstance(item, dict) or item.get("type", "message") != "message":
            raise _Unrenderable("only message items are reproduced")
        content = item.get("content")
        if isinstance(content, list):
            parts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") in _TEXT_PARTS]
            if len(parts) != len(content) or not all(isinstance(part, str) for part in parts):
                raise _Unrenderable("only text parts are reproduced")
            content = "".join(parts)
        messages.append({"role": item.get("role"), "content": content})
    return messages


_TEXT_PARTS = ("input_text", "output_text", "text")


async def replica_model_folder(http: httpx.AsyncClient, url: str, model: str) -> Path | None:
    """Where a Switchyard replica on this machine loaded `model` from (the `root` of its GET /v1/models card),
    if that folder is here and holds a tokenizer.json; None otherwise (another server, another machine)."""
    try:
        response = await http.get(f"{url}/v1/models")
        response.raise_for_status()
        cards: Sequence[Any] = response.json().get("data", [])
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    for card in cards:
        if isinstance(card, dict) and card.get("id") == model and isinstance(card.get("root"), str):
            folder = Path(card["root"])
            return folder if (folder / TOKENIZER_FILE).is_file() else None
    return None
