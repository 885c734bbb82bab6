"""Tokenizer loading, generation defaults, end-of-sequence ids and chat rendering."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import transformers

from switchyard.errors import InvalidRequestError, ModelLoadError
from switchyard.models.tokenizer import (
    GenerationDefaults,
    eos_token_ids,
    load_generation_defaults,
    load_tokenizer,
    render_chat,
)
from tests.tokenizer_factory import build_tokenizer


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tokenizer")
    build_tokenizer(path)
    return path


@pytest.fixture(scope="module")
def tokenizer(folder: Path) -> transformers.PreTrainedTokenizerBase:
    return load_tokenizer(folder)


# ------------------------------------------------------------------ load_tokenizer
def test_load_tokenizer_reads_the_folder(tokenizer: transformers.PreTrainedTokenizerBase) -> None:
    assert len(tokenizer) == 320
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.decode(tokenizer.encode("Hello, café 😀")) == "Hello, café 😀"
    assert tokenizer.chat_template


@pytest.mark.parametrize("vocab_size", [261, 300])
def test_factory_vocab_size_is_controllable(tmp_path: Path, vocab_size: int) -> None:
    build_tokenizer(tmp_path, vocab_size=vocab_size)
    assert len(load_tokenizer(tmp_path)) == vocab_size


def test_folder_without_tokenizer_files_names_folder_and_missing_files(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelLoadError) as info:
        load_tokenizer(tmp_path)
    assert str(tmp_path) in str(info.value)
    assert "tokenizer.json" in str(info.value)
    assert info.value.path == str(tmp_path)


def test_missing_folder_is_a_model_load_error(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="not a directory"):
        load_tokenizer(tmp_path / "nope")


def test_corrupt_tokenizer_file_is_wrapped(tmp_path: Path, folder: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text((folder / "tokenizer_config.json").read_text())
    (tmp_path / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "NoSuchModel"}}')
    with pytest.raises(ModelLoadError, match="cannot load tokenizer") as info:
        load_tokenizer(tmp_path)
    assert str(tmp_path) in str(info.value)


# ------------------------------------------------------------------ generation defaults
def test_missing_generation_config_gives_empty_defaults(tmp_path: Path) -> None:
    defaults = load_generation_defaults(tmp_path)
    assert defaults == GenerationDefaults()
    assert defaults.eos_token_ids == ()
    assert defaults.temperature is None and defaults.max_new_tokens is None


def test_generation_config_fields_are_read(tmp_path: Path) -> None:
    raw = {
        "bos_token_id": 1,
        "eos_token_id": [2, 7],
        "pad_token_id": 0,
        "temperature": 0.6,
        "top_p": 0.9,
        "top_k": 20,
        "repetition_penalty": 1,
        "max_new_tokens": 256,
        "do_sample": True,
        "transformers_version": "4.45.0",
    }
    (tmp_path / "generation_config.json").write_text(json.dumps(raw))
    defaults = load_generation_defaults(tmp_path)
    assert defaults.eos_token_ids == (2, 7)
    assert (defaults.bos_token_id, defaults.pad_token_id) == (1, 0)
    assert (defaults.temperature, defaults.top_p, defaults.top_k) == (0.6, 0.9, 20)
    assert defaults.repetition_penalty == 1.0 and isinstance(defaults.repetition_penalty, float)
    assert defaults.max_new_tokens == 256
    assert defaults.min_p is None
    assert defaults.extra == {"do_sample": True, "transformers_version": "4.45.0"}


def test_single_eos_id_becomes_a_tuple(tmp_path: Path) -> None:
    (tmp_path / "generation_config.json").write_text('{"eos_token_id": 5}')
    assert load_generation_defaults(tmp_path).eos_token_ids == (5,)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "malformed JSON"),
        ("[1, 2]", "JSON object"),
        ('{"eos_token_id": "x"}', "eos_token_id"),
        ('{"top_k": 1.5}', "top_k"),
        ('{"temperature": "hot"}', "temperature"),
    ],
)
def test_bad_generation_config_names_the_file(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "generation_config.json"
    path.write_text(content)
    with pytest.raises(ModelLoadError, match=message) as info:
        load_generation_defaults(tmp_path)
    assert info.value.path == str(path)


# ------------------------------------------------------------------ eos ids
def test_eos_ids_are_the_union_in_order(tokenizer: transformers.PreTrainedTokenizerBase) -> None:
    defaults = GenerationDefaults(eos_token_ids=(9, 2, 5))
    assert tokenizer.eos_token_id == 2
    assert eos_token_ids(tokenizer, (5,), defaults) == (5, 9, 2)
    assert eos_token_ids(tokenizer, 7, GenerationDefaults()) == (7, 2)
    assert eos_token_ids(tokenizer, None, GenerationDefaults()) == (2,)


def test_eos_ids_without_tokenizer() -> None:
    assert eos_token_ids(None, [3], GenerationDefaults(eos_token_ids=(4,))) == (3, 4)


# ------------------------------------------------------------------ render_chat
MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris? é 😀"},
]


def test_render_chat_returns_the_templates_token_ids(tokenizer: transformers.PreTrainedTokenizerBase) -> None:
    ids = render_chat(tokenizer, MESSAGES)
    assert isinstance(ids, list) and all(isinstance(i, int) for i in ids)
    text = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWeather in Paris? é 😀<|im_end|>\n"
    assert tokenizer.decode(ids) == text + "<|im_start|>assistant\n"
    assert ids == tokenizer.encode(text + "<|im_start|>assistant\n", add_special_tokens=False)
    assert tokenizer.decode(render_chat(tokenizer, MESSAGES, add_generation_prompt=False)) == text


def test_render_chat_with_tools_and_tool_messages(tokenizer: transformers.PreTrainedTokenizerBase) -> None:
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
    }
    messages = [
        *MESSAGES,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    text = tokenizer.decode(render_chat(tokenizer, messages, tools=[tool]))
    assert text.startswith("<|im_start|>system\n<tools>\n" + json.dumps(tool) + "\n</tools>")
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in text
    assert text.endswith("<|im_start|>tool call_1\nsunny<|im_end|>\n<|im_start|>assistant\n")


def test_render_chat_passes_template_kwargs(tmp_path: Path) -> None:
    tokenizer = build_tokenizer(tmp_path)
    tokenizer.chat_template = "{% if enable_thinking %}think {% endif %}{{ messages[0]['content'] }}"
    assert tokenizer.decode(
        render_chat(tokenizer, MESSAGES[1:], template_kwargs={"enable_thinking": True})
    ).startswith("think ")
    assert not tokenizer.decode(render_chat(tokenizer, MESSAGES[1:])).startswith("think")


def test_render_chat_without_template_is_an_invalid_request(tmp_path: Path) -> None:
    tokenizer = build_tokenizer(tmp_path)
    tokenizer.chat_template = None
    with pytest.raises(InvalidRequestError, match="model has no chat template"):
        render_chat(tokenizer, MESSAGES)


def test_template_that_rejects_the_conversation_is_an_invalid_request(tmp_path: Path) -> None:
    tokenizer = build_tokenizer(tmp_path)
    tokenizer.chat_template = "{{ raise_exception('roles must alternate') }}"
    with pytest.raises(InvalidRequestError, match="roles must alternate"):
        render_chat(tokenizer, MESSAGES)
