"""The LM head and a weighted cross-entropy in one pass over row chunks, gradients computed on the way.

With the prompt tokens in the loss (`TrainConfig.context_loss_weight`) every token of a step gets logits: a
[4600, 4096] float32 tensor that autograd keeps, reads again in log-softmax's backward, casts and zero-fills.
On the training CPU those passes over 75 MB, not the head's matrix products, were 0.15 s of a 1.25 s
main-model step. Here each chunk of rows is projected, its softmax taken, and the gradients of the hidden
states and the head computed while the chunk's logits are still in cache; autograd keeps only those two
gradients. The matrix products run in the autocast dtype when autocast is on (as the head's `F.linear`
would), the softmax in float32 (or the inputs' precision, if higher).
"""

from __future__ import annotations

from typing import Any

import torch

DEFAULT_CHUNK_ROWS = 256
"""256 rows of a 4k vocabulary are 4 MB of float32 logits: a chunk stays in the core's cache."""


def linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    target_weights: torch.Tensor | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
) -> torch.Tensor:
    """sum_i w_i x CE(hidden_i @ weight.T, targets_i) / sum_i w_i (the plain mean without weights).

    hidden: (N, H); weight: (V, H), the LM head; targets: (N,) token ids, every one a real target.
    """
    if hidden.ndim != 2 or weight.ndim != 2 or hidden.shape[1] != weight.shape[1]:
        raise ValueError(f"hidden {tuple(hidden.shape)} and head {tuple(weight.shape)} do not multiply")
    if targets.shape != hidden.shape[:1]:
        raise ValueError(f"{targets.numel()} targets for {hidden.shape[0]} rows")
    if target_weights is None:
        target_weights = torch.ones(hidden.shape[0], device=hidden.device)
    if target_weights.shape != targets.shape:
        raise ValueError(f"{target_weights.numel()} weights for {targets.numel()} targets")
    if chunk_rows <= 0:
        raise ValueError(f"chunk_rows must be positive, got {chunk_rows}")
    device = hidden.device.type
    compute_dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else weight.dtype
    needs_grad = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    with torch.autocast(device, enabled=False):
        return _LinearCrossEntropy.apply(
            hidden, weight, targets, target_weights, chunk_rows, compute_dtype, needs_grad
        )


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        targets: torch.Tensor,
        target_weights: torch.Tensor,
        chunk_rows: int,
        compute_dtype: torch.dtype,
        needs_grad: bool,
    ) -> torch.Tensor:
        precise = torch.promote_types(compute_dtype, torch.float32)
        scale = target_weights.to(precise) / target_weights.to(precise).sum()
        head = weight.to(compute_dtype)
        rows = hidden.to(compute_dtype)
        grad_hidden = torch.empty_like(rows)
        grad_weight = torch.zeros(weight.shape, dtype=precise, device=weight.device)
        loss = torch.zeros((), dtype=precise, device=hidden.device)
        for start in range(0, rows.shape[0], chunk_rows):
            chunk = slice(start, start + chunk_rows)
            logits = (rows[chunk] @ head.T).to(precise)
            chunk_targets = targets[chunk]
            log_normaliser = torch.logsumexp(logits, dim=-1, keepdim=True)
            target_logits = logits.gather(1, chunk_targets[:, None])
            loss += ((log_normaliser - target_logits).squeeze(1) * scale[chunk]).sum()
            if not needs_grad:
                continue
            # d loss / d logits = scale x (softmax - one_hot), built in the logits' own storage.
            grad_logits = logits.sub_(log_normaliser).exp_()
            grad_logits.scatter_add_(1, chunk_targets[:, None], torch.full_like(target_logits, -1.0))
            grad_logits.mul_(scale[chunk, None])
            grad_logits = grad_logits.to(compute_dtype)
            grad_hidden[chunk] = grad_logits @ head
            grad_weight += (grad_logits.T @ rows[chunk]).to(precise)
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.dtypes = (hidden.dtype, weight.dtype)
        return loss

    @staticmethod
    def backward(ctx: Any, grad_loss: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        grad_hidden, grad_weight = ctx.saved_tensors
        hidden_dtype, weight_dtype = ctx.dtypes
        return (
            (grad_hidden.to(grad_loss.dtype) * grad_loss).to(hidden_dtype),
            (grad_weight * grad_loss).to(weight_dtype),
            None,
            None,
            None,
            None,
            None,
        )
