"""Start the bundled models with a working copy circuit instead of waiting for one to emerge.

Every gated skill of the bundled model (tool arguments, JSON extraction, citing passages) is copying a span of
the prompt, and copying in a transformer is an *induction circuit*: a previous-token head in one layer writes
"the token before me" into the residual stream, and an induction head in the next layer attends from the
current token to the position right after an earlier occurrence of it and copies what it finds there. Learned
from scratch such circuits appear only after a long loss plateau, tens of millions of tokens for these shapes:
more than a 90-minute CPU budget buys. So `install_induction_circuit` writes one into layers 0 and 1 at
initialisation, and training starts past the plateau.

Two things keep it alive through training (each measured on the real corpus, where without them AdamW at lr
3e-3 erased the circuit within 30-50 steps): a `CircuitGuard` holds the wired weights at their values while
the rest of the model trains, and the embeddings start 50x larger than transformers' 0.02 std (the final norm's
gain 50x smaller, so logits are unchanged). The second matters because the guard fixes weights, not what they
read: the wired attention patterns depend on the constant and previous-token dims' share of the normalised
residual, and at 0.02 scale the rest of the stream outgrows them in a few dozen steps.

Residual layout (hidden size H): dims [0, H-65) carry the token embedding, [H-65, H-1) are kept empty
for the previous-token copies (the token one back in the first half, two back in the second), and dim H-1 is a
constant on every token (a bias the position-only queries and keys of the previous-token heads read). Those
heads use RoPE's fast pairs, whose angles only line up one (head 0) or two (head 1) positions back; the
induction head matches content on RoPE's slowest pairs, which barely rotate across a row, so the match works
at any distance. It matches two tokens of context, not one: the held-out names split into common pieces and
numbers into digits, where one token of context points at many earlier places. Set `ModelShape.rope_theta` high
(5e5) to have enough slow pairs.

Copying a span is half the job; the other half is finding where it starts ("weather in Cehace" ->
`{"city": "C`), which no fixed circuit knows. `InductionInit.locator_layers` gives heads in later layers the
same fixed copy path with free attention, so that is all they have to learn.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class InductionInit:
    """Strengths of the wired circuit; defaults were tuned on a repeated-random-tokens probe."""

    prev_weights: tuple[float, ...] = (
        0.589,
        0.062,
        0.025,
        0.055,
        0.056,
        0.035,
        0.03,
        0.032,
        0.046,
        0.059,
        0.012,
    )
    """Share of the previous-token score on each RoPE pair, fastest first. Chosen (a small linear programme over
    rope_theta 5e5, head_dim 64) to maximise the worst-case gap between one position back and any other
    offset up to 768: about 0.29 of the total, against 0.1 for equal shares."""
    prev_strength: float = 120.0
    """Total previous-token score in nats (before the ~0.29 gap share); ~10 nats of gap puts >95% of the
    attention on the previous token with 700 competitors."""
    match_pairs: int = 13
    """RoPE pairs (slowest first) the induction head matches token content on."""
    match_strength: float = 4.0
    bigram_dims: int = 10
    """Match dims (of the 2 x match_pairs) the induction head spends on the token two back: a second
    previous-token head (layer 0, head 1) writes it into the second half of the `prev` dims, and a source whose
    two preceding tokens equal the last two outscores one matching only the last. Names split into common
    pieces ("C" "e" "ha" "ce") and numbers into digits, and one token of context finds many earlier "e"s and
    "5"s; the head then wanders ("Baiececece"). 0 wires the one-token circuit only."""
    copy_strength: float = 16.0
    constant: float = 0.02
    """Value of the constant residual dim in every embedding row, at the 0.02 embedding scale (times
    `embedding_scale` in the model)."""
    residual_scale: float = 1.0
    """Other attention and MLP output projections start this much smaller, so the wired heads dominate."""
    embedding_scale: float = 50.0
    """Token embeddings (and the constant, and what the wired heads write) start this many times larger than
    transformers' 0.02-std init, the final norm's gain this many times smaller (same logits). At 50 the
    residual stream is ~1 per dim, which AdamW at lr 3e-3 moves only a few percent in tens of steps, and
    the circuit's attention patterns, which depend on the wired dims' share of the residual, keep working."""
    space_scale: float = 0.5
    """Norm of the shared "leading space" direction added to space-prefixed tokens (see `SpaceVariants`),
    relative to an embedding row's."""
    locator_layers: tuple[int, ...] = ()
    """Layers whose last kv head gets the copy value and its query heads the copy output, with queries and keys
    left to learn: "where does this value start in the prompt" is then the only thing to learn, and a slightly
    better placed attention already raises the right token's logit. Needs 2+ kv heads."""
    locator_strength: float = 8.0
    """Output scale of the locator heads (the induction head's is `copy_strength`)."""
    protect: bool = True
    """Keep the circuit's weights fixed during training (`CircuitGuard`); the rest of the model learns around
    it. Unprotected, AdamW rewrites it within ~30 steps (measured) before the model learns to use it."""
    seed: int = 0


@dataclass
class CircuitGuard:
    """The circuit's weight entries and their wired values, held fixed while everything else trains.

    `attach` zeroes the gradient of those entries (so they do not count in gradient clipping and Adam keeps no
    state for them); `restore`, called after each optimizer step, undoes what decoupled weight decay did to them.
    """

    entries: list[tuple[torch.nn.Parameter, torch.Tensor, torch.Tensor]]
    """(parameter, boolean mask of fixed entries, their values)."""

    def attach(self) -> list[Any]:
        return [param.register_hook(lambda grad, mask=mask: grad.masked_fill(mask, 0.0))
                for param, mask, _ in self.entries]  # fmt: skip

    @torch.no_grad()
    def restore(self) -> None:
        for param, mask, values in self.entries:
            param[mask] = values

    @property
    def num_fixed(self) -> int:
        return sum(int(mask.sum()) for _, mask, _ in self.entries)


@dataclass(frozen=True)
class SpaceVariants:
    """A byte-level BPE vocabulary's tokens that start with a space, and (spaced, bare) pairs like " Oslo" and
    "Oslo". A name is copied from a sentence (" Oslo") into JSON ("Oslo"): its first piece changes token, so
    an exact-token induction match never starts. Starting each pair with the same content, and every spaced
    token with one shared space direction outside what the wired heads read, makes the circuit match and copy
    either form, and leaves the model one direction to learn for "is a space due here"."""

    spaced: list[int]
    pairs: list[tuple[int, int]]

    @classmethod
    def from_vocab(cls, vocab: dict[str, int], space: str = "\u0120") -> SpaceVariants:
        spaced = sorted(i for t, i in vocab.items() if t.startswith(space) and len(t) > 1)
        pairs = sorted((i, vocab[t[1:]]) for t, i in vocab.items() if t.startswith(space) and t[1:] in vocab)
        return cls(spaced=spaced, pairs=pairs)


def _orthonormal_rows(rows: int, cols: int, generator: torch.Generator) -> torch.Tensor:
    matrix = torch.randn(cols, rows, generator=generator)
    q, _ = torch.linalg.qr(matrix)
    return q.T.contiguous()  # [rows, cols], orthonormal rows


@torch.no_grad()
def install_induction_circuit(
    model: Any, init: InductionInit | None = None, space_variants: SpaceVariants | None = None
) -> CircuitGuard | None:
    """Wire previous-token heads (layer 0, heads 0 and, with `bigram_dims`, 1), an induction head (layer 1,
    head 0) and any locator heads into a fresh transformers Llama model with tied embeddings. Needs head_dim >= 64, hidden > 2 x head_dim, 2+ layers.
    Returns the guard that keeps it fixed in training when `init.protect`, else None."""
    init = init or InductionInit()
    config = model.config
    hidden = config.hidden_size
    head_dim = getattr(config, "head_dim", None) or hidden // config.num_attention_heads
    half = head_dim // 2
    if config.num_hidden_layers < 2 or head_dim < 64 or hidden <= 2 * head_dim:
        raise ValueError("the induction circuit needs 2+ layers, head_dim >= 64 and hidden > 2 x head_dim")
    if init.bigram_dims > 0 and config.num_attention_heads < 2:
        raise ValueError("the bigram circuit needs a second attention head in layer 0")
    if not 0 <= init.bigram_dims <= min(2 * init.match_pairs, head_dim // 2):
        raise ValueError("bigram_dims must lie in [0, min(2 x match_pairs, head_dim / 2)]")
    if len(init.prev_weights) + init.match_pairs > half:
        raise ValueError("len(prev_weights) + match_pairs exceed the head's RoPE pairs")
    generator = torch.Generator().manual_seed(init.seed)
    const = hidden - 1
    prev = torch.arange(hidden - 1 - head_dim, hidden - 1)
    token = torch.arange(0, hidden - 1 - head_dim)
    # The previous token's content fills `prev`; with the bigram circuit, its first half, and the token two
    # back the second.
    prev1, prev2 = (
        (prev[: head_dim // 2], prev[head_dim // 2 :]) if init.bigram_dims > 0 else (prev, prev[:0])
    )

    embed = model.model.embed_tokens.weight
    embed.mul_(init.embedding_scale)
    model.model.norm.weight.fill_(1.0 / init.embedding_scale)
    constant, write = init.constant * init.embedding_scale, 0.02 * init.embedding_scale
    embed[:, prev] = 0.0
    embed[:, const] = constant
    for layer in model.model.layers:
        layer.self_attn.o_proj.weight.mul_(init.residual_scale)
        layer.mlp.down_proj.weight.mul_(init.residual_scale)

    inv_freq = model.model.rotary_emb.inv_freq.float()
    projection = _orthonormal_rows(head_dim, len(token), generator)  # token content -> head space
    token_values = torch.zeros(head_dim, hidden)  # both wired heads' values: the token's own content
    token_values[:, token] = projection
    if space_variants is not None and space_variants.spaced:
        spaced_ids, bare_ids = zip(*space_variants.pairs, strict=True) if space_variants.pairs else ((), ())
        rows = torch.tensor(space_variants.spaced)
        if spaced_ids:
            embed[torch.tensor(spaced_ids)[:, None], token[None, :]] = embed[
                torch.tensor(bare_ids)[:, None], token
            ]
        direction = torch.randn(len(token), generator=generator)
        direction -= projection.T @ (projection @ direction)  # invisible to the wired heads
        row_norm = float(embed[:, token].norm(dim=1).mean())
        embed[rows[:, None], token[None, :]] += direction * (init.space_scale * row_norm / direction.norm())
    head0 = slice(0, head_dim)  # query head 0 and the kv head it reads (kv head 0)
    group = config.num_attention_heads // config.num_key_value_heads

    # Layer 0, query head 0 / kv head 0: attend one position back, copy the token into the `prev` dims.
    attn = model.model.layers[0].self_attn
    attn.q_proj.weight[head0] = 0.0
    attn.k_proj.weight[head0] = 0.0
    # score(i, j) = sum over pairs of s^2 * c^2 * cos((j - i + 1) * theta) / sqrt(head_dim): peaks at j = i - 1.
    const_normed = constant / float(
        embed[:, token].pow(2).mean().mul(len(token) / hidden).add(constant**2 / hidden).sqrt()
    )

    def prev_scale(share: float) -> float:
        return math.sqrt(init.prev_strength * share * math.sqrt(head_dim)) / const_normed

    for pair, share in enumerate(init.prev_weights):
        scale, theta = prev_scale(share), float(inv_freq[pair])
        attn.q_proj.weight[pair, const] = scale
        attn.k_proj.weight[pair, const] = scale * math.cos(theta)
        attn.k_proj.weight[pair + half, const] = scale * math.sin(theta)
    attn.v_proj.weight[head0] = token_values
    attn.o_proj.weight[:, head0] = 0.0
    attn.o_proj.weight[prev1, head0.start + torch.arange(len(prev1))] = write
    head1 = slice(head_dim, 2 * head_dim)
    kv1 = slice((1 // group) * head_dim, (1 // group + 1) * head_dim)  # the kv head query head 1 reads
    if init.bigram_dims > 0:
        # Query head 1: the same key, the query turned back one more position, so it peaks at j = i - 2.
        attn.q_proj.weight[head1] = 0.0
        for pair, share in enumerate(init.prev_weights):
            scale, theta = prev_scale(share), float(inv_freq[pair])
            attn.q_proj.weight[head_dim + pair, const] = scale * math.cos(theta)
            attn.q_proj.weight[head_dim + pair + half, const] = -scale * math.sin(theta)
        attn.k_proj.weight[kv1] = attn.k_proj.weight[head0]
        attn.v_proj.weight[kv1] = token_values
        attn.o_proj.weight[:, head1] = 0.0
        attn.o_proj.weight[prev2, head1.start + torch.arange(len(prev2))] = write

    # Layer 1, query head 0 / kv head 0: query = this token's content, key = the previous token's content,
    # both on the slowest RoPE pairs; value = the attended token's content, written back as itself.
    attn = model.model.layers[1].self_attn
    slow = list(range(half - init.match_pairs, half))
    match_dims = torch.tensor(slow + [p + half for p in slow])
    unigram = match_dims[: len(match_dims) - init.bigram_dims]
    bigram = match_dims[len(match_dims) - init.bigram_dims :]
    strength = init.match_strength
    q_block = torch.zeros(head_dim, hidden)
    k_block = torch.zeros(head_dim, hidden)
    # this token's content <-> the source's previous token
    q_block[unigram[:, None], token[None, :]] = strength * projection[: len(unigram)]
    k_block[unigram, prev1[: len(unigram)]] = strength
    # this position's previous token <-> the token two before the source
    q_block[bigram, prev1[: len(bigram)]] = strength
    k_block[bigram, prev2[: len(bigram)]] = strength
    attn.q_proj.weight[head0] = q_block
    attn.k_proj.weight[head0] = k_block
    attn.v_proj.weight[head0] = token_values
    attn.o_proj.weight[:, head0] = init.copy_strength * write * token_values.T
    locators = _install_locators(model, init, token_values, write, head_dim)
    if not init.protect:
        return None

    # Fixed: the embedding's prev and constant dims; everything layer 0 writes into them (only its wired head
    # writes into prev); the norm gains the wired heads read those dims through; both wired heads' weights.
    layer0, layer1 = model.model.layers[0], model.model.layers[1]
    reserved = torch.cat([prev, torch.tensor([const])])
    layer0.mlp.down_proj.weight[reserved] = 0.0
    layer0.self_attn.o_proj.weight[reserved] = 0.0
    layer0.self_attn.o_proj.weight[prev1, head0.start + torch.arange(len(prev1))] = write
    if init.bigram_dims > 0:
        layer0.self_attn.o_proj.weight[prev2, head1.start + torch.arange(len(prev2))] = write
    masks: dict[int, tuple[torch.nn.Parameter, torch.Tensor]] = {}

    def fix(param: torch.nn.Parameter, index: Any) -> None:
        _, mask = masks.setdefault(id(param), (param, torch.zeros_like(param, dtype=torch.bool)))
        mask[index] = True

    fix(embed, (slice(None), reserved))
    fix(layer0.mlp.down_proj.weight, reserved)
    fix(layer0.self_attn.o_proj.weight, reserved)
    fix(layer0.input_layernorm.weight, const)
    fix(layer1.input_layernorm.weight, reserved)
    for layer in (layer0, layer1):
        for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
            fix(proj.weight, head0)
        fix(layer.self_attn.o_proj.weight, (slice(None), head0))
    if init.bigram_dims > 0:
        fix(layer0.self_attn.q_proj.weight, head1)
        fix(layer0.self_attn.k_proj.weight, kv1)
        fix(layer0.self_attn.v_proj.weight, kv1)
        fix(layer0.self_attn.o_proj.weight, (slice(None), head1))
    for layer, kv_rows, q_columns in locators:
        fix(layer.self_attn.v_proj.weight, kv_rows)
        fix(layer.self_attn.o_proj.weight, (slice(None), q_columns))
    return CircuitGuard([(param, mask, param.detach()[mask].clone()) for param, mask in masks.values()])


@torch.no_grad()
def _install_locators(
    model: Any,
    init: InductionInit,
    token_values: torch.Tensor,
    write: float,
    head_dim: int,
) -> list[tuple[Any, slice, slice]]:
    """Copy-valued heads with learnable attention (`InductionInit.locator_layers`); returns for each layer the
    v_proj rows and o_proj columns the guard holds."""
    config = model.config
    kv_heads, heads = config.num_key_value_heads, config.num_attention_heads
    if init.locator_layers and kv_heads < 2:
        raise ValueError("locator heads need 2+ kv heads (kv head 0 of layers 0-1 is the wired circuit)")
    group = heads // kv_heads
    kv = kv_heads - 1
    kv_rows = slice(kv * head_dim, (kv + 1) * head_dim)
    q_columns = slice(kv * group * head_dim, (kv + 1) * group * head_dim)
    installed = []
    for index in init.locator_layers:
        if not 1 < index < config.num_hidden_layers:
            raise ValueError(
                f"locator layer {index} must come after the wired layers 0-1 and exist in the model"
            )
        layer = model.model.layers[index]
        layer.self_attn.v_proj.weight[kv_rows] = token_values
        layer.self_attn.o_proj.weight[:, q_columns] = (
            init.locator_strength * write * token_values.T.repeat(1, group)
        )
        installed.append((layer, kv_rows, q_columns))
    return installed
