"""The cascade's escalation rule on crafted logprobs, the answers it reads and writes, and its config."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from switchyard.fleet.cascade.answer import answer_events, kept_answer, tier_body
from switchyard.fleet.cascade.config import CascadeConfig, ConfidenceThresholds
from switchyard.fleet.cascade.decision import (
    ChoiceConfidence,
    Reason,
    answer_confidence,
    judge_answer,
    judge_choice,
)
from switchyard.fleet.config import fleet_config_from_mapping
from switchyard.fleet.errors import FleetConfigError
from switchyard.fleet.usage import TokenUsage

BOTH = ConfidenceThresholds(min_mean_logprob=-0.5, min_token_logprob=-2.0)


def _choice(*logprobs: float, finish: str | None = "stop", output: bool = True) -> ChoiceConfidence:
    return ChoiceConfidence(tuple(logprobs) if logprobs else None, finish, output)


def test_a_confident_answer_is_kept_with_its_mean_and_minimum() -> None:
    verdict = judge_choice(_choice(-0.1, -0.2, -0.3), BOTH)
    assert verdict.accept and verdict.reason is Reason.CONFIDENT
    assert verdict.mean_logprob == pytest.approx(-0.2)
    assert verdict.min_logprob == pytest.approx(-0.3)


@pytest.mark.parametrize(
    ("choice", "reason"),
    [
        (_choice(-0.6, -0.6, -0.6), Reason.LOW_MEAN),  # every token fine, the average too low
        (
            _choice(-0.01, -0.01, -0.01, -0.01, -0.01, -2.1),
            Reason.LOW_TOKEN,
        ),  # a good mean hiding one unsure token
        (_choice(-0.1, finish="length"), Reason.TRUNCATED),  # cut off: the rest is unjudged
        (_choice(-0.1, finish="content_filter"), Reason.UNFINISHED),
        (_choice(-0.1, finish=None), Reason.UNFINISHED),
        (_choice(-0.1, output=False), Reason.EMPTY),
        (_choice(finish="stop"), Reason.NO_LOGPROBS),  # a replica that reports none is not trusted
    ],
)
def test_escalation_reasons(choice: ChoiceConfidence, reason: Reason) -> None:
    verdict = judge_choice(choice, BOTH)
    assert not verdict.accept
    assert verdict.reason is reason


def test_the_thresholds_are_inclusive_and_each_may_be_left_out() -> None:
    assert judge_choice(_choice(-0.5, -0.5), BOTH).accept  # exactly at both bounds
    assert judge_choice(_choice(-3.0, -3.0), ConfidenceThresholds(min_token_logprob=-3.0)).accept
    assert not judge_choice(_choice(-3.0, -3.01), ConfidenceThresholds(min_token_logprob=-3.0)).accept
    only_mean = ConfidenceThresholds(min_mean_logprob=-1.0)
    assert judge_choice(_choice(-0.01, -1.9), only_mean).accept  # no per-token bound
    assert judge_choice(_choice(-50.0), ConfidenceThresholds()).accept  # no bound at all: finished is enough


def test_a_tool_call_answer_is_judged_on_its_logprobs_and_finishes_with_tool_calls() -> None:
    assert judge_choice(_choice(-0.05, -0.1, finish="tool_calls"), BOTH).accept
    assert not judge_choice(_choice(-0.05, -4.0, finish="tool_calls"), BOTH).accept


def test_every_choice_must_pass_and_no_choice_is_empty() -> None:
    good, bad = _choice(-0.1), _choice(-0.1, -3.0)
    assert judge_answer([good, good], BOTH).accept
    assert judge_answer([good, bad], BOTH).reason is Reason.LOW_MEAN
    assert judge_answer([], BOTH).reason is Reason.EMPTY
    kept = judge_answer([_choice(-0.1), _choice(-0.4)], BOTH)
    assert kept.mean_logprob == pytest.approx(-0.4)  # the least confident choice speaks for the answer


def _chat_answer(logprobs: list[float] | None, finish: str = "stop", **message: Any) -> dict[str, Any]:
    entries = None if logprobs is None else {"content": [{"token": "x", "logprob": lp} for lp in logprobs]}
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "small",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Paris.", **message},
                "logprobs": entries,
                "finish_reason": finish,
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
    }


def test_confidence_is_read_from_chat_and_completions_answers() -> None:
    [chat] = answer_confidence(_chat_answer([-0.1, -0.2]), "chat")
    assert chat == ChoiceConfidence((-0.1, -0.2), "stop", True)
    [call] = answer_confidence(
        _chat_answer([-0.1], "tool_calls", content=None, tool_calls=[{"id": "c", "type": "function"}]), "chat"
    )
    assert call.has_output and call.finish_reason == "tool_calls"
    completion = {
        "choices": [
            {
                "index": 0,
                "text": " Paris",
                "logprobs": {"token_logprobs": [-0.3, -0.1]},
                "finish_reason": "stop",
            }
        ]
    }
    assert answer_confidence(completion, "completions") == [ChoiceConfidence((-0.3, -0.1), "stop", True)]
    assert answer_confidence({"error": {"message": "no"}}, "chat") == []
    [blank] = answer_confidence(_chat_answer(None, content="  "), "chat")
    assert not blank.has_output and blank.token_logprobs is None


def test_a_judged_tier_is_asked_for_logprobs_without_streaming() -> None:
    body = {"model": "auto", "messages": [], "stream": True, "stream_options": {"include_usage": True}}
    assert json.loads(tier_body(body, "chat", "small", judged=True)) == {
        "model": "small",
        "messages": [],
        "logprobs": True,
    }
    assert (
        json.loads(tier_body({"model": "auto", "prompt": "x"}, "completions", "small", True))["logprobs"] == 0
    )
    assert json.loads(tier_body(body, "chat", "large", judged=False)) == {**body, "model": "large"}


def test_the_kept_answer_names_its_model_counts_every_tier_and_hides_unasked_logprobs() -> None:
    answer = _chat_answer([-0.1, -0.2])
    kept = kept_answer(answer, "large", TokenUsage(prompt_tokens=10, cached_tokens=4, output_tokens=5), False)
    assert kept["model"] == "large"
    assert kept["usage"] == {
        "prompt_tokens": 20,
        "completion_tokens": 8,
        "total_tokens": 28,
        "prompt_tokens_details": {"cached_tokens": 4},
    }
    assert kept["choices"][0]["logprobs"] is None
    assert (
        kept_answer(answer, "small", TokenUsage(), True)["choices"][0]["logprobs"]
        == answer["choices"][0]["logprobs"]
    )


def test_a_kept_answer_streams_as_chunks_that_rebuild_it() -> None:
    answer = kept_answer(_chat_answer([-0.1]), "small", TokenUsage(), False)
    raw = answer_events(answer, "chat", include_usage=True).decode()
    assert raw.endswith("data: [DONE]\n\n")
    events = [json.loads(line[6:]) for line in raw.split("\n\n") if line.startswith("data: {")]
    assert all(event["object"] == "chat.completion.chunk" and event["model"] == "small" for event in events)
    text = "".join(c["delta"].get("content") or "" for e in events for c in e["choices"])
    assert text == "Paris."
    assert [c["finish_reason"] for e in events for c in e["choices"]] == [None, "stop"]
    assert events[-1]["choices"] == [] and events[-1]["usage"]["total_tokens"] == 13
    without_usage = answer_events(answer, "chat", include_usage=False).decode()
    assert '"usage"' not in without_usage


def test_cascades_in_a_fleet_file() -> None:
    document = {
        "pools": {"small": {"workers": ["http://127.0.0.1:1"]}, "large": {"workers": ["http://127.0.0.1:2"]}},
        "cascades": {
            "auto": {"tiers": ["small", "large"], "min_mean_logprob": -0.4, "min_token_logprob": -3}
        },
    }
    config = fleet_config_from_mapping(document)
    assert config.cascades == (CascadeConfig("auto", ("small", "large"), ConfidenceThresholds(-0.4, -3)),)


@pytest.mark.parametrize(
    ("cascade", "message"),
    [
        ({"tiers": ["small", "missing"]}, "no pool named `missing`"),
        ({"tiers": ["small"]}, "at least two tiers"),
        ({"tiers": ["small", "small"]}, "lists a tier twice"),
        ({"tiers": ["small", "large"], "min_mean_logprob": 0.5}, "must be <= 0"),
        ({"tiers": ["small", "large"], "min_token_logprob": math.inf}, "finite"),
        ({"tiers": ["small", "large"], "threshold": -1}, "unknown setting(s) threshold"),
        ({"tiers": "small"}, "list of pool names"),
    ],
)
def test_bad_cascades_are_refused_at_start(cascade: dict[str, Any], message: str) -> None:
    document = {
        "pools": {"small": {"workers": ["http://127.0.0.1:1"]}, "large": {"workers": ["http://127.0.0.1:2"]}},
        "cascades": {"auto": cascade},
    }
    with pytest.raises(FleetConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        fleet_config_from_mapping(document)


def test_a_cascade_may_not_take_a_pools_name() -> None:
    document = {
        "pools": {"small": {"workers": ["http://127.0.0.1:1"]}, "large": {"workers": ["http://127.0.0.1:2"]}},
        "cascades": {"small": {"tiers": ["small", "large"]}},
    }
    with pytest.raises(FleetConfigError, match="has the name of a pool"):
        fleet_config_from_mapping(document)
