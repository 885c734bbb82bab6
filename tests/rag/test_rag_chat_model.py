"""The OpenAI-compatible chat client and the summariser and judge built on it (mock HTTP transport under the
official openai client)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from switchyard.agents.chat_model import ChatModelError, OpenAIChatModel
from switchyard.agents.grounding import chat_judge
from switchyard.agents.memory.context_budget import chat_summariser
from switchyard.agents.model import ModelUsage


def mock(handler) -> httpx.AsyncClient:  # type: ignore[no-untyped-def]
    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


def completion(text: str, usage: dict | None = None) -> dict:
    body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}
    return body if usage is None else {**body, "usage": usage}


def test_chat_model_posts_openai_request_and_summarises() -> None:
    requests: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        usage = {"prompt_tokens": 57, "completion_tokens": 12, "total_tokens": 69}
        return httpx.Response(200, json=completion(" User asked about pumps; answer: 3000 rpm.\n", usage))

    model = OpenAIChatModel("http://test/v1", "small", api_key="k", max_tokens=64, http_client=mock(handler))
    summarise = chat_summariser(model)
    reply = asyncio.run(summarise("earlier summary", [{"role": "user", "content": "pump speed?"}]))
    assert reply.text == "User asked about pumps; answer: 3000 rpm."
    # What it cost travels with it, for the run's token and cost limits.
    assert reply.usage == ModelUsage(input_tokens=57, output_tokens=12) and reply.model == "small"
    body = json.loads(requests[0].content)
    assert requests[0].url == "http://test/v1/chat/completions"
    assert requests[0].headers["authorization"] == "Bearer k"
    assert body["model"] == "small" and body["max_tokens"] == 64
    assert (
        "earlier summary" in body["messages"][0]["content"]
        and "pump speed?" in body["messages"][0]["content"]
    )


def test_chat_judge_and_errors() -> None:
    replies = iter(["SUPPORTED", "UNSUPPORTED"])
    model = OpenAIChatModel(
        "http://test/v1",
        "judge",
        http_client=mock(lambda r: httpx.Response(200, json=completion(next(replies)))),
    )
    judge = chat_judge(model)
    assert asyncio.run(judge("claim", ["passage"])) is True
    assert asyncio.run(judge("claim", ["passage"])) is False
    failing = OpenAIChatModel(
        "http://test/v1", "m", http_client=mock(lambda r: httpx.Response(500, text="boom"))
    )
    with pytest.raises(ChatModelError, match="HTTP 500: boom"):
        asyncio.run(failing([{"role": "user", "content": "x"}]))


def refuse(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


@pytest.mark.parametrize(
    ("handler", "message"),
    [
        (refuse, "ConnectError: connection refused"),
        (lambda r: httpx.Response(200, json={"choices": []}), "not a chat completion"),
        (lambda r: httpx.Response(200, text="not json"), "not a chat completion"),
    ],
)
def test_chat_model_failures_are_chat_model_errors(handler, message: str) -> None:  # type: ignore[no-untyped-def]
    model = OpenAIChatModel("http://test/v1", "m", http_client=mock(handler))
    with pytest.raises(ChatModelError, match=message) as error:
        asyncio.run(model([{"role": "user", "content": "x"}]))
    assert "http://test/v1/chat/completions" in str(error.value)


def test_usage_is_none_when_the_endpoint_reports_none() -> None:
    model = OpenAIChatModel(
        "http://test/v1", "m", http_client=mock(lambda r: httpx.Response(200, json=completion("hi")))
    )
    reply = asyncio.run(model([{"role": "user", "content": "x"}]))
    assert reply.text == "hi" and reply.usage is None
