"""Low-precision CPU products: int8 weights (quantized per output channel) and oneDNN pre-packed bfloat16 weights.

Opt-in, for inference on CPU (``load_bilm(..., dtype="int8" | "bfloat16")``); float32 never comes
here. Like :mod:`.mkl_prepacked`, each big weight gets a second, ready-to-multiply copy beside it,
made on first use and remade whenever the parameter changes (a new ``(data_ptr, _version)`` key:
a reload, an optimizer step, an in-place edit under ``torch.no_grad()``), freed with the module.

**int8** (:func:`quantize` marks a model; its parameters stay float32, so autograd and training
are untouched): the LSTM input, state and projection products, the highway layers and the token
projection multiply int8 weights, symmetric per output channel (scale = max |w| / 127 of each
row), by activations that torch quantizes per call (``quantized::linear_dynamic``: 8-bit, per
tensor, its own range); the products come back float32, and the rest (gates, cell, clipping,
char CNN) stays float32. The weights are packed twice: by oneDNN (:data:`INT8_ENGINE`), whose
AMX/VNNI kernels were 1.5-8x faster than fbgemm's here from 8 rows up, and by fbgemm
(:data:`INT8_FEW_ROWS_ENGINE`), 10-15% faster for products of 1-4 rows (the steps of batch 1):
one LSTM at batch 1 took 104 ms with both vs 117 ms with oneDNN alone (float32: 327 ms, one
thread). Cost: two int8 copies (together half the float32 matrix) beside the float32 parameters.
The result is an approximation of the float32 model, not a rounding of it: see
``tests/test_precision.py`` for the measured and allowed error.

**bfloat16** (the model itself cast to bfloat16): plain bf16 ``addmm`` re-packs the big operand on
every call, which at a few rows costs more than the arithmetic (so bf16 was slower than float32
at batch 1); oneDNN's pre-packed weights (``mkldnn::_reorder_linear_weight`` +
``mkldnn::_linear_pointwise``, the ops torch's own CPU inductor uses) pack once.

Both need a torch with oneDNN (x86 builds): elsewhere bf16 runs the plain products, and
``load_bilm`` refuses ``dtype="int8"`` (:func:`int8_available`). On CUDA neither is used: bf16 and
float16 models run torch's ordinary (tensor-core) kernels there, and int8 is refused.
Not batch-invariant to float32 rounding, unlike float32: a sentence's activations may take
other kernels (and other activation ranges) in another batch; they agree within the precision's
tolerance.
"""
from __future__ import annotations

import threading
import warnings
import weakref
from dataclasses import dataclass
from typing import Dict, Optional, Tuple, TypeVar

import torch
from torch import nn

from .lstm import ProjectedLSTMCell
from .threads import at_fork_in_child

INT8_ENGINE = "onednn"
INT8_FEW_ROWS_ENGINE = "fbgemm"  # 10-15% faster than oneDNN for 1-4 rows (batch 1's steps), 1.5-2x slower from 8 up
INT8_FEW_ROWS = 4
BF16_MIN_ELEMENTS = 1 << 18  # smaller bf16 weights gain nothing from a pack
BF16_MAX_ROWS = 256  # measured: from a few hundred rows up plain bf16 GEMM is as fast (faster at 2048 rows)


@dataclass(frozen=True)
class Pack:
    """A weight ready to multiply: ``kind`` "int8" (packed params) or "bfloat16" (oneDNN layout)."""

    kind: str
    packed: object
    few_rows: object = None  # int8: a second pack for products of at most INT8_FEW_ROWS rows (None: use ``packed``)


_Entry = Tuple[Tuple[int, int], Optional[Pack]]
_packs: "weakref.WeakKeyDictionary[nn.Module, Dict[str, _Entry]]" = weakref.WeakKeyDictionary()
_int8_modules: "weakref.WeakSet[nn.Module]" = weakref.WeakSet()
_lock = threading.Lock()
M = TypeVar("M", bound=nn.Module)


@at_fork_in_child
def _new_lock_after_fork() -> None:
    """A fork may copy the lock held by a thread that does not exist in the child: start unlocked."""
    global _lock
    _lock = threading.Lock()


def int8_available() -> bool:
    """Whether this torch has the quantized dynamic linear with the oneDNN engine (x86 CPU builds)."""
    return INT8_ENGINE in torch.backends.quantized.supported_engines


def quantize(model: M) -> M:
    """Mark ``model``'s LSTM cells and linear layers for int8 products on the inference path; returns ``model``.

    Nothing is copied here: each weight is quantized on first use (and again after it changes).
    """
    for module in model.modules():
        if isinstance(module, (ProjectedLSTMCell, nn.Linear)):
            _int8_modules.add(module)
    return model


def pack_of(owner: nn.Module, name: str, out_in: torch.Tensor, rows: torch.Tensor) -> Optional[Pack]:
    """The low-precision pack of parameter ``owner.<name>`` (``out_in``: its ``(out, in)`` view) for ``rows`` (2-D).

    int8 when ``owner`` is marked by :func:`quantize` and ``rows`` are float32 on CPU; bf16 when they
    are bf16 on CPU, the weight is big enough and there are at most :data:`BF16_MAX_ROWS`; else None.
    """
    if rows.device.type != "cpu" or (torch.is_grad_enabled() and out_in.requires_grad):
        return None
    if rows.dtype == torch.float32 and owner in _int8_modules:
        kind = "int8"
    elif rows.dtype == torch.bfloat16 and out_in.numel() >= BF16_MIN_ELEMENTS and rows.shape[0] <= BF16_MAX_ROWS:
        kind = "bfloat16"
    else:
        return None
    param = getattr(owner, name)
    key = (param.data_ptr(), param._version)
    with _lock:
        packs = _packs.setdefault(owner, {})
        entry = packs.get(name)
        if entry is None or entry[0] != key or (entry[1] is not None and entry[1].kind != kind):
            entry = (key, _pack(out_in.detach(), kind))
            packs[name] = entry
        return entry[1]


def linear(rows: torch.Tensor, pack: Pack, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``rows @ out_in.T (+ bias)`` through ``pack``; float32 out for int8, bf16 for bf16."""
    if pack.kind == "int8":
        packed = pack.few_rows if pack.few_rows is not None and rows.shape[0] <= INT8_FEW_ROWS else pack.packed
        out = torch.ops.quantized.linear_dynamic(rows.contiguous(), packed, False)
        return out if bias is None else out.add_(bias)
    return torch.ops.mkldnn._linear_pointwise(rows, pack.packed, bias, "none", [], "")


def quantize_weight(out_in: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-output-channel int8: ``(int8 weight (out, in), float32 scales (out,))``, ``w ~ q * scale``."""
    w = out_in.detach().float()
    scale = (w.abs().amax(dim=1) / 127.0).clamp_min(torch.finfo(torch.float32).tiny)
    return torch.round(w / scale[:, None]).clamp_(-127, 127).to(torch.int8), scale


def _prepack(qweight: torch.Tensor, engine: str) -> Optional[object]:
    """``qweight`` packed by ``engine`` (None where this torch lacks it). The engine is process-wide
    state, read only when packing (each pack then runs its own engine's kernels): it is set for this
    call alone, under the module lock, and put back."""
    if engine not in torch.backends.quantized.supported_engines:
        return None
    before = torch.backends.quantized.engine
    try:
        torch.backends.quantized.engine = engine
        return torch.ops.quantized.linear_prepack(qweight, None)
    finally:
        torch.backends.quantized.engine = before


def _pack(out_in: torch.Tensor, kind: str) -> Optional[Pack]:
    try:
        if kind == "bfloat16":
            weight = out_in.contiguous()
            return Pack(kind, torch.ops.mkldnn._reorder_linear_weight(weight, 32))
        if not int8_available():
            return None
        q, scale = quantize_weight(out_in)
        with warnings.catch_warnings():  # torch 2.10+ flags quantized tensor *creation* as deprecated
            warnings.simplefilter("ignore", UserWarning)
            qweight = torch._make_per_channel_quantized_tensor(q, scale.double(), torch.zeros_like(scale, dtype=torch.long), 0)
        packed = _prepack(qweight, INT8_ENGINE)
        return None if packed is None else Pack(kind, packed, _prepack(qweight, INT8_FEW_ROWS_ENGINE))
    except (AttributeError, RuntimeError, TypeError):  # torch without oneDNN or these ops
        return None
