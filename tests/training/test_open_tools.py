"""The procedurally generated tool corpus: calls fit the offered schemas, values come from the request, nothing
offered fits a no-call turn, and the held-out tool vocabulary shares no word with training's."""

from __future__ import annotations

import re
from collections import Counter

import jsonschema
import pytest

from switchyard_training.corpus import CorpusConfig, generate_corpus, unseen_tools_config
from switchyard_training.example import Category, CheckKind, Example
from switchyard_training.tasks.tool_vocab import (
    HELDOUT_TOOL_VOCAB,
    TRAIN_TOOL_VOCAB,
    WIDE_TRAIN_TOOL_VOCAB,
    ToolVocab,
)

OPEN = {Category.OPEN_TOOL_CALL: 0.5, Category.OPEN_TOOL_PARALLEL: 0.2, Category.OPEN_NO_TOOL: 0.3}


@pytest.fixture(scope="module")
def training() -> list[Example]:
    return generate_corpus(CorpusConfig(seed=5, size=600, weights=dict(OPEN), group_size=4))


@pytest.fixture(scope="module")
def unseen() -> list[Example]:
    return generate_corpus(unseen_tools_config(size=300))


def _words(vocab: ToolVocab) -> dict[str, set[str]]:
    frames = [re.sub(r"\{\w+\}", " ", f) for f in (*vocab.commands, *vocab.questions, *vocab.declines)]
    return {
        "domains": {w for d in vocab.domains for w in d.name.split()},
        "objects": {w for d in vocab.domains for o in d.objects for w in o.split()},
        "actions": {a.name for a in vocab.actions}
        | {w for a in vocab.actions for v in a.request_verbs for w in v.split()},
        "frames": {f.strip() for f in frames},
        "descriptions": set(vocab.descriptions),
    }


def test_heldout_vocabulary_shares_no_word_with_training() -> None:
    train, held = _words(TRAIN_TOOL_VOCAB), _words(HELDOUT_TOOL_VOCAB)
    train_all = set().union(*train.values())
    for part in ("domains", "objects", "actions"):
        assert not held[part] & train_all, (part, held[part] & train_all)
    assert not held["frames"] & train["frames"]
    assert not held["descriptions"] & train["descriptions"]


def _calls(example: Example) -> list[tuple[dict, dict]]:
    """(expected call, its tool's schema) for every graded call."""
    tools = {t["function"]["name"]: t["function"] for t in example.tools or []}
    return [
        (call, tools[call["name"]])
        for c in example.checks
        if c.kind == CheckKind.TOOL_CALL
        for call in c.tool_calls
    ]


@pytest.mark.parametrize("corpus", ["training", "unseen"])
def test_every_call_is_to_an_offered_tool_and_fits_its_schema(
    corpus: str, request: pytest.FixtureRequest
) -> None:
    examples: list[Example] = request.getfixturevalue(corpus)
    assert Counter(e.category for e in examples).keys() == set(OPEN)
    calls = 0
    for example in examples:
        assert 1 <= len(example.tools or []) <= 10
        names = [t["function"]["name"] for t in example.tools]
        assert len(names) == len(set(names))
        for call, tool in _calls(example):
            jsonschema.validate(call["arguments"], tool["parameters"])
            calls += 1
    assert calls > 200


def test_copied_values_are_in_the_request(training: list[Example]) -> None:
    """Names, codes and places in a call are the user's own words (derived values, flags and dates in words,
    are not copied and are left out)."""
    checked = 0
    for example in training:
        for check in example.checks:
            if check.kind != CheckKind.TOOL_CALL:
                continue
            user = " ".join(m["content"] for m in example.messages[: check.turn] if m["role"] == "user")
            for call in check.tool_calls:
                for name, value in call["arguments"].items():
                    if isinstance(value, str) and re.fullmatch(r"[A-Z][\w .'-]+|[A-Z]{2,3}-?\d+", value):
                        assert value in user, (name, value, user)
                        checked += 1
    assert checked > 100


def test_no_call_turns_ask_for_what_no_offered_tool_does(training: list[Example]) -> None:
    declined = [e for e in training if e.category == Category.OPEN_NO_TOOL]
    assert len(declined) > 50
    for example in declined:
        (check,) = [c for c in example.checks if c.kind == CheckKind.NO_TOOL]
        assert not example.messages[check.turn].get("tool_calls")


def test_unseen_suite_tools_are_never_training_tools(training: list[Example], unseen: list[Example]) -> None:
    train_names = {t["function"]["name"] for e in training for t in e.tools}
    unseen_names = {t["function"]["name"] for e in unseen for t in e.tools}
    assert not train_names & unseen_names
    assert not any("calc" in name or "math" in name for name in unseen_names)


def test_calculators_under_users_names_are_in_training(training: list[Example]) -> None:
    math_calls = [
        call
        for e in training
        for call, tool in _calls(e)
        if re.search(r"[\d)] [-+*/] [\d(]", str(call["arguments"]))
    ]
    assert len(math_calls) > 10
    assert len({call["name"] for call in math_calls}) > 4


def test_invented_vocabulary_widens_training_and_stays_disjoint_from_heldout() -> None:
    wide = WIDE_TRAIN_TOOL_VOCAB
    assert len(wide.domains) > 10 * len(TRAIN_TOOL_VOCAB.domains)
    held = _words(HELDOUT_TOOL_VOCAB)
    wide_words = set().union(*_words(wide).values())
    for part in ("domains", "objects", "actions"):
        assert not held[part] & wide_words, part
    examples = generate_corpus(
        CorpusConfig(seed=9, size=200, weights=dict(OPEN), group_size=4, tool_vocab=wide)
    )
    invented = {d.name for d in wide.domains[len(TRAIN_TOOL_VOCAB.domains) :]}
    names = {t["function"]["name"] for e in examples for t in e.tools}
    assert any(any(word in name for word in invented) for name in names)
    for example in examples:
        for call, tool in _calls(example):
            jsonschema.validate(call["arguments"], tool["parameters"])
