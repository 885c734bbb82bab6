"""`POST /tokenize` and `POST /detokenize`, as vLLM serves them: count a prompt before sending it.

A conversation is rendered exactly as the chat endpoint renders it (template options, tools, call-id
rewriting), so `count` is the `prompt_tokens` a chat request with the same messages reports.
"""

from __future__ import annotations

from switchyard.errors import InvalidRequestError
from switchyard.server.chat_prepare import render_conversation
from switchyard.server.chat_protocol import chat_template_options
from switchyard.server.state import ServerState, check_token_ids
from switchyard.server.tokenize_protocol import (
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeRequest,
    TokenizeResponse,
)


async def tokenize(body: TokenizeRequest, state: ServerState) -> TokenizeResponse:
    state.resolve_model(body.model)
    engine = state.engine
    if engine.tokenizer is None:
        raise InvalidRequestError("this model has no tokenizer", param="prompt")
    if (body.prompt is None) == (body.messages is None):
        raise InvalidRequestError("give either prompt or messages", param="prompt")
    if body.messages is not None:
        if not body.messages:
            raise InvalidRequestError("messages must not be empty", param="messages")
        options = chat_template_options(body)  # type: ignore[arg-type]
        tokens = (await render_conversation(state, body.messages, body.tools, options)).prompt_token_ids
    else:
        tokens = await engine.text.encode(body.prompt or "", add_special_tokens=body.add_special_tokens)
    strs = [state.token_texts.text(token) for token in tokens] if body.return_token_strs else None
    return TokenizeResponse(
        count=len(tokens), max_model_len=engine.max_model_len, tokens=tokens, token_strs=strs
    )


async def detokenize(body: DetokenizeRequest, state: ServerState) -> DetokenizeResponse:
    state.resolve_model(body.model)
    engine = state.engine
    if engine.tokenizer is None:
        raise InvalidRequestError("this model has no tokenizer", param="tokens")
    check_token_ids(body.tokens, engine.vocab_size, "tokens")
    return DetokenizeResponse(prompt=await engine.text.decode(body.tokens))
