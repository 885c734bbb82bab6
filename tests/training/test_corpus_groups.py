"""Corpus groups: conversations generated to share the beginning of their prompt (`sessions`)."""

from __future__ import annotations

from collections import Counter

import pytest

from switchyard_training.chat_format import render_chat
from switchyard_training.corpus import DEFAULT_WEIGHTS, CorpusConfig, generate_corpus, load_jsonl, save_jsonl
from switchyard_training.example import Category, CheckKind, Example
from switchyard_training.sessions import GROUPED, TOOL_FAMILY
from tests.training.test_bundled_corpus import assert_checks_match_the_text


@pytest.fixture(scope="module")
def grouped_corpus() -> list[Example]:
    return generate_corpus(CorpusConfig(seed=5, size=3000, group_size=4))


def _groups(examples: list[Example]) -> dict[int, list[Example]]:
    groups: dict[int, list[Example]] = {}
    for example in examples:
        if example.group is not None:
            groups.setdefault(example.group, []).append(example)
    return groups


def test_group_size_one_is_the_plain_corpus() -> None:
    plain = generate_corpus(CorpusConfig(seed=5, size=300))
    same = generate_corpus(CorpusConfig(seed=5, size=300, group_size=1))
    assert [e.to_json() for e in plain] == [e.to_json() for e in same]
    assert all(e.group is None for e in plain)


def test_groups_are_the_grouped_categories_and_the_rest_stands_alone(grouped_corpus: list[Example]) -> None:
    assert len(grouped_corpus) == 3000
    groups = _groups(grouped_corpus)
    sizes = Counter(len(members) for members in groups.values())
    # Short groups: the last one, and tool groups whose tools could not hold a member's parallel calls.
    assert max(sizes) == 4 and sizes[4] >= 0.9 * len(groups)
    for example in grouped_corpus:
        assert example.group is None or example.category in GROUPED
        # Only parallel calls the group's tools cannot make stand alone (with tools of their own).
        assert example.group is not None or example.category not in GROUPED - {Category.TOOL_PARALLEL}
    for members in groups.values():
        families = {m.category in TOOL_FAMILY for m in members}
        assert len(families) == 1  # tool conversations group with tool conversations, passages with passages


def test_members_share_their_setting_and_differ_after_it(grouped_corpus: list[Example]) -> None:
    repeats = 0
    for members in _groups(grouped_corpus).values():
        first = members[0]
        if first.category in TOOL_FAMILY:
            assert all(m.tools == first.tools for m in members)
            systems = {
                m.messages[0]["content"] if m.messages[0]["role"] == "system" else None for m in members
            }
            assert len(systems) == 1
        else:
            passages = {
                "\n".join(line for line in render_chat(m.messages).text.splitlines() if line.startswith("["))
                for m in members
            }
            assert len(passages) == 1
        texts = [render_chat(m.messages, m.tools).text for m in members]
        repeats += len(texts) - len(set(texts))
        if first.category is Category.GROUNDED:
            assert len(set(texts)) == len(texts)  # each member asks another question
    assert repeats <= 0.01 * len(
        grouped_corpus
    )  # a tool group may repeat a short exchange ("Play some music.")


def test_shares_of_conversations_follow_the_weights() -> None:
    corpus = generate_corpus(CorpusConfig(seed=6, size=12000, group_size=4))
    counts = Counter(e.category for e in corpus)
    total = sum(DEFAULT_WEIGHTS.values())
    for category in (Category.GROUNDED, Category.JSON_EXTRACTION, Category.COPY):
        assert counts[category] / len(corpus) == pytest.approx(DEFAULT_WEIGHTS[category] / total, abs=0.02)
    for category in TOOL_FAMILY:
        assert counts[category] / len(corpus) == pytest.approx(DEFAULT_WEIGHTS[category] / total, abs=0.01)
    grounded = [c for e in corpus if e.category is Category.GROUNDED for c in e.checks]
    answerable = sum(c.citation is not None for c in grounded) / len(grounded)
    assert answerable == pytest.approx(0.75, abs=0.03)


def test_grouped_checks_agree_with_the_gold_turns(grouped_corpus: list[Example]) -> None:
    assert_checks_match_the_text(grouped_corpus)
    kinds = Counter(c.kind for e in grouped_corpus if e.group is not None for c in e.checks)
    assert kinds[CheckKind.TOOL_CALL] and kinds[CheckKind.NO_TOOL] and kinds[CheckKind.GROUNDED]


def test_group_survives_the_jsonl_round_trip(tmp_path, grouped_corpus: list[Example]) -> None:
    save_jsonl(grouped_corpus[:60], tmp_path / "c.jsonl")
    loaded = load_jsonl(tmp_path / "c.jsonl")
    assert [e.group for e in loaded] == [e.group for e in grouped_corpus[:60]]
    assert [e.to_json() for e in loaded] == [e.to_json() for e in grouped_corpus[:60]]


def test_bad_group_size_is_rejected() -> None:
    for size in (0, 11):
        with pytest.raises(ValueError, match="group size"):
            CorpusConfig(group_size=size)
