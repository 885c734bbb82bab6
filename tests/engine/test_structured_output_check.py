"""Finished constrained outputs are checked against their spec; the auto backend routes to the exact library.

The regression case (issue 55, item 9): a date-time/duration `pattern` made of optional groups, whose JSON
string regex xgrammar enforces loosely ("P1" passes its grammar; the pattern wants a unit after the digits).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
import xgrammar as xgr
from xgrammar.testing import _is_grammar_accept_string

from switchyard.engine.sampling_params import SamplingParams
from switchyard.engine.structured.auto import route, uses_string_regex
from switchyard.engine.structured.output_check import REGEX_BUDGET_SECONDS, output_check
from switchyard.engine.structured.params import StructuredOutputsParams
from switchyard.engine.structured.xgrammar import strict_json_ebnf
from switchyard.llm import LLM

DURATION = r"^-?P([0-9]+Y)?([0-9]+M)?([0-9]+D)?(T([0-9]+H)?([0-9]+M)?([0-9]+S)?)?$"
"""An ISO 8601 duration of optional groups, as found in JSONSchemaBench (Github and JsonSchemaStore schemas)."""
DURATION_SCHEMA = {"type": "string", "pattern": DURATION}


def test_xgrammar_json_string_regex_accepts_what_the_pattern_rejects() -> None:
    """The backend bug the output check and the auto routing exist for (if xgrammar fixes it, this fails:
    then re-measure with benchmarks/structured_exactness.py and relax the routing)."""
    grammar = xgr.Grammar.from_ebnf(strict_json_ebnf(DURATION_SCHEMA))
    assert _is_grammar_accept_string(grammar, json.dumps("P1"))
    assert not re.search(DURATION, "P1")


def test_json_check_names_the_failing_keyword() -> None:
    check = output_check(StructuredOutputsParams(json=DURATION_SCHEMA))
    assert check is not None
    assert check.check('"P1Y2M"') is None
    mismatch = check.check('"P1"')
    assert mismatch is not None and mismatch.construct == "pattern"
    bad_json = check.check('"P1Y')
    assert bad_json is not None and bad_json.construct == "json"
    nested = output_check(
        StructuredOutputsParams(
            json={"type": "object", "properties": {"a": {"type": "array", "minItems": 2}}}
        )
    )
    assert nested is not None
    mismatch = nested.check('{"a": [1]}')
    assert mismatch is not None and mismatch.construct == "minItems" and "/a" in mismatch.message


def test_regex_choice_and_object_checks() -> None:
    regex = output_check(StructuredOutputsParams(regex=r"[a-c]+\d"))
    assert regex is not None
    assert regex.check("abc1") is None
    assert regex.check("abc1x") is not None  # fullmatch, not search
    choice = output_check(StructuredOutputsParams(choice=["yes", "no"]))
    assert choice is not None and choice.check("no") is None and choice.check("nope") is not None
    json_object = output_check(StructuredOutputsParams(json_object=True))
    assert json_object is not None and json_object.check("{}") is None
    assert json_object.check("[]") is not None
    assert output_check(StructuredOutputsParams(grammar='root ::= "a"')) is None


def test_auto_routes_approximated_schemas_to_llguidance() -> None:
    assert route(StructuredOutputsParams(json=DURATION_SCHEMA)) == ("llguidance",)
    assert route(StructuredOutputsParams(json={"type": "array", "uniqueItems": True})) == ("llguidance",)
    assert route(StructuredOutputsParams(json={"type": "object"})) == ("xgrammar",)
    assert route(StructuredOutputsParams(regex="a+")) == ("xgrammar",)
    # a property *named* "pattern" is not a regex
    assert not uses_string_regex({"type": "object", "properties": {"pattern": {"type": "string"}}})
    assert uses_string_regex({"type": "object", "properties": {"d": DURATION_SCHEMA}})


def _durations(llm: LLM) -> list:
    """Constrained generations steered to digits: "P" then digits is what xgrammar lets through wrongly."""
    tokenizer = llm.engine.tokenizer
    digits = [tokenizer.convert_tokens_to_ids(d) for d in "0123456789"]
    params = [
        SamplingParams(
            temperature=1.0,
            seed=seed,
            max_tokens=12,
            logit_bias=dict.fromkeys(digits, 3.0),
            structured_outputs=StructuredOutputsParams(json=DURATION_SCHEMA),
        )
        for seed in range(16)
    ]
    return llm.generate(["duration:"] * len(params), params)


@pytest.mark.parametrize("backend", ["xgrammar", "auto"])
def test_a_finished_output_that_breaks_its_pattern_is_an_error_not_a_success(
    tiny_model_dir: Path, backend: str
) -> None:
    llm = LLM(
        model=str(tiny_model_dir),
        dtype="float32",
        max_model_len=256,
        kv_cache_memory=16 << 20,
        structured_outputs_backend=backend,
    )
    outputs = _durations(llm)
    stats = llm.engine.structured_outputs.stats
    errors = 0
    for output in outputs:
        completion = output.outputs[0]
        if completion.finish_reason == "stop":
            assert re.search(DURATION, json.loads(completion.text)), completion.text
        elif completion.finish_reason == "error":
            errors += 1
            assert output.error_code == "constrained_output_invalid"
    assert stats.checked_outputs >= len([o for o in outputs if o.outputs[0].finish_reason != "length"])
    if backend == "xgrammar":
        assert errors > 0, "the steered outputs should have hit xgrammar's loose regex"
        assert stats.invalid_outputs == {("xgrammar", "pattern"): errors}
    else:
        assert errors == 0 and stats.invalid_outputs == {}


def test_a_backtracking_pattern_cannot_stall_the_check() -> None:
    """`^\\w+([.-]?\\w+)*@...` (an e-mail pattern in JSONSchemaBench) makes Python's `re` backtrack for minutes
    on a long word without "@" (it stalled the benchmark): the check answers within its regex budget."""
    email = r"^\w+([\.-]?\w+)*@\w+([\.-]?\w+)*(\.\w{2,})+$"
    check = output_check(StructuredOutputsParams(json={"type": "string", "pattern": email}))
    assert check is not None
    start = time.monotonic()
    check.check(json.dumps("a" * 60 + "!"))  # a mismatch, or "cannot tell in time" (None)
    assert time.monotonic() - start < REGEX_BUDGET_SECONDS + 1.0
    assert check.check('"ann@example.org"') is None
    mismatch = check.check('"no at sign"')
    assert mismatch is not None and mismatch.construct == "pattern"
    keys = output_check(
        StructuredOutputsParams(
            json={
                "type": "object",
                "patternProperties": {"^n_": {"type": "integer"}},
                "additionalProperties": True,
            }
        )
    )
    assert keys is not None and keys.check('{"n_a": 1, "x": "y"}') is None
    found = keys.check('{"n_a": "one"}')
    assert found is not None and found.construct == "type"
    assert output_check(StructuredOutputsParams(regex=r"(?P<x")) is None  # Python cannot read it: unchecked
