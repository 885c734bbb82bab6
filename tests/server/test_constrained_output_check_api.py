"""A constrained output that breaks its schema is a 500 and a metric, never a 200 (issue 55, item 9).

The xgrammar backend is forced so that its loose regex inside JSON strings (a duration `pattern` of optional
groups) lets a wrong string through; the bias towards digits makes the tiny random model write one.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from harness import MODEL, RunningServer, metric, start_server
from tokenizer_factory import build_tokenizer

DURATION = r"^-?P([0-9]+Y)?([0-9]+M)?([0-9]+D)?(T([0-9]+H)?([0-9]+M)?([0-9]+S)?)?$"


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path) -> Iterator[RunningServer]:
    running = start_server(tiny_model_dir, engine_overrides={"structured_outputs_backend": "xgrammar"})
    yield running
    running.stop()


def test_a_mismatch_is_a_500_counted_by_backend_and_construct(server: RunningServer, tmp_path: Path) -> None:
    tokenizer = build_tokenizer(tmp_path, vocab_size=320)
    digits = {str(tokenizer.convert_tokens_to_ids(d)): 3.0 for d in "0123456789"}
    client = server.client()
    failures = successes = 0
    for seed in range(16):
        try:
            reply = client.completions.create(
                model=MODEL,
                prompt="duration:",
                max_tokens=12,
                temperature=1.0,
                seed=seed,
                logit_bias=digits,  # type: ignore[arg-type]
                extra_body={"structured_outputs": {"json": {"type": "string", "pattern": DURATION}}},
            )
        except openai.InternalServerError as error:
            failures += 1
            assert "breaks its spec" in error.message and "'pattern' fails" in error.message
            continue
        choice = reply.choices[0]
        if choice.finish_reason == "stop":
            successes += 1
            assert re.search(DURATION, choice.text.strip('"')), choice.text
    assert failures > 0, "the biased outputs should have hit xgrammar's loose regex"
    text = server.http().get("/metrics").text
    assert metric(
        text, "switchyard:structured_output_invalid_total", backend="xgrammar", construct="pattern"
    ) == (failures)
    assert server.http().get("/health").status_code == 200  # one request failed, not the engine
