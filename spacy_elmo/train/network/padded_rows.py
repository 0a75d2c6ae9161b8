"""Row counts rounded up to a few sizes, so that a training step's bfloat16 products reuse compiled kernels.

Under bfloat16 mixed precision torch runs a step's products on oneDNN, which compiles (JIT) a kernel for
every new shape and keeps it in its primitive cache. The row counts of a step's products change with
every batch (the words in it, the predictions falling in each softmax cluster), so without rounding most
of a step's large products would first compile a kernel (what that costs: benchmarks/RESULTS.md,
"Training speed: compiled kernels reused"). :func:`padded_rows` rounds a count up to one of 16 sizes per
power of two (at most 1/16 more rows, zeros that change no result), so that after the first steps the
kernels are found compiled.

float32 products (MKL) compile nothing per shape: the float32 path is not padded (its rows are the
data's own). :func:`row_rounding` is that choice, for every caller.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.nn import functional as F

# sizes per power of two: 16 keeps the padding under 1/16 of the rows and the kernels per product few
SIZES_PER_OCTAVE = 16
SMALLEST_STEP = 8


def padded_rows(rows: int) -> int:
    """``rows`` rounded up to a multiple of ``max(8, 2**k / 16)`` where ``2**k <= rows < 2**(k+1)``."""
    if rows < 0:
        raise ValueError(f"rows must be >= 0, not {rows}")
    step = max(SMALLEST_STEP, (1 << max(rows.bit_length() - 1, 0)) // SIZES_PER_OCTAVE)
    return -(-rows // step) * step


def row_rounding(dtype: torch.dtype) -> Callable[[int], int]:
    """How a product's row count is rounded for ``dtype`` operands: :func:`padded_rows` for bfloat16, none else."""
    return padded_rows if dtype == torch.bfloat16 else _unrounded


def _unrounded(rows: int) -> int:
    return rows


def pad_rows(tensor: torch.Tensor, rows: int, dim: int = 0, value: float = 0) -> torch.Tensor:
    """``tensor`` with ``value`` rows appended along ``dim`` up to ``rows`` (itself when it has them)."""
    extra = rows - tensor.shape[dim]
    if extra < 0:
        raise ValueError(f"cannot pad {tensor.shape[dim]} rows to {rows}")
    if extra == 0:
        return tensor
    pad = [0, 0] * (tensor.dim() - 1 - dim % tensor.dim()) + [0, extra]
    return F.pad(tensor, pad, value=value)


__all__ = ["SIZES_PER_OCTAVE", "pad_rows", "padded_rows", "row_rounding"]
