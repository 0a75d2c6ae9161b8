"""``log_softmax(logits)[row, target[row]]`` as one autograd node: the log-probability of each row's target.

The adaptive softmax needs, for each row, only its target's log-probability. Computing it as
``F.log_softmax(logits).gather(1, target)`` writes the whole log-softmax in the forward pass and,
in the backward pass, a zero tensor of the logits' size for ``gather`` to scatter into and a third
for the log-softmax's gradient: on a tail cluster of 40,000 words that is a few hundred megabytes
of memory traffic per step for a few thousand numbers. :func:`target_log_prob` keeps the float32
logits and their log-sum-exp instead, and its backward turns the kept logits into the gradient in
place: ``g * (onehot(target) - softmax(logits))``.

The arithmetic is float32 (or the logits' wider type) (bfloat16 under mixed precision: a bfloat16
log-softmax would round every log-probability to 3 significant digits); the gradient is returned in
the logits' type.
"""

from __future__ import annotations

from typing import Any, Optional

import torch


class _TargetLogProb(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        # at least float32; log_softmax writes a new tensor, which backward then overwrites
        log_probs = torch.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=1)
        index = target.unsqueeze(1)
        ctx.save_for_backward(log_probs, index)
        ctx.logits_dtype = logits.dtype
        return log_probs.gather(1, index).squeeze(1)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Optional[torch.Tensor], None]:  # type: ignore[override]
        if getattr(ctx, "backpropagated", False):
            raise RuntimeError("target_log_prob's graph can be backpropagated once: its backward reuses what it kept")
        ctx.backpropagated = True
        log_probs, index = ctx.saved_tensors
        grad = grad.unsqueeze(1).to(log_probs.dtype)
        # softmax(logits) in the kept log-probabilities' own memory (backward runs once: no retain_graph)
        probs = log_probs.exp_()
        probs.mul_(-grad)
        probs.scatter_add_(1, index, grad)
        return probs.to(ctx.logits_dtype), None


def target_log_prob(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``log_softmax(logits.float(), dim=1).gather(1, target[:, None])[:, 0]``, with a lighter backward pass.

    ``logits`` ``(rows, classes)``, any float type; ``target`` ``(rows,)`` class indices. Returns
    ``(rows,)`` in float32 (float64 for float64 logits). Its graph can be backpropagated once (the
    backward pass reuses what it kept).
    """
    if logits.dim() != 2 or target.shape != logits.shape[:1]:
        raise ValueError(
            f"logits must be (rows, classes) and target (rows,): got {tuple(logits.shape)} and {tuple(target.shape)}"
        )
    out: torch.Tensor = _TargetLogProb.apply(logits, target)
    return out


__all__ = ["target_log_prob"]
