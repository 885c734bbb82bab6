"""Streaming detokenization: complete characters only, context spacing, special tokens and stop strings.

Every test runs twice: through tokenizers' DecodeStream and through the pure-Python offset decoder used when
a tokenizer has no Rust backend.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import transformers
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from switchyard.engine import detokenizer as detokenizer_module
from switchyard.engine.detokenizer import IncrementalDetokenizer
from switchyard.errors import InvalidRequestError
from tests.tokenizer_factory import build_tokenizer

PROMPT = "<|im_start|>user\nSay something.<|im_end|>\n<|im_start|>assistant\n"
MULTI_BYTE_TEXTS = [
    "😀🎉🚀",
    "日本語のテキストです。",
    "Café crème, naïve façade, Łódź.",
    "family: 👨‍👩‍👧 thumbs: 👍🏽 heart: ❤️",
    "mixed é日😀a∑ end",
]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> transformers.PreTrainedTokenizerBase:
    return build_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture(params=["decode_stream", "offsets"], autouse=True)
def stream_kind(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run each test with DecodeStream and with the Python fallback (as if tokenizers had no DecodeStream)."""
    with pytest.MonkeyPatch.context() as patch:
        if request.param == "offsets":
            patch.setattr(detokenizer_module, "DecodeStream", None)
        yield request.param


def stream(
    tokenizer: transformers.PreTrainedTokenizerBase,
    output_ids: Sequence[int],
    prompt_ids: Sequence[int] = (),
    chunk: int = 1,
    **options: Any,
) -> tuple[list[str], IncrementalDetokenizer]:
    """Feed `output_ids` `chunk` at a time, flush unless a stop string ended it; return every piece of text."""
    detok = IncrementalDetokenizer(tokenizer, list(prompt_ids), **options)
    pieces = [
        detok.add_tokens(list(output_ids[i : i + chunk])).new_text for i in range(0, len(output_ids), chunk)
    ]
    if detok.stop_string is None:
        pieces.append(detok.flush())
    return pieces, detok


def encode(tokenizer: transformers.PreTrainedTokenizerBase, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


# ------------------------------------------------------------------ plain streaming
@pytest.mark.parametrize("text", MULTI_BYTE_TEXTS)
def test_multi_byte_characters_stream_whole(
    tokenizer: transformers.PreTrainedTokenizerBase, text: str
) -> None:
    ids = encode(tokenizer, text)
    pieces, detok = stream(tokenizer, ids, encode(tokenizer, PROMPT))
    assert all("\ufffd" not in piece for piece in pieces)
    assert "".join(pieces) == detok.text == tokenizer.decode(ids) == text


def test_character_split_over_tokens_is_emitted_once_complete(
    tokenizer: transformers.PreTrainedTokenizerBase,
) -> None:
    ids = encode(tokenizer, "😀")
    assert len(ids) > 1  # the test needs the emoji's bytes spread over several tokens
    detok = IncrementalDetokenizer(tokenizer, [])
    assert [detok.add_tokens([i]).new_text for i in ids] == [""] * (len(ids) - 1) + ["😀"]


def test_spacing_comes_from_context(tokenizer: transformers.PreTrainedTokenizerBase) -> None:
    text = "The quick brown fox jumps over the lazy dog."
    pieces, detok = stream(tokenizer, encode(tokenizer, text), encode(tokenizer, PROMPT))
    assert "".join(pieces) == detok.text == text
    assert len([p for p in pieces if p]) > 5


def test_several_tokens_per_call(tokenizer: transformers.PreTrainedTokenizerBase) -> None:
    text = MULTI_BYTE_TEXTS[-1]
    pieces, detok = stream(tokenizer, encode(tokenizer, text), chunk=3)
    assert "".join(pieces) == detok.text == text


@pytest.mark.parametrize("skip", [True, False])
def test_skip_special_tokens(tokenizer: transformers.PreTrainedTokenizerBase, skip: bool) -> None:
    eos, start = tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|im_start|>"])
    ids = [*encode(tokenizer, "Hi"), eos, *encode(tokenizer, " there é"), start, eos]
    pieces, detok = stream(tokenizer, ids, encode(tokenizer, PROMPT), skip_special_tokens=skip)
    expected = "Hi there é" if skip else "Hi<|im_end|> there é<|im_start|><|im_end|>"
    assert "".join(pieces) == detok.text == tokenizer.decode(ids, skip_special_tokens=skip) == expected


def test_flush_releases_an_unfinished_character(tokenizer: transformers.PreTrainedTokenizerBase) -> None:
    ids = encode(tokenizer, "ok 😀")[:-1]
    pieces, detok = stream(tokenizer, ids)
    assert pieces[-1] and pieces[-1].endswith("\ufffd")  # only flush gives up on completing the character
    assert "".join(pieces) == detok.text == tokenizer.decode(ids)
    assert detok.finished and detok.add_tokens(encode(tokenizer, "more")).new_text == ""


@pytest.mark.parametrize("cut", [1, 2])
def test_prompt_ending_inside_a_character_leaves_the_output_clean(
    tokenizer: transformers.PreTrainedTokenizerBase, cut: int
) -> None:
    """A prompt of token ids may end with part of a character: those bytes are the prompt's, so they must not
    come out as U+FFFD in front of the first output text."""
    dragon = encode(tokenizer, "龍")
    assert len(dragon) == 3  # three byte tokens, no merge
    prompt = [*encode(tokenizer, "Say"), *dragon[:cut]]
    output = encode(tokenizer, "yes")
    pieces, detok = stream(tokenizer, output, prompt)
    assert "".join(pieces) == detok.text == tokenizer.decode(output) == "yes"


def test_decode_stream_error_restarts_the_stream(
    tokenizer: transformers.PreTrainedTokenizerBase, stream_kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if stream_kind != "decode_stream":
        pytest.skip("only DecodeStream can fail this way")
    real = detokenizer_module.DecodeStream
    failures = [5]  # fail the 6th step once, as DecodeStream does on an "invalid prefix"

    class FlakyDecodeStream:
        def __init__(self, skip_special_tokens: bool) -> None:
            self._inner = real(skip_special_tokens=skip_special_tokens)

        def step(self, backend: Any, token_id: int) -> str | None:
            failures[0] -= 1
            if failures[0] == 0:
                raise Exception("Invalid prefix encountered")
            return self._inner.step(backend, token_id)

    monkeypatch.setattr(detokenizer_module, "DecodeStream", FlakyDecodeStream)
    text = "The quick brown fox jumps over the lazy dog."
    pieces, detok = stream(tokenizer, encode(tokenizer, text))
    assert failures[0] < 0
    assert "".join(pieces) == detok.text == text  # byte-level BPE needs no context, so nothing is lost


# ------------------------------------------------------------------ stop strings
def spans_tokens(tokenizer: transformers.PreTrainedTokenizerBase, ids: list[int], stop: str) -> bool:
    """Whether no single token's text contains `stop` (so matching it needs text from several tokens)."""
    return all(stop not in tokenizer.decode([i]) for i in ids)


def test_stop_string_across_token_boundaries(tokenizer: transformers.PreTrainedTokenizerBase) -> None:
    ids = encode(tokenizer, "Hello world, STOP here and more")
    assert spans_tokens(tokenizer, ids, "STOP")
    pieces, detok = stream(tokenizer, ids, encode(tokenizer, PROMPT), stop=["STOP"])
    assert detok.stop_string == "STOP" and detok.finished
    assert "".join(pieces) == detok.text == "Hello world, "
    assert detok.add_tokens(encode(tokenizer, "x")) == ("", None)


def test_stop_string_reported_by_the_completing_call(tokenizer: transformers.PreTrainedTokenizerBase) -> None:
    ids = encode(tokenizer, "ab STOP cd")
    detok = IncrementalDetokenizer(tokenizer, [], stop=["STOP"])
    updates = [detok.add_tokens([i]) for i in ids]
    hits = [k for k, update in enumerate(updates) if update.stop_string is not None]
    assert len(hits) == 1
    assert tokenizer.decode(ids[: hits[0] + 1]).endswith("STOP")
    assert updates[hits[0]].stop_string == "STOP"


def test_stop_string_at_the_very_start(tokenizer: transformers.PreTrainedTokenizerBase) -> None:
    pieces, detok = stream(tokenizer, encode(tokenizer, "STOP then text"), stop=["STOP"])
    assert pieces and all(piece == "" for piece in pieces)
    assert detok.text == "" and detok.stop_string == "STOP"


def test_include_stop_str_in_output(tokenizer: transformers.PreTrainedTokenizerBase) -> None:
    ids = encode(tokenizer, "Hello world, STOP here")
    pieces, detok = stream(tokenizer, ids, stop=["STOP"], include_stop_str_in_output=True)
    assert "".join(pieces) == detok.text == "Hello world, STOP"


def test_partial_stop_is_held_back_then_emitted(tokenizer: transformers.PreTrainedTokenizerBase) -> None:
    stop = "worlds"
    ids = encode(tokenizer, "Hello world peace")
    detok = IncrementalDetokenizer(tokenizer, [], stop=[stop])
    held_lengths = []
    for k, token_id in enumerate(ids):
        detok.add_tokens([token_id])
        decoded = tokenizer.decode(ids[: k + 1])
        held = max(n for n in range(len(stop)) if decoded.endswith(stop[:n]))
        assert detok.text == decoded[: len(decoded) - held]
        held_lengths.append(held)
    assert len("world") in held_lengths  # "world" waited while it could still become "worlds"
    assert detok.flush() == ""
    assert detok.text == "Hello world peace" and detok.stop_string is None


def test_held_back_prefix_at_the_end_is_flushed(tokenizer: transformers.PreTrainedTokenizerBase) -> None:
    pieces, detok = stream(tokenizer, encode(tokenizer, "Hello STO"), stop=["STOP"])
    assert pieces[-1].endswith("STO")
    assert "".join(pieces) == detok.text == "Hello STO" and detok.stop_string is None


def test_first_completed_stop_wins(tokenizer: transformers.PreTrainedTokenizerBase) -> None:
    ids = encode(tokenizer, "xx abcd yy")
    _, detok = stream(tokenizer, ids, chunk=len(ids), stop=["abcd", "bc"])
    assert (detok.text, detok.stop_string) == ("xx a", "bc")
    _, detok = stream(tokenizer, ids, chunk=len(ids), stop=["cd", "abcd"])
    assert (detok.text, detok.stop_string) == ("xx ", "abcd")


def test_stop_strings_wait_for_min_tokens(tokenizer: transformers.PreTrainedTokenizerBase) -> None:
    text = "STOP one STOP two"
    ids = encode(tokenizer, text)
    first_stop_done = next(k for k in range(len(ids)) if tokenizer.decode(ids[: k + 1]).endswith("STOP"))
    pieces, detok = stream(tokenizer, ids, stop=["STOP"], min_tokens=first_stop_done + 2)
    assert "".join(pieces) == detok.text == "STOP one "


def test_multi_byte_stop_string(tokenizer: transformers.PreTrainedTokenizerBase) -> None:
    pieces, detok = stream(tokenizer, encode(tokenizer, "日本語のテキスト😀です"), stop=["ト😀"])
    assert all("\ufffd" not in piece for piece in pieces)
    assert "".join(pieces) == detok.text == "日本語のテキス"


def test_empty_stop_string_is_rejected(tokenizer: transformers.PreTrainedTokenizerBase) -> None:
    with pytest.raises(InvalidRequestError):
        IncrementalDetokenizer(tokenizer, [], stop=[""])


# ------------------------------------------------------------------ SentencePiece-style spacing
def test_metaspace_tokenizer_keeps_the_space_before_the_first_output_token() -> None:
    """SentencePiece decoders drop the leading space of a decode; in the prompt's context it is kept."""
    backend = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    backend.decoder = decoders.Sequence([decoders.Metaspace(replacement="▁", prepend_scheme="first")])
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>"], show_progress=False)
    backend.train_from_iterator(["The capital of France is Paris. Hello world."] * 3, trainer=trainer)
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=backend)
    prompt = encode(tokenizer, "The capital of France is")
    output = encode(tokenizer, "The capital of France is Paris.")[len(prompt) :]
    pieces, detok = stream(tokenizer, output, prompt)
    assert "".join(pieces) == detok.text == " Paris."


# ------------------------------------------------------------------ properties
PROPERTY_SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@PROPERTY_SETTINGS
@given(text=st.text(max_size=40))
def test_any_text_streams_back_to_decode(tokenizer: transformers.PreTrainedTokenizerBase, text: str) -> None:
    ids = encode(tokenizer, text)
    pieces, detok = stream(tokenizer, ids, encode(tokenizer, PROMPT))
    assert "".join(pieces) == detok.text == tokenizer.decode(ids, skip_special_tokens=True)
    assert all("\ufffd" not in piece for piece in pieces[:-1]) or "\ufffd" in text


@PROPERTY_SETTINGS
@given(
    ids=st.lists(st.integers(0, 319), max_size=40),
    chunk=st.integers(1, 4),
    skip=st.booleans(),
)
def test_any_token_ids_stream_back_to_decode(
    tokenizer: transformers.PreTrainedTokenizerBase, ids: list[int], chunk: int, skip: bool
) -> None:
    pieces, detok = stream(tokenizer, ids, encode(tokenizer, PROMPT), chunk=chunk, skip_special_tokens=skip)
    assert "".join(pieces) == detok.text == tokenizer.decode(ids, skip_special_tokens=skip)


def reference_stop(text: str, stops: list[str], include: bool) -> tuple[str, str | None]:
    """Cut `text` at the stop string that completes first (the longest if several complete together)."""
    found = [(text.find(s) + len(s), -len(s), s) for s in stops if s in text]
    if not found:
        return text, None
    end, negative_length, stop = min(found)
    return text[: end if include else end + negative_length], stop


@PROPERTY_SETTINGS
@given(
    text=st.text(alphabet="ab é😀", max_size=30),
    stops=st.lists(st.text(alphabet="ab é😀", min_size=1, max_size=4), min_size=1, max_size=3),
    include=st.booleans(),
    chunk=st.integers(1, 3),
)
def test_stop_strings_match_a_cut_of_the_full_text(
    tokenizer: transformers.PreTrainedTokenizerBase, text: str, stops: list[str], include: bool, chunk: int
) -> None:
    ids = encode(tokenizer, text)
    pieces, detok = stream(tokenizer, ids, chunk=chunk, stop=stops, include_stop_str_in_output=include)
    expected_text, expected_stop = reference_stop(text, stops, include)
    assert "".join(pieces) == detok.text == expected_text
    assert detok.stop_string == expected_stop
