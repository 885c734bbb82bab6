"""Bodies of vLLM's `POST /tokenize` and `POST /detokenize`, as pydantic models."""

from __future__ import annotations

from typing import Any

from switchyard.server.chat_protocol import ChatMessage
from switchyard.server.protocol import RequestBody, ResponseBody


class TokenizeRequest(RequestBody):
    """`POST /tokenize`: a text prompt, or messages rendered as the chat endpoint renders them."""

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    tools: list[dict[str, Any]] | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template_kwargs: dict[str, Any] | None = None
    add_special_tokens: bool = True
    """For a text prompt: add the tokens the model's tokenizer adds (BOS), as the completions endpoint does."""
    return_token_strs: bool = False


class TokenizeResponse(ResponseBody):
    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None = None


class DetokenizeRequest(RequestBody):
    model: str | None = None
    tokens: list[int]


class DetokenizeResponse(ResponseBody):
    prompt: str
