"""The training step's precision: float32, or bfloat16 mixed precision where the device has native bfloat16 kernels.

``auto`` (the default) asks whether bfloat16 is native through
:func:`~spacy_elmo.bilm.cpu_support.bf16_native`, the test inference uses too (oneDNN's own
answer, which honours ``ONEDNN_MAX_CPU_ISA``; inference's ``dtype="auto"`` itself stays float32,
see docs/precision.md): with AVX-512 (BW/VL/DQ), AVX-512 BF16 or AMX the step runs under
``torch.autocast("cpu", dtype=torch.bfloat16)``, elsewhere in float32, because emulated bfloat16
is slower than float32. Under bfloat16 only the products' operands are rounded: the weights, the
optimizer's state, the LSTM's cell and state, every log-softmax and the loss stay float32, and so
do the exported weights. ``float32`` is the exact path (the same seed, data and thread count give
the same weights bit for bit, resumed or not).

On a CUDA device the same choice is the GPU's: ``auto`` takes bfloat16 where it has native bfloat16
arithmetic (compute capability 8.0 and later: A100, H100, H200, RTX 30xx and newer; torch's
``torch.cuda.is_bf16_supported(including_emulation=False)``), and the step runs under
``torch.autocast("cuda", dtype=torch.bfloat16)``.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any

import torch

from ...bilm import cpu_support
from ..config import PRECISIONS

_CPU = torch.device("cpu")


def bf16_native(device: torch.device = _CPU) -> bool:
    """Whether ``device`` runs bfloat16 products natively: the CPU's oneDNN answer, a CUDA GPU's compute capability."""
    if device.type == "cuda":
        if torch.version.hip:  # ROCm GPUs that torch supports all have bfloat16
            return True
        return torch.cuda.get_device_capability(device)[0] >= 8
    return device.type == "cpu" and cpu_support.bf16_native()


def training_dtype(precision: str, device: torch.device = _CPU) -> torch.dtype:
    """The dtype of the training step's products on ``device`` for ``--precision`` (``auto``: bfloat16 where it is
    native)."""
    if precision == "float32":
        return torch.float32
    if precision == "bfloat16":
        return torch.bfloat16
    if precision == "auto":
        return torch.bfloat16 if bf16_native(device) else torch.float32
    raise ValueError(f"--precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")


def warn_if_emulated(dtype: torch.dtype, device: torch.device = _CPU) -> None:
    """A :class:`~spacy_elmo.bilm.cpu_support.SlowPrecisionWarning` when bfloat16 was asked for on a device without
    native bfloat16 kernels: it trains correctly, but slower than float32."""
    if dtype != torch.bfloat16 or bf16_native(device):
        return
    if device.type == "cuda":
        warnings.warn(
            f"--precision bfloat16 has no native arithmetic on {torch.cuda.get_device_name(device)} (compute "
            f"capability {'.'.join(map(str, torch.cuda.get_device_capability(device)))}; native from 8.0): it trains "
            f"emulated, slower than float32. Use --precision auto or float32",
            cpu_support.SlowPrecisionWarning,
            stacklevel=3,
        )
    else:
        warnings.warn(
            f"--precision bfloat16 has no native kernels on this CPU (oneDNN needs AVX-512 BW/VL/DQ, AVX-512 BF16 or "
            f"AMX; this CPU has: {cpu_support.isa_flags()}): it trains emulated, slower than float32. Use --precision "
            f"auto or float32",
            cpu_support.SlowPrecisionWarning,
            stacklevel=3,
        )


def describe(precision: str, dtype: torch.dtype, device: torch.device = _CPU) -> str:
    """The line the trainer prints: the precision in use, and why (the CPU's flags or the GPU when ``auto`` chose
    it)."""
    name = "bfloat16 mixed precision (float32 weights)" if dtype == torch.bfloat16 else "float32"
    if precision != "auto":
        return f"training precision: {name} (--precision {precision})"
    why = "native bfloat16 kernels" if dtype == torch.bfloat16 else "no native bfloat16 kernels"
    if device.type == "cuda":
        return f"training precision: {name} (auto: {why} on {device}: {torch.cuda.get_device_name(device)})"
    return f"training precision: {name} (auto: {why} on this CPU: {cpu_support.isa_flags()})"


def autocast(dtype: torch.dtype, device: torch.device = _CPU) -> contextlib.AbstractContextManager[Any]:
    """The context a training step's forward pass runs in: bfloat16 autocast of ``device``'s type (CPU or CUDA), or
    nothing for float32."""
    if dtype == torch.bfloat16:
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


__all__ = ["PRECISIONS", "autocast", "bf16_native", "describe", "training_dtype", "warn_if_emulated"]
