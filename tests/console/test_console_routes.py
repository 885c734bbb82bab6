"""The console's routes on a server, without a browser: the pages are public, their data is behind the key."""

from __future__ import annotations

import json
from typing import Any

from console_harness import API_KEY


def test_the_pages_are_public_and_say_a_key_is_needed(keyed_server: Any) -> None:
    with keyed_server.http() as http:
        assert http.get("/ui").status_code == 307
        page = http.get("/ui/")
        assert page.status_code == 200 and '<script type="module" src="js/app.js">' in page.text
        assert http.get("/ui/vendor/uplot/uPlot.iife.min.js").status_code == 200
        config = http.get("/ui/config.json").json()
        assert config == {
            "title": "Switchyard",
            "views": ["playground", "dashboard"],
            "live": True,
            "key_required": True,
        }


def test_the_live_stream_needs_the_key_and_sends_the_engine_metrics(keyed_server: Any) -> None:
    with keyed_server.http() as http:
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            refused = http.get("/v1/console/stream", headers=headers)
            assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
        assert http.get("/v1/console/ping", headers={"Authorization": "Bearer wrong"}).status_code == 401
        auth = {"Authorization": f"Bearer {API_KEY}"}
        with http.stream("GET", "/v1/console/stream", headers=auth) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            line = next(line for line in stream.iter_lines() if line.startswith("data:"))
    snapshot = json.loads(line.removeprefix("data:"))
    (kv,) = snapshot["series"]["switchyard:kv_cache_usage_perc"]
    assert kv["labels"] == {"model_name": "tiny"} and 0 <= kv["value"] <= 1
    assert set(snapshot["quantiles"]["switchyard:time_to_first_token_seconds"]) == {"p50", "p99", "count"}


def test_the_live_stream_ends_when_the_server_drains(keyed_server: Any) -> None:
    """An open console must not hold a shutdown up: its stream ends once draining begins."""
    state = keyed_server.server.state
    with keyed_server.http() as http:
        auth = {"Authorization": f"Bearer {API_KEY}"}
        with http.stream("GET", "/v1/console/stream", headers=auth) as stream:
            lines = stream.iter_lines()
            assert next(line for line in lines if line.startswith("data:"))
            state.draining = True
            try:
                remaining = [line for line in lines if line.startswith("data:")]  # ends: no hang
            finally:
                state.draining = False
    assert len(remaining) <= 1  # at most the snapshot already on its way
