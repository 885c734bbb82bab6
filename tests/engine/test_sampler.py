"""Sampler tests on random logits: each stage against a plain per-row reference, draws against the distribution."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from switchyard.engine.sampler import (
    Sampler,
    SamplingBatch,
    SamplingRow,
    adjust_logits,
    check_token_ids,
    new_generator,
)
from switchyard.engine.sampling_params import SamplingParams
from switchyard.errors import InvalidRequestError

V = 16
EOS = V - 1


def make_row(
    params: SamplingParams,
    prompt: Sequence[int] = (),
    output: Sequence[int] = (),
    eos: tuple[int, ...] = (EOS,),
    bad_words: Sequence[tuple[int, ...]] = (),
) -> SamplingRow:
    generator = new_generator(params.seed, "cpu") if params.seed is not None else None
    return SamplingRow(params, list(prompt), list(output), generator, eos, tuple(bad_words))


def build(rows: Sequence[SamplingRow], vocab_size: int = V) -> SamplingBatch:
    return SamplingBatch.build(rows, vocab_size, "cpu")


def random_logits(rows: int, vocab_size: int = V, seed: int = 0, scale: float = 3.0) -> torch.Tensor:
    return torch.randn(rows, vocab_size, generator=torch.Generator().manual_seed(seed)) * scale


# A deliberately plain reference, one row at a time in float64, written straight from the formulas.


def reference_adjust(logits: torch.Tensor, row: SamplingRow) -> torch.Tensor:
    x = logits.double().clone()
    p = row.params
    for token, bias in (p.logit_bias or {}).items():
        x[token] += bias
    if len(row.output_token_ids) < p.min_tokens:
        for token in (*row.eos_token_ids, *p.stop_token_ids):
            x[token] = -math.inf
    if p.allowed_token_ids is not None:
        for token in range(len(x)):
            if token not in p.allowed_token_ids:
                x[token] = -math.inf
    before_bans = x.clone()
    output = list(row.output_token_ids)
    for word in row.bad_words_token_ids:
        *head, last = word
        if not head or output[len(output) - len(head) :] == head:
            x[last] = -math.inf
    if (x == -math.inf).all():
        x = before_bans
    if p.repetition_penalty != 1.0:
        for token in set(row.prompt_token_ids) | set(row.output_token_ids):
            x[token] = x[token] / p.repetition_penalty if x[token] > 0 else x[token] * p.repetition_penalty
    for token in set(row.output_token_ids):
        count = list(row.output_token_ids).count(token)
        x[token] -= p.frequency_penalty * count + p.presence_penalty
    return x


def reference_probs(logits: torch.Tensor, row: SamplingRow) -> torch.Tensor:
    p = row.params
    x = reference_adjust(logits, row)
    if p.temperature == 0:
        return torch.nn.functional.one_hot(x.argmax(), len(x)).double()
    x = x / p.temperature
    if 0 < p.top_k < len(x):
        kth = sorted(x.tolist(), reverse=True)[p.top_k - 1]
        x[x < kth] = -math.inf
    probs = torch.softmax(x, dim=0)
    if p.top_p < 1.0:
        kept, mass = [], 0.0
        for token in sorted(range(len(x)), key=lambda t: -probs[t].item()):
            kept.append(token)
            mass += probs[token].item()
            if mass >= p.top_p:
                break
        mask = torch.ones(len(x), dtype=torch.bool)
        mask[kept] = False
        probs[mask] = 0.0
        probs /= probs.sum()
    if p.min_p > 0:
        probs[probs < p.min_p * probs.max()] = 0.0
        probs /= probs.sum()
    return probs


def draw_counts(logits_row: torch.Tensor, params: SamplingParams, draws: int, seed: int = 0) -> torch.Tensor:
    """Sample `draws` times from one row's logits in a single batched call and count each token."""
    rows = [make_row(params)] * draws
    sampler = Sampler(generator=torch.Generator().manual_seed(seed))
    batch = build(rows, vocab_size=logits_row.shape[-1])
    tokens = sampler(logits_row.expand(draws, -1).clone(), batch).token_ids
    return torch.bincount(tokens, minlength=logits_row.shape[-1])


def test_greedy_rows_take_argmax_and_are_one_hot() -> None:
    logits = random_logits(8)
    rows = [make_row(SamplingParams(temperature=0))] * 8
    out = Sampler()(logits, build(rows))
    assert torch.equal(out.token_ids, logits.argmax(dim=1))
    probs = Sampler().probabilities(logits, build(rows))
    assert torch.equal(probs, torch.nn.functional.one_hot(logits.argmax(dim=1), V).float())


def test_tiny_temperature_is_greedy_and_mixed_batches_keep_greedy_rows_exact() -> None:
    logits = random_logits(6, seed=1)
    params = [SamplingParams(temperature=t) for t in (0.0, 1.0, 1e-7, 0.8, 0.0, 1.5)]
    out = Sampler()(logits, build([make_row(p) for p in params]))
    for i in (0, 2, 4):
        assert out.token_ids[i] == logits[i].argmax()


def test_temperature_scales_logits() -> None:
    logits = random_logits(3, seed=2)
    rows = [make_row(SamplingParams(temperature=t)) for t in (0.5, 1.0, 2.0)]
    probs = Sampler().probabilities(logits, build(rows))
    expected = torch.stack([torch.softmax(logits[i] / t, dim=0) for i, t in enumerate((0.5, 1.0, 2.0))])
    torch.testing.assert_close(probs, expected)


def test_top_k_only_ever_yields_the_k_largest() -> None:
    logits_row = random_logits(1, seed=3, scale=0.5)[0]
    counts = draw_counts(logits_row, SamplingParams(top_k=3), draws=3000)
    top3 = set(logits_row.topk(3).indices.tolist())
    assert set(counts.nonzero().flatten().tolist()) == top3


@pytest.mark.parametrize(
    ("top_p", "kept"),
    [(0.4, [0]), (0.75, [0, 1]), (0.85, [0, 1, 2]), (0.99, [0, 1, 2, 3]), (1.0, [0, 1, 2, 3])],
)
def test_top_p_keeps_the_exact_nucleus(top_p: float, kept: list[int]) -> None:
    dist = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = dist.log()[None]
    probs = Sampler().probabilities(logits, build([make_row(SamplingParams(top_p=top_p))], vocab_size=4))
    expected = torch.zeros(4)
    expected[kept] = dist[kept] / dist[kept].sum()
    torch.testing.assert_close(probs[0], expected)


@pytest.mark.parametrize(
    ("min_p", "kept"), [(0.2, [0, 1, 2]), (0.5, [0, 1]), (0.9, [0]), (0.0, [0, 1, 2, 3])]
)
def test_min_p_drops_tokens_below_the_scaled_maximum(min_p: float, kept: list[int]) -> None:
    dist = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = dist.log()[None]
    probs = Sampler().probabilities(logits, build([make_row(SamplingParams(min_p=min_p))], vocab_size=4))
    expected = torch.zeros(4)
    expected[kept] = dist[kept] / dist[kept].sum()
    torch.testing.assert_close(probs[0], expected)


def test_top_k_then_top_p_renormalises_between_stages() -> None:
    dist = torch.tensor([0.4, 0.3, 0.2, 0.1])
    logits = dist.log()[None]
    # After top_k=3 the mass is [4/9, 3/9, 2/9]; top_p=0.7 then needs the first two (7/9 >= 0.7).
    params = SamplingParams(top_k=3, top_p=0.7)
    probs = Sampler().probabilities(logits, build([make_row(params)], vocab_size=4))
    torch.testing.assert_close(probs[0], torch.tensor([4 / 7, 3 / 7, 0.0, 0.0]))


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(),
        SamplingParams(temperature=0.6, top_k=5),
        SamplingParams(temperature=1.3, top_p=0.9, min_p=0.02),
    ],
    ids=["plain", "temperature+top_k", "top_p+min_p"],
)
def test_empirical_frequencies_match_the_distribution(params: SamplingParams) -> None:
    draws = 20000
    logits_row = random_logits(1, vocab_size=8, seed=4, scale=1.0)[0]
    expected = reference_probs(logits_row, make_row(params)) * draws
    counts = draw_counts(logits_row, params, draws, seed=5).double()
    support = expected > 0
    assert counts[~support].sum() == 0
    chi_square = (((counts - expected) ** 2)[support] / expected[support]).sum().item()
    # 99.9th percentile of chi-square with at most 7 degrees of freedom is 24.3.
    assert chi_square < 24.3


def test_penalties_match_the_per_row_formulas() -> None:
    logits = random_logits(5, seed=6)
    prompt = [1, 2, 2, 3, 9]
    output = [3, 4, 4, 4, 9, 9]
    rows = [
        make_row(SamplingParams(repetition_penalty=1.7), prompt, output),
        make_row(SamplingParams(repetition_penalty=0.6), prompt, output),
        make_row(SamplingParams(presence_penalty=1.5, frequency_penalty=0.5), prompt, output),
        make_row(
            SamplingParams(repetition_penalty=1.2, presence_penalty=-0.7, frequency_penalty=-1.1),
            prompt,
            output,
        ),
        make_row(SamplingParams(), prompt, output),
    ]
    adjusted = adjust_logits(logits, build(rows))
    expected = torch.stack([reference_adjust(logits[i], row) for i, row in enumerate(rows)]).float()
    torch.testing.assert_close(adjusted, expected)
    assert torch.equal(adjusted[4], logits[4])


def test_logit_bias_is_added_and_steers_greedy_choice() -> None:
    logits = random_logits(2, seed=7)
    low = int(logits[0].argmin())
    top = int(logits[1].argmax())
    rows = [
        make_row(SamplingParams(temperature=0, logit_bias={low: 100.0})),
        make_row(SamplingParams(temperature=0, logit_bias={top: -100.0, 0: 0.5})),
    ]
    batch = build(rows)
    adjusted = adjust_logits(logits, batch)
    expected = logits.clone()
    expected[0, low] += 100.0
    expected[1, top] -= 100.0
    expected[1, 0] += 0.5
    torch.testing.assert_close(adjusted, expected)
    tokens = Sampler()(logits, batch).token_ids
    assert tokens[0] == low
    assert tokens[1] != top


@pytest.mark.parametrize("ignore_eos", [False, True])
def test_min_tokens_suppresses_eos_and_stop_ids_until_reached(ignore_eos: bool) -> None:
    logits = random_logits(3, seed=8)
    params = SamplingParams(min_tokens=2, stop_token_ids=[7], ignore_eos=ignore_eos)
    rows = [make_row(params, output=[]), make_row(params, output=[1]), make_row(params, output=[1, 2])]
    adjusted = adjust_logits(logits, build(rows))
    for i in (0, 1):
        assert adjusted[i, EOS] == -math.inf
        assert adjusted[i, 7] == -math.inf
    assert torch.equal(adjusted[2], logits[2])
    # Even when EOS dominates, a suppressed row never samples it.
    many = random_logits(400, seed=13)
    many[:, EOS] = 50.0
    tokens = Sampler()(many, build(rows[:2] * 200)).token_ids
    assert not torch.isin(tokens, torch.tensor([EOS, 7])).any()


def test_allowed_token_ids_are_the_only_ones_sampled() -> None:
    allowed = [2, 5, 11]
    logits = random_logits(300, seed=21)
    logits[:, 7] = 40.0  # a dominant token outside the list
    rows = [make_row(SamplingParams(temperature=1.0, allowed_token_ids=allowed))] * 299
    rows.append(make_row(SamplingParams(temperature=0, allowed_token_ids=allowed)))
    tokens = Sampler(torch.Generator().manual_seed(0))(logits, build(rows)).token_ids
    assert set(tokens.tolist()) <= set(allowed)
    assert len(set(tokens[:-1].tolist())) > 1, "random rows should still vary among the allowed ids"
    assert tokens[-1] == allowed[int(logits[-1, allowed].argmax())]
    unrestricted = make_row(SamplingParams(temperature=0))
    assert Sampler()(logits[:1], build([unrestricted])).token_ids[0] == 7


def test_bad_words_ban_a_last_token_only_after_the_rest_of_the_word() -> None:
    logits = torch.zeros(3, V)
    logits[:, 9] = 10.0
    logits[:, 4] = 5.0
    words = [(3, 9), (6,)]
    rows = [
        make_row(SamplingParams(temperature=0), output=[1, 3], bad_words=words),  # "3 9" would complete
        make_row(SamplingParams(temperature=0), output=[3, 1], bad_words=words),  # not after 3: 9 is fine
        make_row(SamplingParams(temperature=0), output=[], bad_words=[(9,)]),  # one token: always banned
    ]
    assert Sampler()(logits, build(rows)).token_ids.tolist() == [4, 9, 4]
    logits[:, 6] = 50.0
    assert Sampler()(logits[:1], build(rows[:1])).token_ids.tolist() == [4]


def test_a_ban_that_would_leave_nothing_to_sample_yields_to_the_grammar() -> None:
    # A grammar (already applied to the logits) allows only token 9, which a bad word bans.
    logits = torch.full((2, V), -math.inf)
    logits[:, 9] = 0.0
    logits[1, 4] = -1.0
    rows = [make_row(SamplingParams(temperature=0.8), bad_words=[(9,)]) for _ in range(2)]
    probs = Sampler().probabilities(logits, build(rows))
    assert probs[0, 9] == 1.0, "the grammar's only token survives the ban"
    assert probs[1, 4] == 1.0 and probs[1, 9] == 0.0, "with another token allowed the ban holds"


def seeded_tokens(position: int, others: list[SamplingParams], steps: int = 6) -> list[int]:
    """Sample a seeded row for `steps` steps at `position` among rows built from `others`."""
    target = make_row(SamplingParams(seed=1234, temperature=0.9, top_p=0.95))
    others_rows = [make_row(p) for p in others]
    tokens = []
    for step in range(steps):
        rows = [*others_rows[:position], target, *others_rows[position:]]
        logits = random_logits(len(rows), seed=100 + step, scale=1.0)
        logits[position] = random_logits(1, seed=step, scale=1.0)[0]
        tokens.append(int(Sampler()(logits, build(rows)).token_ids[position]))
    return tokens


def test_seeded_rows_are_reproducible_whatever_the_batch() -> None:
    alone = seeded_tokens(0, [])
    crowd = [
        SamplingParams(),
        SamplingParams(temperature=0),
        SamplingParams(seed=7, top_k=4),
        SamplingParams(temperature=0.5, repetition_penalty=1.3),
    ]
    assert seeded_tokens(0, crowd) == alone
    assert seeded_tokens(2, crowd) == alone
    assert seeded_tokens(4, crowd) == alone
    assert seeded_tokens(1, [SamplingParams(temperature=0)] * 3) == alone
    assert len(set(alone)) > 1  # the draws really are random, not a constant argmax


def test_seeded_rows_draw_from_their_own_stream() -> None:
    def sequence(seed: int) -> list[int]:
        row = make_row(SamplingParams(seed=seed))
        flat = torch.zeros(1, V)  # every token equally likely: only the noise decides
        return [int(Sampler()(flat, build([row])).token_ids[0]) for _ in range(30)]

    first = sequence(1)
    assert sequence(1) == first
    assert sequence(2) != first
    assert len(set(first)) > 5


def test_unseeded_rows_follow_the_sampler_generator() -> None:
    logits = random_logits(50, seed=9, scale=0.5)
    batch = build([make_row(SamplingParams())] * 50)
    first = Sampler(torch.Generator().manual_seed(3))(logits, batch).token_ids
    second = Sampler(torch.Generator().manual_seed(3))(logits, batch).token_ids
    assert torch.equal(first, second)


def test_logprobs_are_raw_log_softmax_at_the_sampled_token() -> None:
    logits = random_logits(4, seed=10)
    rows = [
        make_row(SamplingParams(logprobs=None, temperature=0.5, repetition_penalty=1.5), output=[1, 2]),
        make_row(SamplingParams(logprobs=0, top_k=2)),
        make_row(SamplingParams(logprobs=5, temperature=0, logit_bias={3: 10.0})),
        make_row(SamplingParams(logprobs=2, top_p=0.5, seed=1)),
    ]
    out = Sampler()(logits, build(rows))
    raw = torch.log_softmax(logits, dim=1)
    assert (out.logprobs <= 0).all()
    torch.testing.assert_close(out.logprobs, raw.gather(1, out.token_ids[:, None]).squeeze(1))
    assert out.top_logprobs is not None
    values, ids = out.top_logprobs
    assert values.shape == ids.shape == (4, 5)
    assert (values[:, :-1] >= values[:, 1:]).all()
    expected = torch.topk(raw, 5, dim=1)
    torch.testing.assert_close(values, expected.values)
    assert torch.equal(ids, expected.indices)


def test_logprobs_are_skipped_when_no_row_asks() -> None:
    """A log-softmax over the vocabulary is costly: with no row asking, none is computed (NaN)."""
    logits = random_logits(3, seed=11)
    out = Sampler()(logits, build([make_row(SamplingParams())] * 3))
    assert out.top_logprobs is None
    assert torch.isnan(out.logprobs).all()
    asked = Sampler()(logits, build([make_row(SamplingParams(logprobs=0))] * 3))
    torch.testing.assert_close(
        asked.logprobs, torch.log_softmax(logits, dim=1).gather(1, asked.token_ids[:, None]).squeeze(1)
    )


def test_input_logits_are_left_untouched() -> None:
    logits = random_logits(2, seed=12)
    before = logits.clone()
    params = SamplingParams(temperature=0.5, top_k=3, top_p=0.8, min_p=0.1, repetition_penalty=2.0)
    batch = build([make_row(params, prompt=[1, 2], output=[3])] * 2)
    Sampler()(logits, batch)
    Sampler().probabilities(logits, batch)
    assert torch.equal(logits, before)


def test_empty_batch() -> None:
    out = Sampler()(torch.zeros(0, V), build([]))
    assert out.token_ids.shape == (0,)
    assert out.logprobs.shape == (0,)


def test_bad_inputs_raise_typed_errors() -> None:
    with pytest.raises(InvalidRequestError) as info:
        build([make_row(SamplingParams(logit_bias={V: 1.0}))])
    assert info.value.param == "logit_bias"
    with pytest.raises(InvalidRequestError):
        check_token_ids(SamplingParams(stop_token_ids=[V + 3]), V)
    check_token_ids(SamplingParams(stop_token_ids=[1], logit_bias={2: 1.0}), V)
    with pytest.raises(InvalidRequestError) as info:
        check_token_ids(SamplingParams(allowed_token_ids=[1, V]), V)
    assert info.value.param == "allowed_token_ids"
    with pytest.raises(ValueError, match="generator"):
        build([SamplingRow(SamplingParams(seed=1), [], [], None)])
    with pytest.raises(ValueError, match="shape"):
        Sampler()(torch.zeros(2, V), build([make_row(SamplingParams())]))


token_ids = st.integers(0, V - 1)
params_strategy = st.builds(
    SamplingParams,
    temperature=st.one_of(st.just(0.0), st.floats(0.2, 2.0)),
    top_k=st.integers(0, V),
    top_p=st.one_of(st.just(1.0), st.floats(0.05, 1.0)),
    min_p=st.one_of(st.just(0.0), st.floats(0.0, 0.6)),
    repetition_penalty=st.one_of(st.just(1.0), st.floats(0.5, 2.0)),
    presence_penalty=st.floats(-2.0, 2.0),
    frequency_penalty=st.floats(-2.0, 2.0),
    logit_bias=st.one_of(st.none(), st.dictionaries(token_ids, st.floats(-5.0, 5.0), max_size=3)),
    min_tokens=st.integers(0, 3),
    stop_token_ids=st.lists(token_ids, max_size=2),
    max_tokens=st.just(16),
    allowed_token_ids=st.one_of(st.none(), st.lists(token_ids, min_size=1, max_size=5)),
)
row_strategy = st.builds(
    make_row,
    params_strategy,
    prompt=st.lists(token_ids, max_size=6),
    output=st.lists(st.integers(0, 3), max_size=4),  # few ids, so bad words' heads often match
    bad_words=st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=3).map(tuple), max_size=3),
)


def clear_of_boundaries(logits: torch.Tensor, row: SamplingRow) -> bool:
    """False when top-p or min-p sits so close to a threshold that float32 and float64 may disagree."""
    p = row.params
    if p.temperature == 0:
        return True
    x = reference_adjust(logits, row) / p.temperature
    if 0 < p.top_k < len(x):
        x[x < sorted(x.tolist(), reverse=True)[p.top_k - 1]] = -math.inf
    probs = torch.softmax(x, dim=0).sort(descending=True).values
    if p.top_p < 1.0 and (probs.cumsum(0) - p.top_p).abs().min() < 1e-4:
        return False
    ratios = probs / probs[0]
    return not (p.min_p > 0 and (ratios - p.min_p).abs().min() < 1e-4)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(row_strategy, min_size=1, max_size=5), seed=st.integers(0, 2**16))
def test_probabilities_are_normalised_and_respect_every_filter(rows: list[SamplingRow], seed: int) -> None:
    logits = random_logits(len(rows), seed=seed)
    # allowed_token_ids that min_tokens wholly suppresses leave nothing to sample (the engine refuses them).
    assume(all(reference_adjust(logits[i], row).isfinite().any() for i, row in enumerate(rows)))
    assume(all(clear_of_boundaries(logits[i], row) for i, row in enumerate(rows)))
    probs = Sampler().probabilities(logits, build(rows))
    torch.testing.assert_close(probs.sum(dim=1), torch.ones(len(rows)))
    for i, row in enumerate(rows):
        expected = reference_probs(logits[i], row).float()
        assert (probs[i][expected == 0] == 0).all()
        torch.testing.assert_close(probs[i], expected, atol=1e-5, rtol=1e-4)
    tokens = Sampler()(logits, build(rows)).token_ids
    assert (probs.gather(1, tokens[:, None]) > 0).all()
