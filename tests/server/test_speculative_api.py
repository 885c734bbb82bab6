"""A speculating server through the openai client: its counters on /metrics, and a request opting out."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from harness import MODEL, RunningServer, metric, start_server


@pytest.fixture(scope="module")
def speculating(tiny_model_dir: Path) -> Iterator[RunningServer]:
    running = start_server(
        tiny_model_dir, engine_overrides={"speculative_method": "ngram", "spec_max_batch_size": 64}
    )
    yield running
    running.stop()


def counters(server: RunningServer) -> dict[str, float]:
    text = server.http().get("/metrics").text
    return {kind: metric(text, "switchyard:spec_decode_tokens_total", kind=kind) for kind in
            ("steps", "proposed", "accepted", "emitted")}  # fmt: skip


def test_speculation_shows_in_the_metrics_and_a_request_can_opt_out(speculating: RunningServer) -> None:
    client = speculating.client()
    # A repetitive prompt: prompt lookup finds matches, and the tiny random model loops.
    prompt = "ab cd ef " * 12
    client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=40, temperature=0, extra_body={"ignore_eos": True}
    )
    after_on = counters(speculating)
    assert after_on["proposed"] > 0 and after_on["accepted"] > 0
    assert after_on["emitted"] > after_on["steps"]  # mean accepted length per step above one
    text = speculating.http().get("/metrics").text
    rate = metric(text, "switchyard:spec_decode_acceptance_rate")
    assert rate == pytest.approx(after_on["accepted"] / after_on["proposed"])
    length = metric(text, "switchyard:spec_decode_mean_accepted_length")
    assert length == pytest.approx(after_on["emitted"] / after_on["steps"]) and length > 1
    plain = client.completions.create(
        model=MODEL,
        prompt=prompt,
        max_tokens=40,
        temperature=0,
        extra_body={"ignore_eos": True, "speculative": False},
    )
    assert counters(speculating) == after_on  # no proposal for the opted-out request
    again = client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=40, temperature=0, extra_body={"ignore_eos": True}
    )
    assert again.choices[0].text == plain.choices[0].text  # the same greedy text either way


def test_a_malformed_opt_out_is_a_400(speculating: RunningServer) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        speculating.client().completions.create(
            model=MODEL, prompt="hi", max_tokens=4, extra_body={"speculative": {"on": 1}}
        )
    assert "speculative" in str(info.value)
