"""The gateway's piecewise prompt encoder gives exactly the whole encode's ids, and falls back where it cannot."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import transformers
from tokenizers import Tokenizer, models, pre_tokenizers

from switchyard.fleet.piece_encoder import PieceEncoder
from switchyard.fleet.prompt_tokens import PromptTokenizer

BUNDLED = Path(__file__).resolve().parents[2] / "switchyard" / "models" / "bundled" / "switchyard-chat"


@pytest.fixture(scope="module")
def bundled() -> transformers.PreTrainedTokenizerFast:
    return transformers.PreTrainedTokenizerFast.from_pretrained(str(BUNDLED), local_files_only=True)


def _chat(system: str, turns: int, last: str) -> list[dict]:
    messages: list[dict] = [{"role": "system", "content": system}]
    for turn in range(turns):
        messages.append({"role": "user", "content": f"question {turn}: how far is it to  the depot?\n"})
        messages.append({"role": "assistant", "content": f"About {turn * 7} km, past the bridge."})
    messages.append({"role": "user", "content": last})
    return messages


def test_pieces_encode_to_the_whole_texts_ids(bundled) -> None:
    encoder = PieceEncoder(bundled, check_first=0, check_every=10**9)
    texts = [
        bundled.apply_chat_template(_chat("You route parcels. " * 40, turns, last), tokenize=False,
                                    add_generation_prompt=True)
        for turns in range(4)
        for last in ("ok", "a <tool_call> typed by the user <|im_start|>", "  spaces  \n\n", "naïve café 123,456")
    ]  # fmt: skip
    texts.append("<|im_start|><|im_end|><tool_call></tool_call>")
    texts.append("no added token at all")
    texts.append("")
    for text in texts:
        assert encoder.encode(text) == tuple(bundled.encode(text, add_special_tokens=False))
    assert encoder.pieces_allowed


def test_a_repeated_system_prompt_and_history_are_looked_up_not_encoded(bundled) -> None:
    encoder = PieceEncoder(bundled)
    system = "You answer for the Harbour depot. " * 60
    encoder.encode(bundled.apply_chat_template(_chat(system, 3, "first"), tokenize=False))
    misses = encoder.misses
    encoder.encode(bundled.apply_chat_template(_chat(system, 3, "second"), tokenize=False))
    # Only the new last message's piece (and the tail after it) is encoded again.
    assert encoder.misses - misses <= 2
    assert encoder.hits >= 7


def test_remembered_text_stays_within_its_bound(bundled) -> None:
    encoder = PieceEncoder(bundled, max_chars=100)
    for i in range(50):
        encoder.encode(f"<|im_start|>user\nmessage number {i} with some words<|im_end|>")
    assert encoder._chars <= 100
    huge = "x" * 500
    assert encoder.encode(f"<|im_start|>{huge}") == tuple(bundled.encode(f"<|im_start|>{huge}"))
    assert huge not in encoder._pieces


def _first_piece_tokenizer() -> transformers.PreTrainedTokenizerFast:
    """A real tokenizer whose pre-tokenizer marks only the text's first piece (Metaspace, prepend "first"), as
    SentencePiece-style Llama tokenizers do: its pieces do not encode on their own."""
    words = ["▁hello", "hello", "▁world", "world", "▁", "[UNK]"]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]")
    fast.add_special_tokens({"additional_special_tokens": ["<s>"]})
    return fast


def test_a_tokenizer_whose_pieces_differ_falls_back_to_whole_encodes(caplog) -> None:
    tokenizer = _first_piece_tokenizer()
    text = "hello<s>world"
    whole = tuple(tokenizer.encode(text, add_special_tokens=False))
    encoder = PieceEncoder(tokenizer)
    with caplog.at_level(logging.WARNING):
        assert encoder.encode(text) == whole
    assert not encoder.pieces_allowed
    assert "encodes whole prompts" in caplog.text
    assert encoder.encode(text) == whole


def test_the_gateway_tokenizer_still_matches_the_template_with_tools(bundled) -> None:
    tokens = PromptTokenizer.from_folder(BUNDLED)
    tools = [{"type": "function", "function": {"name": "get_depot", "description": "A depot's hours.",
                                               "parameters": {"type": "object", "properties": {}}}}]  # fmt: skip
    messages = _chat("Be brief.", 2, "When does it open?")
    messages.insert(3, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_depot", "arguments": "{}"}}]})  # fmt: skip
    messages.insert(4, {"role": "tool", "tool_call_id": "c1", "content": '{"open": "08:00"}'})
    for _ in range(3):
        ids = tokens.token_ids("/v1/chat/completions", {"messages": messages, "tools": tools})
        rendered = bundled.apply_chat_template(
            [tokens_message(m) for m in messages], tools=tools, add_generation_prompt=True, tokenize=True
        )
        assert ids == tuple(rendered["input_ids"])
    tokens.close()


def tokens_message(message: dict) -> dict:
    """As the gateway hands a message to the template (tool-call arguments parsed)."""
    from switchyard.fleet.prompt_tokens import _message_for_template

    return _message_for_template(message)


def test_bad_settings_are_refused(bundled) -> None:
    with pytest.raises(ValueError):
        PieceEncoder(bundled, check_every=0)
    with pytest.raises(ValueError):
        PieceEncoder(bundled, max_chars=-1)
