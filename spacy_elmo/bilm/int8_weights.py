"""The int8 family's two kernel primitives: quantize a weight per output channel, pack it for one quantized engine.

Used by the int8 engine (:mod:`.engine.int8`) and the CPU probe (:mod:`.cpu_support`, the saturation test), so that
the probe multiplies exactly what the model will. Both import it, and it imports neither: it sits beside them, below
the engines, so that the probe needs nothing of the engines that ask it.
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
    """The int8 weight ``q`` with per-row ``scale`` packed by the quantized ``engine`` (None where this torch lacks it).

    torch reads the engine from process-wide state (``torch.backends.quantized.engine``), only when packing;
    each pack then runs its own engine's kernels whatever the setting. torch 2.13 has no engine-specific
    pack for dynamic int8 products (``quantized::linear_prepack`` and its legacy form read the setting;
    ``onednn::qlinear_prepack`` and ``_wrapped_linear_prepack`` make static-quantization weights, which
    ``quantized::linear_dynamic`` does not take), so the switch cannot be avoided. It is made only where
    the setting differs, for this call alone, under this module's lock (the one place the package touches
    the setting: ``tests/architecture/``), and always put back. (The saturation probe of
    :mod:`.cpu_support` packs through here too, so that it multiplies exactly what the model will.)
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
        if before == engine:  # already the process's engine: nothing to switch
            return torch.ops.quantized.linear_prepack(qweight, None)
        try:
            torch.backends.quantized.engine = engine
            return torch.ops.quantized.linear_prepack(qweight, None)
        finally:
            torch.backends.quantized.engine = before
