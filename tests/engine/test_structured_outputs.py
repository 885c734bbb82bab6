"""Grammar-constrained decoding in the engine: every kind of spec, strict JSON, caching, async compile."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import jsonschema
import pytest

from switchyard.config import EngineConfig
from switchyard.engine.engine import LLMEngine
from switchyard.engine.sampling_params import SamplingParams
from switchyard.engine.structured.params import StructuredOutputsParams
from switchyard.errors import InvalidRequestError
from switchyard.llm import LLM

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
        "email": {"type": ["string", "null"]},
    },
    "required": ["name", "age", "tags"],
    "additionalProperties": False,
}
PROMPTS = ["hello", "the quick brown fox", "x", "Café crème", "{", "1 2 3"]


@pytest.fixture(scope="module")
def llm(tiny_model_dir: Path) -> LLM:
    return LLM(model=str(tiny_model_dir), dtype="float32", max_model_len=512, kv_cache_memory=32 << 20)


def generate(
    llm: LLM, spec: StructuredOutputsParams, temperature: float, seed: int = 0, max_tokens: int = 200
):
    params = [
        SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=seed + i, structured_outputs=spec)
        for i in range(len(PROMPTS))
    ]
    return [o.outputs[0] for o in llm.generate(PROMPTS, params)]


def test_spec_needs_exactly_one_constraint() -> None:
    with pytest.raises(InvalidRequestError, match="exactly one"):
        StructuredOutputsParams()
    with pytest.raises(InvalidRequestError, match="exactly one"):
        StructuredOutputsParams(json={"type": "object"}, regex="a+")
    with pytest.raises(InvalidRequestError, match="non-empty list"):
        StructuredOutputsParams(choice=[])


def test_cache_key_ignores_dict_order_and_text_form() -> None:
    a = StructuredOutputsParams(json={"type": "object", "required": ["x"]})
    b = StructuredOutputsParams(json='{"required": ["x"], "type": "object"}')
    assert a.cache_key() == b.cache_key()
    assert a.cache_key() != StructuredOutputsParams(json={"type": "object"}).cache_key()


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_json_schema_output_parses_strictly_and_validates(llm: LLM, temperature: float) -> None:
    outputs = generate(llm, StructuredOutputsParams(json=PERSON), temperature)
    finished = [o for o in outputs if o.finish_reason == "stop"]
    assert finished, "no output completed its JSON within max_tokens"
    for output in finished:
        value = json.loads(output.text)  # strict: raw control characters would fail here
        jsonschema.validate(value, PERSON)


def test_bounded_strings_never_carry_raw_control_characters(llm: LLM) -> None:
    """xgrammar's own grammar for minLength/maxLength strings admits raw control bytes; ours must not."""
    schema = {
        "type": "object",
        "properties": {"s": {"type": "string", "maxLength": 40}, "t": {"type": "string", "minLength": 5}},
        "required": ["s", "t"],
    }
    spec = StructuredOutputsParams(json=schema)
    for seed in range(3):
        for output in generate(llm, spec, 1.0, seed=100 * seed):
            if output.finish_reason == "stop":
                jsonschema.validate(json.loads(output.text), schema)
            assert not re.search(r"[\x00-\x1f]", output.text)
    matcher = llm.engine.structured_outputs.new_matcher(llm.engine.structured_outputs.compile(spec))
    tokenizer = llm.engine.tokenizer
    accepted = all(
        matcher.accept_token(t) for t in tokenizer.encode('{"s": "a\x01', add_special_tokens=False)
    )
    assert not accepted


def test_json_object_gives_a_json_object(llm: LLM) -> None:
    for output in generate(llm, StructuredOutputsParams(json_object=True), 1.0):
        if output.finish_reason == "stop":
            assert isinstance(json.loads(output.text), dict)


def test_regex_choice_and_grammar(llm: LLM) -> None:
    pattern = r"\d{3}-[a-z]{2,4}"
    for output in generate(llm, StructuredOutputsParams(regex=pattern), 1.0):
        assert output.finish_reason == "stop" and re.fullmatch(pattern, output.text)
    choices = ["yes", "no way", 'he said "hi"\n', "ünïcödé"]
    texts = {o.text for o in generate(llm, StructuredOutputsParams(choice=choices), 1.0, seed=7)}
    assert texts <= set(choices)
    grammar = 'root ::= "(" digits ("," digits)* ")"\ndigits ::= [0-9] [0-9]?'
    for output in generate(llm, StructuredOutputsParams(grammar=grammar), 1.0):
        if output.finish_reason == "stop":
            assert re.fullmatch(r"\(\d\d?(,\d\d?)*\)", output.text)


def test_n_samples_each_follow_the_grammar(llm: LLM) -> None:
    spec = StructuredOutputsParams(choice=["alpha", "beta", "gamma", "delta"])
    [output] = llm.generate(["pick"], SamplingParams(n=4, temperature=1.0, seed=3, structured_outputs=spec))
    assert len(output.outputs) == 4
    assert all(c.text in spec.choice and c.finish_reason == "stop" for c in output.outputs)  # type: ignore[operator]


def test_greedy_constrained_output_survives_preemption(tiny_model_dir: Path) -> None:
    """Recompute preemption keeps the tokens, so the matcher state stays valid and the output is unchanged."""
    spec = StructuredOutputsParams(json=PERSON)
    params = SamplingParams(temperature=0, max_tokens=120, structured_outputs=spec)

    def run(kv_bytes: int) -> tuple[list[str], LLM]:
        llm = LLM(model=str(tiny_model_dir), dtype="float32", max_model_len=512, kv_cache_memory=kv_bytes)
        return [o.outputs[0].text for o in llm.generate(PROMPTS, params)], llm

    roomy, reference = run(32 << 20)
    block_bytes = reference.engine.kv_budget.kv_bytes_per_token * reference.engine.kv_budget.block_size
    tight, small = run(12 * block_bytes)  # room for about one and a half requests at a time
    assert small.engine.scheduler.num_preemptions > 0
    assert tight == roomy


def test_invalid_grammars_raise_before_work(llm: LLM) -> None:
    cases = [
        (StructuredOutputsParams(json={"type": "strnig"}), "invalid JSON schema"),
        (StructuredOutputsParams(json="{not json"), "not valid JSON"),
        (StructuredOutputsParams(regex="(unclosed"), "regex"),
        (StructuredOutputsParams(grammar="root ::= missing_rule"), "grammar"),
    ]
    for spec, message in cases:
        with pytest.raises(InvalidRequestError, match=message) as info:
            llm.generate(["a"], SamplingParams(max_tokens=4, structured_outputs=spec))
        assert info.value.param == "structured_outputs"
    assert not llm.engine.has_unfinished_requests()


def test_min_tokens_with_a_grammar_is_refused_however_it_is_set(llm: LLM) -> None:
    """Once the grammar allows only the end, min_tokens forbade it: the request failed mid-way with an internal
    error. Refused at construction, and at admission when the grammar is set afterwards (as the server does)."""
    spec = StructuredOutputsParams(json=PERSON)
    with pytest.raises(InvalidRequestError) as info:
        SamplingParams(min_tokens=30, max_tokens=40, structured_outputs=spec)
    assert info.value.param == "min_tokens"
    params = SamplingParams(min_tokens=30, max_tokens=40)
    params.structured_outputs = spec
    with pytest.raises(InvalidRequestError) as info:
        llm.generate(["a"], params)
    assert info.value.param == "min_tokens" and not llm.engine.has_unfinished_requests()


def test_compiled_grammars_are_cached_by_content(llm: LLM) -> None:
    manager = llm.engine.structured_outputs
    schema = {
        "type": "object",
        "properties": {"cache_probe": {"type": "boolean"}},
        "required": ["cache_probe"],
    }
    before = manager.stats.compiled
    for text in (json.dumps(schema), json.dumps(schema, indent=2), schema):
        llm.generate(
            ["a", "b"], SamplingParams(max_tokens=20, structured_outputs=StructuredOutputsParams(json=text))
        )
    assert manager.stats.compiled == before + 1
    assert manager.stats.cache_hits >= 2


def test_compilation_runs_off_the_step_loop(tiny_model_dir: Path) -> None:
    """A request whose grammar is still compiling waits outside the scheduler; others keep decoding."""
    engine = LLMEngine(
        EngineConfig(model=str(tiny_model_dir), dtype="float32", max_model_len=256, kv_cache_memory=8 << 20)
    )
    manager = engine.structured_outputs
    release = threading.Event()
    slow = StructuredOutputsParams(regex="slow[0-9]+")
    original = manager.backend.compile

    def compile_slowly(spec: StructuredOutputsParams):  # type: ignore[no-untyped-def]
        if spec.regex == slow.regex:
            assert release.wait(timeout=30)
        return original(spec)

    manager.backend.compile = compile_slowly  # type: ignore[method-assign]
    engine.add_request("slow", "a", SamplingParams(temperature=0, max_tokens=8, structured_outputs=slow))
    engine.add_request("plain", "b", SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))
    finished: dict[str, str] = {}
    for _ in range(200):
        for output in engine.step():
            if output.finished:
                finished[output.request_id] = output.outputs[0].text
        if "plain" in finished:
            break
    assert "plain" in finished and "slow" not in finished
    release.set()
    while engine.has_unfinished_requests():
        for output in engine.step():
            if output.finished:
                finished[output.request_id] = output.outputs[0].text
    assert re.fullmatch(r"slow[0-9]*", finished["slow"]) and finished["slow"].startswith("slow")


def test_a_grammar_that_fails_to_compile_later_fails_only_its_request(tiny_model_dir: Path) -> None:
    engine = LLMEngine(
        EngineConfig(model=str(tiny_model_dir), dtype="float32", max_model_len=256, kv_cache_memory=8 << 20)
    )
    bad = SamplingParams(max_tokens=4, structured_outputs=StructuredOutputsParams(grammar="root ::= nope"))
    engine.add_request("bad", "a", bad)  # compiles on the pool: the error arrives through step()
    engine.add_request("good", "b", SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))
    results = {}
    while engine.has_unfinished_requests():
        for output in engine.step():
            if output.finished:
                results[output.request_id] = output
    assert results["bad"].outputs[0].finish_reason == "error" and "grammar" in (results["bad"].error or "")
    assert results["good"].outputs[0].finish_reason == "length"


def test_abort_while_compiling(tiny_model_dir: Path) -> None:
    engine = LLMEngine(
        EngineConfig(model=str(tiny_model_dir), dtype="float32", max_model_len=256, kv_cache_memory=8 << 20)
    )
    manager = engine.structured_outputs
    release = threading.Event()
    original = manager.backend.compile

    def compile_slowly(spec: StructuredOutputsParams):  # type: ignore[no-untyped-def]
        release.wait(timeout=30)
        return original(spec)

    manager.backend.compile = compile_slowly  # type: ignore[method-assign]
    spec = StructuredOutputsParams(regex="[ab]+")
    engine.add_request("r", "a", SamplingParams(max_tokens=4, structured_outputs=spec))
    engine.abort_request("r")
    [output] = engine.step()
    assert output.finished and output.outputs[0].finish_reason == "abort"
    release.set()
    assert not engine.has_unfinished_requests()
    assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks
