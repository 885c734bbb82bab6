"""`serve --allowed-origins`: browser pages of the named origins may call the API (CORS preflight and response
headers, on refusals too); other origins, and every origin on a server without the flag, get no CORS headers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import MODEL, RunningServer, start_server

from switchyard.cli import main
from switchyard.server.cors import CorsPolicy

APP = "https://app.example.com"
OTHER = "https://elsewhere.example.org"
PREFLIGHT = {
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "authorization, content-type",
}
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


@pytest.fixture(scope="module")
def with_cors(tiny_model_dir: Path) -> Iterator[RunningServer]:
    running = start_server(tiny_model_dir, api_key="k", cors=CorsPolicy(allowed_origins=(APP,)))
    yield running
    running.stop()


@pytest.fixture(scope="module")
def without_cors(tiny_model_dir: Path) -> Iterator[RunningServer]:
    running = start_server(tiny_model_dir, api_key="k")
    yield running
    running.stop()


def test_a_preflight_from_an_allowed_origin_is_answered_without_credentials(with_cors: RunningServer) -> None:
    with with_cors.http() as http:
        response = http.options("/v1/chat/completions", headers={"Origin": APP, **PREFLIGHT})
    assert response.status_code == 200, response.text
    assert response.headers["access-control-allow-origin"] == APP
    assert "POST" in response.headers["access-control-allow-methods"]
    assert "authorization" in response.headers["access-control-allow-headers"].lower()


def test_an_allowed_origin_can_read_replies_and_refusals(with_cors: RunningServer) -> None:
    with with_cors.http() as http:
        reply = http.post(
            "/v1/chat/completions", json=CHAT, headers={"Origin": APP, "Authorization": "Bearer k"}
        )
        refused = http.post("/v1/chat/completions", json=CHAT, headers={"Origin": APP})
    assert reply.status_code == 200 and reply.json()["object"] == "chat.completion"
    assert reply.headers["access-control-allow-origin"] == APP
    assert "x-request-id" in reply.headers["access-control-expose-headers"].lower()
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
    assert refused.headers["access-control-allow-origin"] == APP


def test_another_origin_gets_no_cors_headers(with_cors: RunningServer) -> None:
    with with_cors.http() as http:
        preflight = http.options("/v1/chat/completions", headers={"Origin": OTHER, **PREFLIGHT})
        listed = http.get("/v1/models", headers={"Origin": OTHER, "Authorization": "Bearer k"})
    assert preflight.status_code == 400 and "access-control-allow-origin" not in preflight.headers
    assert listed.status_code == 200 and "access-control-allow-origin" not in listed.headers


def test_without_allowed_origins_no_origin_gets_cors_headers(without_cors: RunningServer) -> None:
    with without_cors.http() as http:
        preflight = http.options("/v1/chat/completions", headers={"Origin": APP, **PREFLIGHT})
        listed = http.get("/v1/models", headers={"Origin": APP, "Authorization": "Bearer k"})
    assert "access-control-allow-origin" not in preflight.headers
    assert preflight.status_code == 401  # no CORS layer: the preflight meets the API-key check
    assert listed.status_code == 200 and "access-control-allow-origin" not in listed.headers


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        (dict(allowed_origins=("*",), allow_credentials=True), "list the origins by name"),
        (dict(allowed_origins=("app.example.com",)), r"expected scheme://host\[:port\]"),
        (dict(allowed_origins=("https://app.example.com/",)), "is not an origin"),
        (dict(allowed_origins=()), "at least one origin"),
    ],
)
def test_a_policy_that_cannot_be_meant_is_refused(policy: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CorsPolicy(**policy)  # type: ignore[arg-type]


def test_serve_refuses_credentials_without_origins(
    tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", str(tiny_model_dir), "--allow-credentials"]) == 2
    assert "--allow-credentials needs --allowed-origins" in capsys.readouterr().err
    assert main(["serve", str(tiny_model_dir), "--allowed-origins", "*", "--allow-credentials"]) == 2
    assert "list the origins by name" in capsys.readouterr().err
