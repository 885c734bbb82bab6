"""Speculative sampling is lossless: with every proposer (n-gram, draft model masked and unmasked, speculator),
with and without a grammar, sampled outputs follow the target's exact law (chi-square against enumeration on an
8-token vocabulary)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import transformers
from scipy import stats

from switchyard.config import EngineConfig
from switchyard.engine.engine import LLMEngine
from switchyard.engine.sampler import Sampler, SamplingBatch, SamplingRow
from switchyard.engine.sampling_params import SamplingParams

VOCAB = 8
K = 4


def save_peaky(
    folder: Path, seed: int, scale: float, eos_token_id: int | None = None
) -> transformers.LlamaForCausalLM:
    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=128,
        eos_token_id=eos_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
    model.save_pretrained(folder, safe_serialization=True)
    return model


@pytest.fixture(scope="module")
def peaky_draft(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another 8-token model: a draft whose distributions differ from the target's."""
    folder = tmp_path_factory.mktemp("peaky-draft")
    save_peaky(folder, seed=5, scale=4.0)
    return folder


@pytest.fixture(scope="module")
def peaky_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[int]]:
    """An 8-token model with a scaled LM head (varied, far-from-uniform next-token distributions) and a prompt
    made of its own greedy continuation, so n-gram proposals are often, but not always, what it would say."""
    folder = tmp_path_factory.mktemp("peaky")
    model = save_peaky(folder, seed=0, scale=8.0)
    prompt = [1, 2, 3]
    with torch.no_grad():
        for _ in range(29):
            prompt.append(int(model(torch.tensor([prompt])).logits[0, -1].argmax()))
    return folder, prompt


def exact_joint(
    folder: Path, prompt: list[int], params: SamplingParams, allowed: list[list[int]] | None = None
) -> dict[tuple[int, ...], float]:
    """P(first K tokens) under the target model after the request's sampling transforms, by enumeration.

    `allowed[i]`, when given, lists the tokens a grammar permits at output position i: the others are masked
    out of the logits before the sampling transforms, as the engine applies a grammar's mask.
    """
    model = transformers.LlamaForCausalLM.from_pretrained(folder).eval()
    sampler = Sampler()
    joint: dict[tuple[int, ...], float] = {(): 1.0}
    for position in range(K):
        prefixes = list(joint)
        ids = torch.tensor([prompt + list(p) for p in prefixes])
        with torch.no_grad():
            logits = model(ids).logits[:, -1, :].float()
        if allowed is not None:
            forbidden = [t for t in range(VOCAB) if t not in allowed[position]]
            logits[:, forbidden] = float("-inf")
        rows = [
            SamplingRow(params=params, prompt_token_ids=prompt, output_token_ids=list(p)) for p in prefixes
        ]
        probs = sampler.probabilities(logits, SamplingBatch.build(rows, VOCAB, "cpu"))
        joint = {(*p, t): joint[p] * float(probs[i, t]) for i, p in enumerate(prefixes) for t in range(VOCAB)}
    return joint


def sample_prefixes(
    folder: Path,
    draft: Path | None,
    method: str,
    prompt: list[int],
    params: SamplingParams,
    samples: int,
    mask_drafts: bool = True,
    lookup_below: float = 0.6,
) -> tuple[dict[tuple[int, ...], int], LLMEngine]:
    """Run `samples` copies of one request with speculation on; count each output's token sequence."""
    engine = LLMEngine(
        EngineConfig(
            model=str(folder),
            dtype="float32",
            skip_tokenizer=params.structured_outputs is None,
            max_num_seqs=256,
            kv_cache_memory=16 << 20,
            speculative_method=method,
            speculative_model=str(draft) if method in ("draft", "speculator") else None,
            num_speculative_tokens=K,
            spec_max_batch_size=256,
            spec_mask_drafts=mask_drafts,
            spec_lookup_below=lookup_below,
            seed=1,
        )
    )
    for i in range(samples):
        engine.add_request(str(i), prompt, params)
    counts: dict[tuple[int, ...], int] = {}
    while engine.has_unfinished_requests():
        for output in engine.step():
            if output.finished:
                assert output.error is None, output.error
                key = tuple(output.outputs[0].token_ids)
                counts[key] = counts.get(key, 0) + 1
    spec = engine.spec_decoder
    assert spec is not None and spec.stats.accepted > samples // 10  # drafts are accepted...
    assert spec.stats.accepted < 0.95 * spec.stats.proposed  # ...and rejected, so both branches are tested
    return counts, engine


def assert_matches_law(counts: dict[tuple[int, ...], int], joint: dict[tuple[int, ...], float]) -> None:
    """Chi-square goodness of fit of the counted outputs against the exact law (p > 0.001)."""
    samples = sum(counts.values())
    assert set(counts) <= {k for k, p in joint.items() if p > 0}, "an output the law gives no probability"
    # Pool cells expected below 5 samples so the chi-square approximation holds.
    expected, observed, pooled_e, pooled_o = [], [], 0.0, 0
    for key, p in joint.items():
        if p * samples >= 5:
            expected.append(p * samples)
            observed.append(counts.get(key, 0))
        else:
            pooled_e += p * samples
            pooled_o += counts.get(key, 0)
    if pooled_e > 0:
        expected.append(pooled_e)
        observed.append(pooled_o)
    statistic, p_value = stats.chisquare(np.array(observed), np.array(expected) * samples / sum(expected))
    assert p_value > 1e-3, (statistic, len(expected))


T1 = SamplingParams(temperature=1.0, max_tokens=K, ignore_eos=True)
T07_TOP_P = SamplingParams(temperature=0.7, top_p=0.8, max_tokens=K, ignore_eos=True)


def sampled_cases(methods: list[str], default_run: set[tuple[str, str]]) -> list[Any]:
    """Every (params, method) pair; those outside `default_run` are marked slow. Each case samples 16k
    requests (17-65 s here), so the default run keeps a few cases that hold every proposer (n-gram, masked
    and unmasked draft) and both sampling transforms between them, and `-m slow` runs the rest of the grid."""
    cases = []
    for params, params_id in ((T1, "t1"), (T07_TOP_P, "t0.7-top_p0.8")):
        for method in methods:
            marks = () if (params_id, method) in default_run else (pytest.mark.slow,)
            cases.append(pytest.param(params, method, id=f"{params_id}-{method}", marks=marks))
    return cases


@pytest.fixture(scope="module")
def peaky_speculator(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Random look-ahead heads over the 8-token models' 32-wide hidden state: distributions that differ from
    the target's, as a draft's do."""
    from switchyard.models.speculator import Speculator, SpeculatorConfig

    folder = tmp_path_factory.mktemp("peaky-speculator")
    torch.manual_seed(9)
    Speculator(SpeculatorConfig(hidden_size=32, vocab_size=VOCAB, num_steps=K)).save(folder)
    return folder


@pytest.mark.parametrize(
    ("params", "method"),
    sampled_cases(["ngram", "draft", "speculator"], {("t1", "ngram"), ("t1", "draft"), ("t1", "speculator")}),
)
def test_speculative_sampling_is_lossless(
    peaky_model: tuple[Path, list[int]],
    peaky_draft: Path,
    peaky_speculator: Path,
    params: SamplingParams,
    method: str,
) -> None:
    """Chi-square goodness of fit of 16k sampled 4-token prefixes against the exact law (power: a 2% total
    variation error gives a statistic far above the 0.1% critical value)."""
    folder, prompt = peaky_model
    proposer = peaky_speculator if method == "speculator" else peaky_draft
    # The speculator's own drafts, every time: the grammar case below mixes in prompt lookup (the default).
    counts, _ = sample_prefixes(folder, proposer, method, prompt, params, samples=16_000, lookup_below=0.0)
    assert_matches_law(counts, exact_joint(folder, prompt, params))


# A regex over the letters a-g (token ids 1-7; 0 is EOS): each of the first K positions forbids some tokens.
LETTERS = "abcdefg"
ALLOWED_LETTERS = ["abcd", "bcdefg", "aceg", "abdf"]
ALLOWED_IDS = [[LETTERS.index(letter) + 1 for letter in letters] for letters in ALLOWED_LETTERS]
LETTER_REGEX = "".join(f"[{letters}]" for letters in ALLOWED_LETTERS) + "[a-g]*"


def save_letter_tokenizer(folder: Path) -> None:
    """One token per letter a-g after "<eos>": a tokenizer xgrammar can compile the regex against."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {"<eos>": 0, **{letter: i + 1 for i, letter in enumerate(LETTERS)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<eos>"))
    backend.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    backend.decoder = decoders.Fuse()
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<eos>")
    tokenizer.save_pretrained(folder)


@pytest.fixture(scope="module")
def lettered_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[int]]:
    """The peaky target and draft again, with EOS at id 0 and the letter tokenizer, so grammars apply, and a
    prompt of the target's masked greedy continuations (the regex's K positions, five times over), so n-gram
    proposals often are what the target would say under the grammar."""
    folders = tmp_path_factory.mktemp("lettered-target"), tmp_path_factory.mktemp("lettered-draft")
    models = []
    for folder, seed, scale in zip(folders, (0, 5), (8.0, 4.0), strict=True):
        models.append(save_peaky(folder, seed=seed, scale=scale, eos_token_id=0))
        save_letter_tokenizer(folder)
    prompt = [1, 2, 3]
    with torch.no_grad():
        for _ in range(5):
            for allowed in ALLOWED_IDS:
                logits = models[0](torch.tensor([prompt])).logits[0, -1]
                prompt.append(allowed[int(logits[allowed].argmax())])
    return folders[0], folders[1], prompt


@pytest.mark.parametrize(
    ("params", "proposer"),
    sampled_cases(
        ["ngram", "draft", "unmasked draft", "speculator"],
        {("t0.7-top_p0.8", "draft"), ("t1", "unmasked draft"), ("t0.7-top_p0.8", "speculator")},
    ),
)
def test_speculative_sampling_under_a_grammar_is_lossless(
    lettered_pair: tuple[Path, Path, list[int]], peaky_speculator: Path, params: SamplingParams, proposer: str
) -> None:
    """Under a grammar the law is the target's masked distribution. A draft sampled under the grammar's mask
    proposes only allowed tokens. Unmasked (`spec_mask_drafts=False`) it proposes forbidden ones, which
    verification must reject, drawing from the residual; cutting the proposal before them skews the law (see
    `test_spec_decode.test_a_sampled_draft_the_grammar_forbids_is_verified_and_rejected`): this test fails that at p < 1e-200."""
    from switchyard.engine.structured.params import StructuredOutputsParams

    folder, draft, prompt = lettered_pair
    constrained = dataclasses.replace(params, structured_outputs=StructuredOutputsParams(regex=LETTER_REGEX))
    method, masked = proposer.split()[-1], proposer != "unmasked draft"
    model = peaky_speculator if method == "speculator" else draft
    counts, engine = sample_prefixes(
        folder, model, method, prompt, constrained, samples=16_000, mask_drafts=masked
    )
    assert engine.spec_decoder is not None
    forbidden = engine.spec_decoder.stats.forbidden_drafts
    assert forbidden > 1000 if proposer == "unmasked draft" else forbidden == 0
    assert_matches_law(counts, exact_joint(folder, prompt, params, ALLOWED_IDS))
