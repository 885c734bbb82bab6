"""The OpenAI-compatible chat client and the summariser and judge built on it (mock HTTP transport)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from switchyard.agents.chat_model import ChatModelError, OpenAIChatModel
from switchyard.agents.context_budget import chat_summariser
from switchyard.agents.grounding import chat_judge


def completion(text: str) -> dict:
    return {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}


def test_chat_model_posts_openai_request_and_summarises() -> None:
    requests: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(200, json=completion("User asked about pumps; answer: 3000 rpm."))

    model = OpenAIChatModel(
        "http://test/v1", "small", api_key="k", max_tokens=64, transport=httpx.MockTransport(handler)
    )
    summarise = chat_summariser(model)
    text = asyncio.run(summarise("earlier summary", [{"role": "user", "content": "pump speed?"}]))
    assert text == "User asked about pumps; answer: 3000 rpm."
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
        transport=httpx.MockTransport(lambda r: httpx.Response(200, json=completion(next(replies)))),
    )
    judge = chat_judge(model)
    assert asyncio.run(judge("claim", ["passage"])) is True
    assert asyncio.run(judge("claim", ["passage"])) is False
    failing = OpenAIChatModel(
        "http://test/v1", "m", transport=httpx.MockTransport(lambda r: httpx.Response(500, text="boom"))
    )
    with pytest.raises(ChatModelError, match="HTTP 500"):
        asyncio.run(failing([{"role": "user", "content": "x"}]))
