"""POST /v1/chat/completions: prepare the request, admit it, answer or stream.

A request's path: `prepare_chat` (chat_prepare.py) checks it and renders the conversation in one trip to the
text thread; `ServerState.admit` hands prompt and params to `AsyncLLMEngine.add_request`, the one engine call,
which compiles the output constraint (a bad schema is a 400 before anything is queued) and truncates the
prompt; `ChatReply` (chat_reply.py) turns the engine's outputs into the completion or its typed chunks, and
streaming.py writes those out as server-sent events, `data: [DONE]` last.

With tools (and tool_choice other than "none") decoding is constrained to the model's tool-call format (see
switchyard.tool_calling) and the reply is parsed as it streams. With `--reasoning-parser`, <think> text goes out
as `reasoning` instead of content; whether a reply starts inside its reasoning is read from the rendered
prompt's end, and a response format or tool-call grammar then holds from the answer on
(engine/structured/reasoning.py), unless the template turned reasoning off. vLLM's chat extras
`chat_template_kwargs`, `add_generation_prompt` and `continue_final_message` reach the template.
"""

from __future__ import annotations

import time

from fastapi import Request
from fastapi.responses import Response

from switchyard.client_disconnect import unless_disconnected, until_disconnected
from switchyard.server.chat_prepare import prepare_chat
from switchyard.server.chat_protocol import ChatCompletionRequest, ChatCompletionResponse
from switchyard.server.chat_reply import ChatReply
from switchyard.server.errors import ClientGoneError
from switchyard.server.state import ServerState, new_id, tenant_of
from switchyard.server.streaming import event_stream_response


async def create_chat_completion(
    body: ChatCompletionRequest, state: ServerState, http_request: Request
) -> ChatCompletionResponse | Response:
    reply = await start_chat(body, state, http_request)
    if body.stream:
        chunks = reply.chunks(body.include_usage, body.continuous_usage)
        return event_stream_response(chunks, [reply.stream])
    async with reply.stream:  # aborts the request if the client left before it finished
        return await until_disconnected(http_request, reply.collect())


async def start_chat(body: ChatCompletionRequest, state: ServerState, http_request: Request) -> ChatReply:
    """Prepare and admit a chat request; its reply reads the engine's outputs (the Responses API's entry too).

    Raises before anything is queued for a request that is refused (InvalidRequestError: 400, and the
    server's and engine's capacity errors)."""
    state.check_accepting()
    model = state.resolve_model(body.model)
    # A client that leaves while its conversation waits to be tokenized takes that work with it.
    prepared = await unless_disconnected(
        http_request, prepare_chat(body, state), lambda: ClientGoneError("the client disconnected")
    )
    request_id = new_id("chatcmpl")
    stream = await state.admit(
        request_id,
        prepared.prompt_token_ids,
        prepared.params,
        priority=body.priority,
        tenant=tenant_of(http_request, body.user),
    )
    return ChatReply(request_id, model, int(time.time()), prepared.reply, stream)
