"""vLLM's /tokenize and /detokenize: counts equal what the completion endpoints report as prompt_tokens."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import MODEL, RunningServer, start_server

from switchyard.errors import ModelLoadError
from switchyard.models.tokenizer import load_chat_template

USER = [{"role": "user", "content": "Hello there, how are you?"}]


@pytest.fixture(scope="module")
def http(server: RunningServer) -> Iterator[httpx.Client]:
    with server.http() as client:
        yield client


def post(http: httpx.Client, path: str, **body: Any) -> dict[str, Any]:
    response = http.post(path, json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_a_conversation_counts_what_chat_reports(http: httpx.Client, server: RunningServer) -> None:
    counted = post(http, "/tokenize", model=MODEL, messages=USER)
    reply = server.client().chat.completions.create(model=MODEL, messages=USER, max_tokens=1)  # type: ignore[arg-type]
    assert reply.usage is not None and counted["count"] == reply.usage.prompt_tokens == len(counted["tokens"])
    assert counted["max_model_len"] == server.llm_engine.max_model_len
    no_prompt = post(http, "/tokenize", messages=USER, add_generation_prompt=False)
    assert no_prompt["count"] < counted["count"]  # the template options apply as in chat


def test_a_text_prompt_counts_what_completions_reports(http: httpx.Client, server: RunningServer) -> None:
    counted = post(http, "/tokenize", prompt="Once upon a time", return_token_strs=True)
    reply = server.client().completions.create(model=MODEL, prompt="Once upon a time", max_tokens=1)
    assert reply.usage is not None and counted["count"] == reply.usage.prompt_tokens
    assert "".join(counted["token_strs"]).endswith("Once upon a time")
    bare = post(http, "/tokenize", prompt="Once upon a time", add_special_tokens=False)
    assert (
        bare["count"] <= counted["count"] and counted["token_strs"] is not None and bare["token_strs"] is None
    )


def test_detokenize_round_trips(http: httpx.Client) -> None:
    tokens = post(http, "/tokenize", prompt="Café crème 😀", add_special_tokens=False)["tokens"]
    assert post(http, "/detokenize", tokens=tokens) == {"prompt": "Café crème 😀"}


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/tokenize", {"prompt": "x", "messages": USER}, "prompt"),
        ("/tokenize", {}, "prompt"),
        ("/tokenize", {"messages": []}, "messages"),
        ("/tokenize", {"prompt": "x", "model": "nope"}, "model"),
        ("/detokenize", {"tokens": [1, 10**9]}, "tokens"),
        ("/detokenize", {"tokens": [-1]}, "tokens"),
        ("/detokenize", {"tokens": "12"}, "tokens"),
    ],
)
def test_bad_requests(http: httpx.Client, path: str, body: dict[str, Any], param: str) -> None:
    response = http.post(path, json=body)
    assert response.status_code in (400, 404), response.text
    assert response.json()["error"]["param"] == param


def test_the_api_key_guards_them(tiny_model_dir: Path) -> None:
    running = start_server(tiny_model_dir, api_key="secret")
    try:
        with running.http() as http:
            assert http.post("/tokenize", json={"prompt": "x"}).status_code == 401
            authorised = http.post(
                "/tokenize", json={"prompt": "x"}, headers={"authorization": "Bearer secret"}
            )
            assert authorised.status_code == 200
            assert http.get("/health").status_code == 200  # operations routes stay open
    finally:
        running.stop()


def test_a_chat_template_override(tiny_model_dir: Path, tmp_path: Path) -> None:
    template = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
    (tmp_path / "t.jinja").write_text(template)
    assert load_chat_template(str(tmp_path / "t.jinja")) == template == load_chat_template(template)
    with pytest.raises(ModelLoadError, match="neither a readable file"):
        load_chat_template(str(tmp_path / "missing.jinja"))
    with pytest.raises(ModelLoadError, match="does not parse"):
        load_chat_template("{% for m in messages %}")
    running = start_server(tiny_model_dir, engine_overrides={"chat_template": template})
    try:
        with running.http() as http:
            counted = post(http, "/tokenize", messages=USER, return_token_strs=True)
        assert "".join(counted["token_strs"]) == "[user] Hello there, how are you?\n"
    finally:
        running.stop()
