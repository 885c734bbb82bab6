"""`POST /reset_prefix_cache` (vLLM's): a repeated prompt hits the cache until the reset, and misses after it."""

from __future__ import annotations

from pathlib import Path

import openai
from harness import MODEL, RunningServer, start_server

# Longer than several 16-token blocks, so a repeat of it finds whole blocks cached.
PROMPT = "the cat sat on the mat and looked at the dog " * 8


def cached_tokens(client: openai.OpenAI) -> int:
    answer = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=2, temperature=0)
    assert answer.usage is not None and answer.usage.prompt_tokens_details is not None
    return answer.usage.prompt_tokens_details.cached_tokens or 0


def test_reset_empties_the_prefix_cache(server: RunningServer, client: openai.OpenAI) -> None:
    http = server.http()
    assert http.post("/reset_prefix_cache").status_code == 200  # whatever earlier tests left behind
    assert cached_tokens(client) == 0
    assert cached_tokens(client) >= 16
    reset = http.post("/reset_prefix_cache")
    assert reset.status_code == 200 and reset.json()["freed_blocks"] > 0
    assert cached_tokens(client) == 0  # computed again, and cached again for the next one
    assert cached_tokens(client) >= 16


def test_reset_needs_the_api_key_when_one_is_set(tiny_model_dir: Path) -> None:
    running = start_server(tiny_model_dir, api_key="s3cret")
    try:
        http = running.http()
        refused = http.post("/reset_prefix_cache")
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
        allowed = http.post("/reset_prefix_cache", headers={"Authorization": "Bearer s3cret"})
        assert allowed.status_code == 200 and allowed.json() == {"freed_blocks": 0}
    finally:
        running.stop()
