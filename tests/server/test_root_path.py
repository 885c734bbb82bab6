"""`serve --root-path /llm`: behind a reverse proxy that serves the API under a prefix and strips it, routes
stay at /v1/..., the API key still guards them, and the API docs name the public prefix."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from harness import MODEL, RunningServer, start_server

from switchyard.cli import main

PREFIX = "/llm"


@pytest.fixture(scope="module")
def behind_proxy(tiny_model_dir: Path) -> Iterator[RunningServer]:
    running = start_server(tiny_model_dir, api_key="k", root_path=PREFIX)
    yield running
    running.stop()


def test_the_api_is_served_and_guarded_under_a_root_path(behind_proxy: RunningServer) -> None:
    # What a prefix-stripping proxy forwards is the path without the prefix, as a direct client sends it.
    reply = behind_proxy.client(api_key="k").chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2
    )
    assert reply.choices[0].finish_reason in ("length", "stop")
    # uvicorn puts the root path in front of the path the middleware sees; the key check must still apply.
    with pytest.raises(openai.AuthenticationError):
        behind_proxy.client(api_key="wrong").models.list()
    with behind_proxy.http() as http:
        assert http.post("/tokenize", json={"model": MODEL, "prompt": "hi"}).status_code == 401
        assert http.get("/health").status_code == 200  # operations routes stay open to load balancers


def test_the_api_docs_name_the_public_prefix(behind_proxy: RunningServer) -> None:
    with behind_proxy.http() as http:
        assert f"{PREFIX}/openapi.json" in http.get("/docs").text
        assert {"url": PREFIX} in http.get("/openapi.json").json()["servers"]


@pytest.mark.parametrize("root_path", ["llm", "/llm/", "/llm?x=1"])
def test_a_root_path_that_is_not_a_path_prefix_is_refused(
    root_path: str, tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", str(tiny_model_dir), "--root-path", root_path]) == 2
    assert "root_path must be a path such as /llm" in capsys.readouterr().err
