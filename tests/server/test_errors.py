"""Bad requests get the right status and an OpenAI error body naming the field (never FastAPI's 422)."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from harness import MODEL, RunningServer

USER = [{"role": "user", "content": "hi"}]


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["message"]
    return body["error"]


@pytest.fixture(scope="module")
def http(server: RunningServer) -> httpx.Client:
    return server.http()


def test_malformed_json(http: httpx.Client) -> None:
    response = http.post(
        "/v1/chat/completions",
        content=b'{"model": "tiny", "messages": [',
        headers={"content-type": "application/json"},
    )
    error = error_of(response, 400)
    assert error["type"] == "invalid_request_error" and "JSON" in error["message"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": MODEL, "messages": USER, "max_tokens": "ten"}, "max_tokens"),
        ({"model": MODEL, "messages": USER, "temperature": "hot"}, "temperature"),
        ({"model": MODEL, "messages": USER, "stream": {"yes": 1}}, "stream"),
        ({"model": MODEL, "messages": USER, "stop": 5}, "stop"),
        ({"model": MODEL, "messages": [{"role": "robot", "content": "hi"}]}, "messages.0.role"),
        ({"model": MODEL, "messages": [{"role": "user", "content": 3}]}, "messages.0.content"),
        ({"model": MODEL}, "messages"),
        ({"model": MODEL, "messages": []}, "messages"),
    ],
)
def test_wrong_types_name_the_field(http: httpx.Client, body: dict[str, Any], param: str) -> None:
    error = error_of(http.post("/v1/chat/completions", json=body), 400)
    assert error["param"] == param and param in error["message"]


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"temperature": -1}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"n": 0}, "n"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"presence_penalty": 3}, "presence_penalty"),
        ({"top_logprobs": 3}, "top_logprobs"),
        ({"logprobs": True, "top_logprobs": 50}, "top_logprobs"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
        ({"logit_bias": {"x": 1}}, "logit_bias"),
        ({"response_format": {"type": "xml"}}, "response_format"),
        ({"tool_choice": "required"}, "tool_choice"),
    ],
)
def test_out_of_range_values_name_the_field(http: httpx.Client, extra: dict[str, Any], param: str) -> None:
    error = error_of(http.post("/v1/chat/completions", json={"model": MODEL, "messages": USER, **extra}), 400)
    assert error["param"] == param


def test_body_must_be_an_object(http: httpx.Client) -> None:
    error_of(http.post("/v1/completions", json=[1, 2]), 400)
    error_of(http.post("/v1/completions", content=b"", headers={"content-type": "application/json"}), 400)


def test_bad_prompt_shape(http: httpx.Client) -> None:
    error = error_of(http.post("/v1/completions", json={"model": MODEL, "prompt": [["a"]]}), 400)
    assert error["param"] == "prompt"


def test_unknown_model_is_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-17", messages=USER)  # type: ignore[arg-type]
    assert info.value.code == "model_not_found"


def test_oversize_prompt_is_400_at_once(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=MODEL, prompt="word " * 400)
    assert info.value.param == "prompt" and "256" in info.value.message
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages=USER, max_tokens=1000)
    assert info.value.param == "max_tokens"


def test_unknown_route_and_method_use_the_error_shape(http: httpx.Client) -> None:
    error_of(http.get("/v1/nothing"), 404)
    error_of(http.get("/v1/chat/completions"), 405)
