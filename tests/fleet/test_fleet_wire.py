"""What the gateway reads on the wire: request fields, SSE framing, usage, replica load, headers."""

from __future__ import annotations

import json

import pytest

from switchyard.fleet.errors import BadRequestError
from switchyard.fleet.forwarded_headers import downstream_headers, upstream_headers
from switchyard.fleet.relay import EventFramer
from switchyard.fleet.replica_load import parse_replica_load
from switchyard.fleet.replica_tokenize import given_token_ids, tokenize_body
from switchyard.fleet.request_fields import read_request_fields
from switchyard.fleet.usage import cached_tokens, cached_tokens_in_body, cached_tokens_in_events


def fields(body: dict, endpoint: str, headers: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return read_request_fields(json.dumps(body).encode(), endpoint, headers or {})


def test_routing_reads_model_stream_session_and_the_prompt_text() -> None:
    chat = fields(
        {
            "model": "m",
            "stream": True,
            "user": "alice",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "image_url"}]},
            ],
        },
        "chat",
    )
    assert (chat.model, chat.stream, chat.route.session) == ("m", True, "alice")
    assert chat.route.text == "Be brief.\nHi"
    completion = fields({"model": "m", "prompt": ["a", "b"]}, "completions", {"x-session-id": "s1"})
    assert (completion.stream, completion.route.text, completion.route.session) == (False, "a\nb", "s1")
    response = fields(
        {"model": "m", "instructions": "Sys", "input": [{"role": "user", "content": "Q"}]}, "responses"
    )
    assert response.route.text == "Sys\nQ"


@pytest.mark.parametrize(
    ("raw", "param"),
    [(b"{oops", None), (b"[1, 2]", None), (b'{"prompt": "x"}', "model"), (b'{"model": 3}', "model")],
)
def test_unroutable_bodies_are_400s(raw: bytes, param: str | None) -> None:
    with pytest.raises(BadRequestError) as raised:
        read_request_fields(raw, "completions", {})
    assert raised.value.param == param


def test_the_framer_forwards_whole_events_only() -> None:
    framer = EventFramer()
    assert framer.feed(b'data: {"a"') == b""
    assert framer.feed(b': 1}\n\ndata: {"b') == b'data: {"a": 1}\n\n'
    assert framer.feed(b'": 2}\r\n\r\n') == b'data: {"b": 2}\r\n\r\n'
    assert framer.feed(b"data: [DONE]\n\nevent: x\ndata: 1\n\n") == b"data: [DONE]\n\nevent: x\ndata: 1\n\n"
    assert framer.feed(b"data: tail") == b"" and framer.rest() == b"data: tail"


def test_cached_tokens_from_each_api_shape() -> None:
    chat_usage = {"usage": {"prompt_tokens": 40, "prompt_tokens_details": {"cached_tokens": 32}}}
    assert cached_tokens(chat_usage) == 32
    assert cached_tokens({"response": {"usage": {"input_tokens_details": {"cached_tokens": 16}}}}) == 16
    assert cached_tokens({"usage": None}) is None and cached_tokens([]) is None
    assert cached_tokens_in_body(b"not json") is None
    events = (
        b'data: {"choices": [{"text": "a"}], "usage": null}\n\n'
        b'data: {"choices": [], "usage": {"prompt_tokens_details": {"cached_tokens": 48}}}\n\n'
        b"data: [DONE]\n\n"
    )
    assert cached_tokens_in_events(events) == 48
    assert cached_tokens_in_events(b'data: {"choices": []}\n\n') is None


def test_replica_load_from_switchyard_vllm_and_sglang_metrics() -> None:
    switchyard = (
        "# HELP switchyard:num_requests_waiting x\n# TYPE switchyard:num_requests_waiting gauge\n"
        'switchyard:num_requests_waiting{model_name="a"} 3.0\n'
        'switchyard:num_requests_waiting{model_name="b"} 1.0\n'
        'switchyard:num_requests_running{model_name="a"} 5.0\n'
        'switchyard:kv_cache_usage_perc{model_name="a"} 0.25\n'
        'switchyard:num_requests_waiting_other{model_name="a"} 99\n'
    )
    load = parse_replica_load(switchyard, 7.0)
    assert load is not None
    assert (load.num_waiting, load.num_running, load.kv_cache_usage, load.scraped_at) == (4, 5, 0.25, 7.0)
    vllm = parse_replica_load(
        'vllm:num_requests_running{m="x"} 2\nvllm:gpu_cache_usage_perc{m="x"} 0.5\n', 1.0
    )
    assert vllm is not None and (vllm.num_running, vllm.kv_cache_usage) == (2, 0.5)
    sglang = parse_replica_load("sglang:num_queue_reqs 7\nsglang:token_usage 0.1\n", 1.0)
    assert sglang is not None and (sglang.num_waiting, sglang.kv_cache_usage) == (7, 0.1)
    assert parse_replica_load("process_cpu_seconds_total 3\n", 1.0) is None


def test_headers_each_way() -> None:
    sent = upstream_headers(
        [
            *[
                ("Host", "gw"),
                ("Content-Length", "9"),
                ("Authorization", "Bearer client"),
                ("X-Request-Id", "old"),
            ],
            *[("Connection", "keep-alive"), ("X-Session-Id", "s"), ("Accept-Encoding", "gzip")],
        ],
        "rid",
        worker_api_key=None,
    )
    assert dict(sent) == {
        "Authorization": "Bearer client",
        "X-Session-Id": "s",
        "x-request-id": "rid",
        "accept-encoding": "identity",
    }
    keyed = dict(upstream_headers([("authorization", "Bearer client")], "rid", worker_api_key="worker"))
    assert keyed["authorization"] == "Bearer worker" and len(keyed) == 3
    own_key = dict(upstream_headers([("authorization", "Bearer gw")], "rid", None, gateway_checks_key=True))
    assert "authorization" not in own_key  # the gateway's key is not the workers' to see
    back = downstream_headers(
        [
            ("content-type", "text/event-stream"),
            ("content-length", "5"),
            ("retry-after", "3"),
            ("server", "uvicorn"),
        ]
    )
    assert back == {"content-type": "text/event-stream", "retry-after": "3"}


def test_what_a_replica_is_asked_to_tokenize() -> None:
    assert tokenize_body(
        {"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": []}, "chat"
    ) == {
        "model": "m",
        "messages": [{"role": "user", "content": "x"}],
        "tools": [],
    }
    assert tokenize_body({"model": "m", "prompt": "x"}, "completions") == {"model": "m", "prompt": "x"}
    assert tokenize_body({"model": "m", "input": "q", "instructions": "s"}, "responses") == {
        "model": "m",
        "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}],
    }
    assert tokenize_body({"model": "m", "prompt": ["a", "b"]}, "completions") is None
    assert given_token_ids({"prompt": [1, 2, 3]}) == (1, 2, 3)
    assert given_token_ids({"prompt": [True]}) is None


def test_a_stream_ends_with_its_done_event_not_with_those_words_in_a_token() -> None:
    from switchyard.fleet.relay import _ends_the_answer

    assert _ends_the_answer(b'data: {"choices": []}\n\ndata: [DONE]\n\n')
    assert _ends_the_answer(b"event: response.completed\ndata: {}\n\n")
    assert not _ends_the_answer(b'data: {"choices": [{"delta": {"content": "data: [DONE]"}}]}\n\n')
    assert not _ends_the_answer(
        b'event: response.output_text.delta\ndata: {"delta": "event: response.completed"}\n\n'
    )


def test_a_stream_has_output_past_its_opening_events() -> None:
    """The role chunk (and a Responses stream's created / in_progress) go out before the prefill; anything
    after them is output, so the replica's prefill is done."""
    from switchyard.fleet.relay import _carries_output

    role = b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
    token = b'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'
    assert not _carries_output(role)
    assert _carries_output(role + token)
    assert _carries_output(token)
    assert _carries_output((role + token).replace(b"\n", b"\r\n"))
    opening = b"event: response.created\ndata: {}\n\nevent: response.in_progress\ndata: {}\n\n"
    assert not _carries_output(opening)
    assert _carries_output(opening + b'event: response.output_text.delta\ndata: {"delta":"Hi"}\n\n')
    assert not _carries_output(b"\n\n")
