"""The two int8 primitives: quantize a weight per output channel, pack it for one quantized engine.

Used by :mod:`.low_precision` (the int8 products) and :mod:`.cpu_support` (the saturation probe), so
that the probe multiplies exactly what the model will.
"""

from __future__ import annotations

import warnings
from typing import Optional

import torch

from .threads import ForkSafeLock

_engine_lock = ForkSafeLock()


def quantize_weight(out_in: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-output-channel int8: ``(int8 weight (out, in), float32 scales (out,))``, ``w ~ q * scale``."""
    w = out_in.detach().float()
    scale = (w.abs().amax(dim=1) / 127.0).clamp_min(torch.finfo(torch.float32).tiny)
    return torch.round(w / scale[:, None]).clamp_(-127, 127).to(torch.int8), scale


def prepack(q: torch.Tensor, scale: torch.Tensor, engine: str) -> Optional[object]:
    """The int8 weight ``q`` with per-row ``scale`` packed by ``engine`` (None where this torch lacks it).

    torch reads the engine from process-wide state, only when packing (each pack then runs its own
    engine's kernels): it is set for this call alone, under a lock, and put back.
    """
    if engine not in torch.backends.quantized.supported_engines:
        return None
    with warnings.catch_warnings():  # torch 2.10+ flags quantized tensor *creation* as deprecated
        warnings.simplefilter("ignore", UserWarning)
        qweight = torch._make_per_channel_quantized_tensor(
            q, scale.double(), torch.zeros_like(scale, dtype=torch.long), 0
        )
    with _engine_lock:
        before = torch.backends.quantized.engine
        try:
            torch.backends.quantized.engine = engine
            return torch.ops.quantized.linear_prepack(qweight, None)
        finally:
            torch.backends.quantized.engine = before
