"""``log_softmax(logits)[row, target[row]]`` as one autograd node: the log-probability of each row's target.

The adaptive softmax needs, for each row, only its target's log-probability. Computing it as
``F.log_softmax(logits).gather(1, target)`` writes the whole log-softmax in the forward pass and,
in the backward pass, a zero tensor of the logits' size for ``gather`` to scatter into and a third
for the log-softmax's gradient: on a tail cluster of 40,000 words that is a few hundred megabytes
of memory traffic per step for a few thousand numbers. :func:`target_log_prob` keeps only the logits
as they came (bfloat16 under mixed precision) and works through the rows in blocks that stay in the
CPU's cache: the forward pass takes each block's log-softmax and keeps its targets' entries, the
backward pass takes each block's softmax again and writes the gradient ``g * (onehot(target) -
softmax(logits))`` once. Both are torch's fused (log-)softmax kernels, which run faster than
``logsumexp`` and ``exp`` on the CPUs measured (benchmarks/RESULTS.md, "Training speed: the softmax
kernels and tanh from sigmoid").

The arithmetic is float32 (or the logits' wider type) (bfloat16 under mixed precision: a bfloat16
log-softmax would round every log-probability to 3 significant digits); the gradient is returned in
the logits' type.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Optional

import torch

# rows per block: about 2**18 numbers (1 MB of float32), so that a block's passes stay in the L2 cache
BLOCK_ELEMENTS = 1 << 18


def _arithmetic_dtype(logits: torch.Tensor) -> torch.dtype:
    """The logits' type, at least float32."""
    return torch.promote_types(logits.dtype, torch.float32)


def _row_blocks(rows: int, classes: int) -> Iterator[slice]:
    step = max(1, BLOCK_ELEMENTS // max(classes, 1))
    for start in range(0, rows, step):
        yield slice(start, min(start + step, rows))


class _TargetLogProb(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        dtype = _arithmetic_dtype(logits)
        rows, classes = logits.shape
        index = target.unsqueeze(1)
        out = logits.new_empty(rows, 1, dtype=dtype)
        for block in _row_blocks(rows, classes):
            torch.gather(torch.log_softmax(logits[block], 1, dtype=dtype), 1, index[block], out=out[block])
        ctx.save_for_backward(logits, index)
        return out.squeeze(1)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Optional[torch.Tensor], None]:  # type: ignore[override]
        logits, index = ctx.saved_tensors
        dtype = _arithmetic_dtype(logits)
        grad = grad.unsqueeze(1).to(dtype)
        grad_logits = torch.empty_like(logits)
        in_place = logits.dtype == dtype  # the gradient's own rows can hold the arithmetic
        for block in _row_blocks(*logits.shape):
            probs = torch.softmax(logits[block], 1, dtype=dtype)
            rows = torch.mul(probs, -grad[block], out=grad_logits[block] if in_place else probs)
            rows.scatter_add_(1, index[block], grad[block])
            if not in_place:
                grad_logits[block] = rows
        return grad_logits, None


def target_log_prob(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``log_softmax(logits.float(), dim=1).gather(1, target[:, None])[:, 0]``, with a lighter backward pass.

    ``logits`` ``(rows, classes)``, any float type; ``target`` ``(rows,)`` class indices. Returns
    ``(rows,)`` in float32 (float64 for float64 logits).
    """
    if logits.dim() != 2 or target.shape != logits.shape[:1]:
        raise ValueError(
            f"logits must be (rows, classes) and target (rows,): got {tuple(logits.shape)} and {tuple(target.shape)}"
        )
    out: torch.Tensor = _TargetLogProb.apply(logits, target)
    return out


__all__ = ["target_log_prob"]
