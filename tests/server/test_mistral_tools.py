"""Tool calls in Mistral's format through the real server and the openai client: [TOOL_CALLS] is a special
token (kept in replies so the parser sees it), calls come back with the nine-character ids Mistral's templates
demand, and a conversation that sends back calls with other ids still renders."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jinja2
import pytest
from harness import MODEL, RunningServer, start_server

# Mistral-7B-Instruct-v0.3's template in miniature: tools in [AVAILABLE_TOOLS], calls as a JSON list after
# [TOOL_CALLS], results in [TOOL_RESULTS], and the same refusal of call ids that are not nine characters.
MISTRAL_TEMPLATE = (
    "{%- if tools %}[AVAILABLE_TOOLS] {{ tools | tojson }}[/AVAILABLE_TOOLS]{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'user' %}[INST] {{ message['content'] }}[/INST]"
    "{%- elif message['role'] == 'assistant' and message['tool_calls'] %}[TOOL_CALLS] ["
    "{%- for call in message['tool_calls'] %}"
    "{%- if call['id'] is not defined or call['id'] | length != 9 %}"
    "{{ raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}{%- endif %}"
    "{\"name\": \"{{ call['function']['name'] }}\", \"arguments\": {{ call['function']['arguments'] | tojson }}, "
    '"id": "{{ call[\'id\'] }}"}{%- if not loop.last %}, {% endif %}'
    "{%- endfor %}]<|im_end|>"
    "{%- elif message['role'] == 'assistant' %}{{ message['content'] }}<|im_end|>"
    "{%- elif message['role'] == 'tool' %}"
    "{%- if message['tool_call_id'] | length != 9 %}"
    "{{ raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}{%- endif %}"
    '[TOOL_RESULTS] {"content": {{ message[\'content\'] | tojson }}, "call_id": "{{ message[\'tool_call_id\'] }}"}'
    "[/TOOL_RESULTS]"
    "{%- endif %}{%- endfor %}"
)
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 12}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
USER = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture(scope="module")
def mistral_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    from model_factory import build_hf_model
    from tokenizer_factory import build_tokenizer

    folder = tmp_path_factory.mktemp("mistral-tools")
    build_hf_model("mistral", folder, seed=3, max_position_embeddings=1024, vocab_size=336)
    tokenizer = build_tokenizer(folder, vocab_size=320)
    tokenizer.add_special_tokens({"additional_special_tokens": ["[TOOL_CALLS]"]})
    tokenizer.chat_template = MISTRAL_TEMPLATE
    tokenizer.save_pretrained(folder, save_jinja_files=False)
    running = start_server(folder, engine_overrides={"max_model_len": 1024, "kv_cache_memory": 16 << 20})
    yield running
    running.stop()


TOOL_CALLS_ID = 320
"""The special token's id (the first after the 320 trained pieces)."""


def required_call(server: RunningServer, **extra: Any) -> Any:
    """A required call whose trigger is written as the special token, as a Mistral model writes it (the grammar
    also allows spelling it out piece by piece, which a random model would otherwise do)."""
    return server.client().chat.completions.create(
        model=MODEL,
        messages=USER,
        tools=[WEATHER],
        tool_choice="required",
        max_tokens=200,
        seed=5,
        logit_bias={str(TOOL_CALLS_ID): 100},
        parallel_tool_calls=False,  # else the bias would open call after call
        **extra,
    )


def test_the_format_is_detected_and_its_special_trigger_kept(mistral_server: RunningServer) -> None:
    state = mistral_server.server.config.app.state.server  # type: ignore[attr-defined]
    assert state.tool_format.name == "mistral" and state.tool_trigger_is_special
    assert mistral_server.llm_engine.tokenizer.convert_tokens_to_ids("[TOOL_CALLS]") == TOOL_CALLS_ID


def test_a_required_call_comes_back_parsed_with_a_mistral_id(mistral_server: RunningServer) -> None:
    reply = required_call(mistral_server, temperature=1.0)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls or []
    assert call.function.name == "get_weather"
    assert set(json.loads(call.function.arguments)) == {"city"}
    assert len(call.id) == 9 and call.id.isalnum()


def test_streamed_calls_match_the_whole_reply(mistral_server: RunningServer) -> None:
    whole = required_call(mistral_server, temperature=0)
    names, arguments = [], ""
    for chunk in required_call(mistral_server, temperature=0, stream=True):
        for piece in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
            if piece.function and piece.function.name:
                names.append(piece.function.name)
            arguments += (piece.function.arguments or "") if piece.function else ""
    (call,) = whole.choices[0].message.tool_calls or []
    assert names == ["get_weather"] and arguments == call.function.arguments


@pytest.mark.parametrize("call_id", ["call_5f0c2b6d9e8a4b1c", "abcDEF123"])
def test_results_sent_back_render_whatever_their_ids(mistral_server: RunningServer, call_id: str) -> None:
    """OpenAI-style ids from another server or framework would make Mistral's template raise; they are
    rewritten, the same way in the call and in its result."""
    history = [
        *USER,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": "18 C, sunny"},
    ]
    client = mistral_server.client()
    reply = client.chat.completions.create(model=MODEL, messages=history, tools=[WEATHER], max_tokens=4)  # type: ignore[arg-type]
    assert reply.choices[0].finish_reason in ("stop", "length", "tool_calls")
    if len(call_id) != 9:  # the template itself refuses such ids: the rewrite is what let the request through
        with pytest.raises(jinja2.TemplateError, match="Tool call IDs"):
            mistral_server.llm_engine.tokenizer.apply_chat_template(history, tools=[WEATHER])
