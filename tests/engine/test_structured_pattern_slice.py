"""JSONSchemaBench's string patterns with optional or repeated groups, and the auto backend's exactness on them.

`data/jsonschemabench_patterns.json` holds every distinct `pattern` with a `(...)?` or `(...)*` group found in
JSONSchemaBench (MaskBench data, MIT licence; `origin` names the schema file), and, where a random walk under
xgrammar's mask produced one, a string xgrammar's JSON grammar accepts although the pattern rejects it.
"""

from __future__ import annotations

import contextlib
import json
import random
from pathlib import Path
from typing import Any

import pytest
import regex
import torch
import xgrammar as xgr
from tokenizer_factory import EOS_TOKEN, build_tokenizer
from xgrammar.testing import _is_grammar_accept_string

from switchyard.engine.structured.auto import AutoBackend, route
from switchyard.engine.structured.params import StructuredOutputsParams
from switchyard.engine.structured.xgrammar import strict_json_ebnf
from switchyard.errors import InvalidRequestError

PATTERNS: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent / "data" / "jsonschemabench_patterns.json").read_text()
)
LOOSE = [p for p in PATTERNS if p.get("xgrammar_lets_through") is not None]


@pytest.fixture(scope="module")
def auto(tmp_path_factory: pytest.TempPathFactory) -> tuple[AutoBackend, Any]:
    tokenizer = build_tokenizer(tmp_path_factory.mktemp("tok"), vocab_size=320)
    eos = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    return AutoBackend(tokenizer, len(tokenizer), [eos]), tokenizer


def spec(pattern: str) -> StructuredOutputsParams:
    return StructuredOutputsParams(json={"type": "string", "pattern": pattern})


def test_the_slice_holds_patterns_xgrammar_enforces_loosely() -> None:
    assert len(PATTERNS) > 300 and len(LOOSE) >= 10
    for item in LOOSE:
        wrong = item["xgrammar_lets_through"]
        assert regex.search(item["pattern"], wrong) is None, item
        grammar = xgr.Grammar.from_ebnf(strict_json_ebnf({"type": "string", "pattern": item["pattern"]}))
        assert _is_grammar_accept_string(grammar, json.dumps(wrong, ensure_ascii=False)), item


def test_auto_sends_them_to_llguidance_which_refuses_the_wrong_strings(auto: tuple[AutoBackend, Any]) -> None:
    backend, tokenizer = auto
    eos = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    for item in LOOSE:
        assert route(spec(item["pattern"])) == ("llguidance",)
        try:
            compiled = backend.compile(spec(item["pattern"]))
        except InvalidRequestError:
            continue  # llguidance refuses it (e.g. a `$` inside a group): a 400, not a wrong output
        assert compiled.backend == "llguidance"
        matcher = backend.new_matcher(compiled)
        ids = tokenizer.encode(
            json.dumps(item["xgrammar_lets_through"], ensure_ascii=False), add_special_tokens=False
        )
        assert not (all(matcher.accept_token(t) for t in ids) and matcher.accept_token(eos)), item


@pytest.mark.slow
def test_random_walks_under_auto_match_every_pattern(auto: tuple[AutoBackend, Any]) -> None:
    """Uniformly random tokens under the mask (temperature infinity): every finished string matches."""
    backend, tokenizer = auto
    eos = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    vocab = len(tokenizer)
    bitmask = backend.allocate_bitmask(1)
    shifts = torch.arange(32, dtype=torch.int32)
    rng = random.Random(0)
    for item in PATTERNS:
        try:
            compiled = backend.compile(spec(item["pattern"]))
        except InvalidRequestError:  # refused with a 400: nothing to enforce
            continue
        for _ in range(4):
            matcher, ids = backend.new_matcher(compiled), []
            for _ in range(80):
                backend.fill_bitmask([matcher], bitmask, [0])
                allowed = (
                    ((bitmask[0].unsqueeze(1) >> shifts) & 1).flatten()[:vocab].nonzero().flatten().tolist()
                )
                token = eos if eos in allowed and rng.random() < 0.3 else rng.choice(allowed)
                assert matcher.accept_token(token)
                if token == eos:
                    text = json.loads(tokenizer.decode(ids))
                    with contextlib.suppress(TimeoutError):  # a backtracking pattern: undecided in time
                        assert regex.search(item["pattern"], text, timeout=1.0), (item["pattern"], text)
                    break
                ids.append(token)
