"""The training step's precision: float32, or bfloat16 mixed precision where the CPU has native bfloat16 kernels.

``auto`` (the default) asks whether bfloat16 is native through
:func:`~spacy_elmo.bilm.cpu_support.bf16_native`, the test inference uses too (oneDNN's own
answer, which honours ``ONEDNN_MAX_CPU_ISA``; inference's ``dtype="auto"`` itself stays float32,
see docs/precision.md): with AVX-512 (BW/VL/DQ), AVX-512 BF16 or AMX the step runs under
``torch.autocast("cpu", dtype=torch.bfloat16)``, elsewhere in float32, because emulated bfloat16
is slower than float32. Under bfloat16 only the products' operands are rounded: the weights, the
optimizer's state, the LSTM's cell and state, every log-softmax and the loss stay float32, and so
do the exported weights. ``float32`` is the exact path (the same seed, data and thread count give
the same weights bit for bit, resumed or not).
"""

from __future__ import annotations

import contextlib
import warnings

import torch

from ..bilm import cpu_support
from .config import PRECISIONS


def training_dtype(precision: str) -> torch.dtype:
    """The dtype of the training step's products for ``--precision`` (``auto``: bfloat16 where it is native)."""
    if precision == "float32":
        return torch.float32
    if precision == "bfloat16":
        return torch.bfloat16
    if precision == "auto":
        return torch.bfloat16 if cpu_support.bf16_native() else torch.float32
    raise ValueError(f"--precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")


def warn_if_emulated(dtype: torch.dtype) -> None:
    """A :class:`~spacy_elmo.bilm.cpu_support.SlowPrecisionWarning` when bfloat16 was asked for on a CPU without
    native bfloat16 kernels: it trains correctly, but slower than float32."""
    if dtype == torch.bfloat16 and not cpu_support.bf16_native():
        warnings.warn(
            f"--precision bfloat16 has no native kernels on this CPU (oneDNN needs AVX-512 BW/VL/DQ, AVX-512 BF16 or "
            f"AMX; this CPU has: {cpu_support.isa_flags()}): it trains emulated, slower than float32. Use --precision "
            f"auto or float32",
            cpu_support.SlowPrecisionWarning,
            stacklevel=3,
        )


def describe(precision: str, dtype: torch.dtype) -> str:
    """The line the trainer prints: the precision in use, and why (the CPU's flags when ``auto`` chose it)."""
    name = "bfloat16 mixed precision (float32 weights)" if dtype == torch.bfloat16 else "float32"
    if precision != "auto":
        return f"training precision: {name} (--precision {precision})"
    why = "native bfloat16 kernels" if dtype == torch.bfloat16 else "no native bfloat16 kernels"
    return f"training precision: {name} (auto: {why} on this CPU: {cpu_support.isa_flags()})"


def autocast(dtype: torch.dtype) -> contextlib.AbstractContextManager[None]:
    """The context a training step's forward pass runs in: bfloat16 CPU autocast, or nothing for float32."""
    if dtype == torch.bfloat16:
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


__all__ = ["PRECISIONS", "autocast", "describe", "training_dtype", "warn_if_emulated"]
