"""The fused, chunked LM head + cross-entropy against the plain `F.linear` + `F.cross_entropy` it replaces."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from switchyard_training.chunked_loss import linear_cross_entropy


def _inputs(rows: int = 37, hidden: int = 16, vocab: int = 50, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    states = torch.randn(rows, hidden, generator=generator, dtype=torch.float64, requires_grad=True)
    head = torch.randn(vocab, hidden, generator=generator, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, vocab, (rows,), generator=generator)
    weights = torch.where(torch.rand(rows, generator=generator) < 0.3, 1.0, 0.1).double()
    return states, head, targets, weights


def _reference(states, head, targets, weights=None):
    losses = F.cross_entropy(F.linear(states, head), targets, reduction="none")
    if weights is None:
        return losses.mean()
    return (losses * weights).sum() / weights.sum()


@pytest.mark.parametrize("chunk_rows", [1, 5, 37, 256])
@pytest.mark.parametrize("weighted", [False, True])
def test_matches_linear_then_cross_entropy(chunk_rows: int, weighted: bool) -> None:
    states, head, targets, weights = _inputs()
    expected = _reference(states, head, targets, weights if weighted else None)
    grad_states, grad_head = torch.autograd.grad(expected, (states, head))
    got = linear_cross_entropy(states, head, targets, weights if weighted else None, chunk_rows)
    got_states, got_head = torch.autograd.grad(got, (states, head))
    assert got.item() == pytest.approx(expected.item(), rel=1e-10)
    torch.testing.assert_close(got_states, grad_states, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(got_head, grad_head, rtol=1e-9, atol=1e-12)


def test_without_gradients_only_the_loss_is_computed() -> None:
    states, head, targets, weights = _inputs()
    with torch.no_grad():
        got = linear_cross_entropy(states, head, targets, weights, chunk_rows=5)
    assert got.item() == pytest.approx(_reference(states, head, targets, weights).item(), rel=1e-10)
    assert not got.requires_grad


def test_gradient_scales_with_the_upstream_gradient() -> None:
    states, head, targets, _ = _inputs()
    (once,) = torch.autograd.grad(linear_cross_entropy(states, head, targets), (states,))
    (thrice,) = torch.autograd.grad(3.0 * linear_cross_entropy(states, head, targets), (states,))
    torch.testing.assert_close(thrice, 3.0 * once)


def test_under_autocast_matches_the_autocast_head() -> None:
    """The head's products in bf16, the softmax in float32: as `F.linear` under autocast, then `.float()`."""
    states, head, targets, weights = (t.float() if t.is_floating_point() else t for t in _inputs(vocab=300))
    states = states.detach().requires_grad_()
    head = head.detach().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = F.linear(states, head)
        assert logits.dtype == torch.bfloat16
        losses = F.cross_entropy(logits.float(), targets, reduction="none")
        expected = (losses * weights).sum() / weights.sum()
        got = linear_cross_entropy(states, head, targets, weights, chunk_rows=8)
    assert got.dtype == torch.float32
    assert got.item() == pytest.approx(expected.item(), rel=1e-3)
    expected_grads = torch.autograd.grad(expected, (states, head))
    got_grads = torch.autograd.grad(got, (states, head))
    for ours, theirs in zip(got_grads, expected_grads, strict=True):
        assert ours.dtype == torch.float32
        torch.testing.assert_close(ours, theirs, rtol=0.05, atol=2e-3)


def test_the_tied_embedding_gets_both_gradients() -> None:
    """The bundled models tie the head to the input embedding: both uses add into one gradient."""
    embedding = torch.nn.Embedding(20, 8).double()
    ids = torch.tensor([1, 4, 4, 7, 19])
    targets = torch.tensor([4, 4, 7, 19, 2])
    expected = _reference(embedding(ids), embedding.weight, targets)
    (expected_grad,) = torch.autograd.grad(expected, (embedding.weight,))
    got = linear_cross_entropy(embedding(ids), embedding.weight, targets, chunk_rows=2)
    (got_grad,) = torch.autograd.grad(got, (embedding.weight,))
    torch.testing.assert_close(got_grad, expected_grad)


def test_bad_shapes_raise() -> None:
    states, head, targets, weights = _inputs()
    with pytest.raises(ValueError, match="do not multiply"):
        linear_cross_entropy(states, head[:, :-1], targets)
    with pytest.raises(ValueError, match="targets"):
        linear_cross_entropy(states, head, targets[:-1])
    with pytest.raises(ValueError, match="weights"):
        linear_cross_entropy(states, head, targets, weights[:-1])
    with pytest.raises(ValueError, match="chunk_rows"):
        linear_cross_entropy(states, head, targets, chunk_rows=0)
