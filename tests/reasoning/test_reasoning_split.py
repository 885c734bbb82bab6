"""The <think> splitter: whole replies, and streams cut anywhere, including inside a tag."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from switchyard.reasoning import (
    ReasoningSplitter,
    SplitReply,
    check_reasoning_parser,
    prompt_opens_reasoning,
    reasoning_token_count,
    split_reasoning,
)


@pytest.mark.parametrize(
    ("text", "opened", "expected"),
    [
        # Qwen3: the reply opens the block itself; the whitespace the model writes around tags is dropped.
        ("<think>\nAdd 2 and 2.\n</think>\n\nIt is 4.", False, SplitReply("Add 2 and 2.\n", "It is 4.")),
        # DeepSeek-R1 / Qwen3-Thinking-2507: the prompt opened it, the reply only closes it.
        ("Add 2 and 2.</think>It is 4.", True, SplitReply("Add 2 and 2.", "It is 4.")),
        # enable_thinking false: the template wrote an empty block into the prompt, the reply is all answer.
        ("It is 4.", False, SplitReply(None, "It is 4.")),
        ("  It is <think> not a tag here", False, SplitReply(None, "  It is <think> not a tag here")),
        # Cut by max_tokens while reasoning: all reasoning, no answer.
        ("<think>Let me count", False, SplitReply("Let me count", "")),
        ("Let me count", True, SplitReply("Let me count", "")),
        ("<think></think>Four.", False, SplitReply("", "Four.")),
        ("<thi", False, SplitReply(None, "<thi")),  # a partial tag at the end is text after all
        ("<think>x</thi", False, SplitReply("x</thi", "")),
    ],
)
def test_whole_replies(text: str, opened: bool, expected: SplitReply) -> None:
    assert split_reasoning(text, opened) == expected


@given(
    st.lists(
        st.sampled_from(["<think>", "</think>", "<", "</", "th", "ink>", "\n", " ", "a", "4.", "<t"]),
        max_size=14,
    ),
    st.booleans(),
    st.lists(st.integers(min_value=0, max_value=60), max_size=6),
)
def test_a_stream_cut_anywhere_splits_as_the_whole_reply(
    parts: list[str], opened: bool, cuts: list[int]
) -> None:
    text = "".join(parts)
    bounds = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    splitter = ReasoningSplitter(opened)
    pieces = []
    for start, end in itertools.pairwise(bounds):
        pieces += splitter.feed(text[start:end])
    pieces += splitter.finish()
    whole = split_reasoning(text, opened)
    assert "".join(p.text for p in pieces if p.reasoning) == (whole.reasoning or "")
    assert "".join(p.text for p in pieces if not p.reasoning) == whole.answer
    assert all(p.text for p in pieces)  # no empty deltas


def test_a_stream_never_shows_part_of_a_tag() -> None:
    splitter = ReasoningSplitter()
    shown = [splitter.feed(chunk) for chunk in ["<th", "ink>Hmm", ".</th", "ink>", "\n\nDone"]]
    assert [[(p.text, p.reasoning) for p in chunk] for chunk in shown] == [
        [],
        [("Hmm", True)],
        [(".", True)],
        [],
        [("Done", False)],
    ]
    assert splitter.finish() == []


def test_prompt_opens_reasoning() -> None:
    assert prompt_opens_reasoning("<|im_start|>assistant\n<think>\n")
    assert not prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert not prompt_opens_reasoning("<|im_start|>assistant\n")


def test_parser_names() -> None:
    assert check_reasoning_parser("qwen3") == "qwen3"
    with pytest.raises(ValueError, match="deepseek_r1"):
        check_reasoning_parser("granite")


def test_reasoning_token_count() -> None:
    pieces = ["<think>", "Add", " 2", "</th", "ink>", "4", "."]  # a closing tag split over two tokens

    def decode(ids: Sequence[int]) -> str:
        return "".join(pieces[i] for i in ids)

    ids = list(range(len(pieces)))
    assert reasoning_token_count(ids, decode) == 5  # through the token that completes </think>
    assert reasoning_token_count(ids[:3], decode) == 3  # still reasoning when cut
    assert reasoning_token_count(ids[5:], decode) == 0  # an answer without reasoning
    assert reasoning_token_count(ids[1:], decode, opened=True) == 4  # the prompt opened the block
    assert reasoning_token_count([], decode) == 0
