from __future__ import annotations

import re
from pathlib import Path

import pytest
from tokenizers import Tokenizer
from transformers import AutoTokenizer

from switchyard_training.chat_format import ASSISTANT_HEADER, IM_END, SPECIAL_TOKENS, TAG_TOKENS, render_chat
from switchyard_training.data import assign_rows, pack_examples, tokenize_examples
from switchyard_training.entities import HELDOUT_ENTITIES, TRAIN_ENTITIES
from switchyard_training.example import Example
from switchyard_training.tokenizer_training import (
    WordStarts,
    _train_bpe,
    _train_completed_bpe,
    mirror_word_start_merges,
    save_tokenizer,
    train_tokenizer,
)

HELDOUT_NAMES = [*HELDOUT_ENTITIES.cities, *HELDOUT_ENTITIES.companies, *HELDOUT_ENTITIES.first_names]


@pytest.fixture(scope="module")
def hf_tokenizer(bundled_tokenizer: Tokenizer, tmp_path_factory: pytest.TempPathFactory):
    folder = save_tokenizer(bundled_tokenizer, tmp_path_factory.mktemp("tok"))
    return AutoTokenizer.from_pretrained(str(folder))


def test_round_trip_on_corpus_and_arbitrary_text(
    bundled_tokenizer: Tokenizer, bundled_corpus: list[Example]
) -> None:
    texts = [render_chat(e.messages, e.tools).text for e in bundled_corpus[:100]]
    texts += ["Ünïcödé ✓ 日本語 🚀\ttabs\n\nand 12345.678"]
    for text in texts:
        assert bundled_tokenizer.decode(bundled_tokenizer.encode(text).ids, skip_special_tokens=False) == text


def test_special_and_tag_tokens_are_single_ids(bundled_tokenizer: Tokenizer) -> None:
    assert [bundled_tokenizer.token_to_id(t) for t in SPECIAL_TOKENS] == [0, 1, 2]
    for token in (*SPECIAL_TOKENS, *TAG_TOKENS):
        assert bundled_tokenizer.encode(f"a{token}b").tokens.count(token) == 1
    assert bundled_tokenizer.get_vocab_size() <= 1200
    assert len(bundled_tokenizer.encode("12345").ids) == 5, "digits are split one per token"


def _split_differently(tokenizer: Tokenizer, names: list[str]) -> list[str]:
    """Names whose pieces after a quote are not their pieces after a space (first one bare)."""
    differ = []
    for name in names:
        spaced = tokenizer.encode(" " + name).tokens
        quoted = tokenizer.encode('"' + name).tokens
        bare = spaced[1:] if spaced[0] == "\u0120" else [spaced[0][1:], *spaced[1:]]
        if quoted[1:] != bare:
            differ.append(name)
    return differ


def test_names_split_alike_after_a_space_and_after_a_quote(bundled_tokenizer: Tokenizer) -> None:
    assert len(_split_differently(bundled_tokenizer, HELDOUT_NAMES)) <= len(HELDOUT_NAMES) // 20


def _spaced_name_texts() -> list[str]:
    """Training names that always follow a space, so plain BPE learns only their spaced merges."""
    entities = TRAIN_ENTITIES
    return [
        f"Weather in {city} for {person} of {company}?"
        for city, person, company in zip(
            entities.cities[:1500], entities.first_names, entities.companies, strict=False
        )
    ]


def _split_differently_bare(tokenizer: Tokenizer, words: list[str]) -> list[str]:
    """Words whose pieces alone (as a JSON value starts) are not their pieces after a space (first one bare)."""
    differ = []
    for word in words:
        spaced = tokenizer.encode(" " + word).tokens
        bare = spaced[1:] if spaced[0] == "\u0120" else [spaced[0][1:], *spaced[1:]]
        if tokenizer.encode(word).tokens != bare:
            differ.append(word)
    return differ


def test_space_last_splits_every_word_alike_with_and_without_its_space(bundled_corpus: list[Example]) -> None:
    texts = [render_chat(e.messages, e.tools).text for e in bundled_corpus]
    space_last = train_tokenizer(texts, 1200, word_starts=WordStarts.SPACE_LAST)
    learned = train_tokenizer(texts, 1200, word_starts=WordStarts.LEARNED)
    assert 1100 <= space_last.get_vocab_size() <= 1200
    words = sorted({w for t in texts[:300] for w in re.findall(r"[^\W\d_][\w.@-]*", t)})
    words += [*HELDOUT_NAMES, "board game", "wool sweater", "alma.petrova@corp.org", "architect"]
    assert _split_differently_bare(space_last, words) == []
    assert len(_split_differently_bare(learned, words)) > 20
    assert any(t.startswith("\u0120") and len(t) > 1 for t in space_last.get_vocab()), (
        "spaced first pieces exist"
    )
    for text in [*texts[:50], '{"item": "board game"} and a board game', "tabs\tand  double  spaces"]:
        assert space_last.decode(space_last.encode(text).ids, skip_special_tokens=False) == text


def test_mirror_adds_the_bare_form_of_word_start_merges() -> None:
    texts = _spaced_name_texts()
    plain = _train_bpe(texts, 800, 2)
    mirrored = mirror_word_start_merges(plain)
    assert len(_split_differently(plain, HELDOUT_NAMES)) >= 3, "the plain merges show the problem"
    assert _split_differently(mirrored, HELDOUT_NAMES) == []
    assert mirrored.get_vocab_size() > plain.get_vocab_size()
    for token, token_id in plain.get_vocab().items():
        assert mirrored.token_to_id(token) == token_id, "existing ids are kept"
    for text in [*texts[:50], '{"city": "Noxpim"} and "Osaka"']:
        assert mirrored.decode(mirrored.encode(text).ids) == text


def test_mirrored_tokenizer_fits_its_vocab_size_and_can_be_turned_off() -> None:
    texts = _spaced_name_texts()
    mirrored = train_tokenizer(texts, 900, word_starts=WordStarts.MIRROR)
    plain = train_tokenizer(texts, 900, word_starts=WordStarts.LEARNED)
    assert 850 <= mirrored.get_vocab_size() <= 900 and plain.get_vocab_size() <= 900
    assert len(_split_differently(mirrored, HELDOUT_NAMES)) < len(_split_differently(plain, HELDOUT_NAMES))


@pytest.mark.parametrize("mirror", list(WordStarts))
def test_digit_groups_make_every_group_one_token(bundled_corpus: list[Example], mirror: bool) -> None:
    texts = [render_chat(e.messages, e.tools).text for e in bundled_corpus[:200]]
    grouped = train_tokenizer(texts, 1200, word_starts=mirror, digits_per_token=2)
    assert grouped.get_vocab_size() <= 1200
    for number in range(100):
        assert len(grouped.encode(f"{number:02d}").ids) == 1, number
    assert grouped.encode("7725 * 401.4 + 414.7").tokens == [
        "77", "25", "Ġ*", "Ġ", "40", "1", ".", "4", "Ġ+", "Ġ", "41", "4", ".", "7"
    ]  # fmt: skip
    for text in [*texts[:20], "Order 123456789 at 3.14159, call 0042"]:
        assert grouped.decode(grouped.encode(text).ids, skip_special_tokens=False) == text
    per_digit = train_tokenizer(texts, 1200, word_starts=mirror)
    assert per_digit.encode("4520").tokens == ["4", "5", "2", "0"]
    with pytest.raises(ValueError, match="digits_per_token"):
        train_tokenizer(texts, 1200, digits_per_token=4)


def test_tokenizer_rejects_tiny_vocab(bundled_corpus: list[Example]) -> None:
    with pytest.raises(ValueError, match="too small"):
        train_tokenizer(["hello"], vocab_size=100)


def test_hf_loads_folder_with_eos_and_keeps_tool_tags(hf_tokenizer) -> None:
    assert hf_tokenizer.eos_token == IM_END
    ids = hf_tokenizer.encode('<tool_call>\n{"name": "x"}\n</tool_call><|im_end|>', add_special_tokens=False)
    decoded = hf_tokenizer.decode(ids, skip_special_tokens=True)
    assert decoded.startswith("<tool_call>") and IM_END not in decoded


def test_template_matches_python_renderer(hf_tokenizer, bundled_corpus: list[Example]) -> None:
    for example in bundled_corpus[:150]:
        expected = render_chat(example.messages, example.tools).text
        assert (
            hf_tokenizer.apply_chat_template(example.messages, tools=example.tools, tokenize=False)
            == expected
        )
        prompt = hf_tokenizer.apply_chat_template(
            example.messages[:1], tools=example.tools, tokenize=False, add_generation_prompt=True
        )
        assert prompt.endswith(ASSISTANT_HEADER)


def test_template_renders_tools_calls_and_results(hf_tokenizer) -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Oslo and Lima?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}},
            {"type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Lima"}'}},
        ]},
        {"role": "tool", "content": '{"t": 4}'},
        {"role": "tool", "content": '{"t": 20}'},
        {"role": "assistant", "content": "Oslo 4, Lima 20."},
    ]  # fmt: skip
    text = hf_tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools")
    assert '{"type": "function", "function": {"name": "get_weather"' in text
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>' in text
    assert (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lima"}}\n</tool_call><|im_end|>' in text
    )
    assert '<|im_start|>user\n<tool_response>\n{"t": 4}\n</tool_response>\n<tool_response>' in text
    assert text.count("<|im_start|>user") == 2
    assert text == render_chat(messages, tools).text


def test_loss_mask_covers_exactly_the_assistant_turns(
    bundled_tokenizer: Tokenizer, bundled_corpus: list[Example]
) -> None:
    for example in bundled_corpus[:60]:
        (tokenized,) = tokenize_examples(bundled_tokenizer, [example])
        trained = [i for i, m in zip(tokenized.ids, tokenized.loss_mask, strict=True) if m]
        text = bundled_tokenizer.decode(trained, skip_special_tokens=False)
        rendered = render_chat(example.messages, example.tools)
        expected = "".join(rendered.text[s:e] for s, e in rendered.assistant_spans)
        assert text == expected
        assert text.endswith(IM_END)


def test_packing_keeps_examples_whole(bundled_tokenizer: Tokenizer, bundled_corpus: list[Example]) -> None:
    tokenized = tokenize_examples(bundled_tokenizer, bundled_corpus[:80])
    packed = pack_examples(tokenized, row_len=768, pad_id=0)
    assert packed.num_examples + packed.num_dropped == 80
    assert int(packed.row_tokens.sum()) == sum(len(t.ids) for t in tokenized if len(t.ids) <= 768)
    starts = int((packed.position_ids == 0).sum())
    padded_rows = int((packed.row_tokens < 768).sum())
    assert starts == packed.num_examples + padded_rows, "every example (and each padding tail) restarts at 0"
    assert packed.num_loss_tokens == sum(sum(t.loss_mask) for t in tokenized if len(t.ids) <= 768)
    assert packed.input_ids.shape[0] < 80 / 2, "rows hold several examples"


def test_assign_rows_fits() -> None:
    lengths = [5, 9, 3, 7, 1, 10, 2]
    rows = assign_rows(lengths, 10)
    assert sorted(i for row in rows for i in row) == list(range(7))
    assert all(sum(lengths[i] for i in row) <= 10 for row in rows)
    assert len(rows) == 4


def test_saved_tokenizer_config(bundled_tokenizer: Tokenizer, tmp_path: Path) -> None:
    import json

    save_tokenizer(bundled_tokenizer, tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert config["eos_token"] == IM_END and "chat_template" in config


def test_completions_are_kept_when_what_they_add_jumps_with_the_bpe_size(
    bundled_corpus: list[Example],
) -> None:
    """What a completion adds need not shrink with the BPE (a smaller BPE may lack digit pairs a larger one
    has): the search still ends within the budget with the completion applied, never without it."""
    texts = [render_chat(e.messages, e.tools).text for e in bundled_corpus[:200]]

    def jumpy(tokenizer: Tokenizer) -> Tokenizer:
        extra = 60 if tokenizer.get_vocab_size() % 2 else 10
        tokenizer.add_tokens([f"<marker{i}>" for i in range(extra)])
        return tokenizer

    budget = 900
    tokenizer = _train_completed_bpe(texts, budget, 2, 1, [jumpy])
    assert tokenizer.get_vocab_size() <= budget
    assert tokenizer.token_to_id("<marker0>") is not None
    with pytest.raises(ValueError, match="larger vocab_size"):
        _train_completed_bpe(
            texts, 300, 2, 1, [lambda t: (t.add_tokens([f"<m{i}>" for i in range(400)]), t)[1]]
        )
