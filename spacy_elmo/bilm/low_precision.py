"""Low-precision CPU packs: int8 weights (quantized per output channel) and oneDNN pre-packed bfloat16 weights.

Opt-in, for inference on CPU (``load_bilm(..., dtype="int8" | "bfloat16")``; ``"auto"`` is float32); float32 never
comes here. This module makes the packs and their products (:class:`Int8Pack`, :class:`Bf16Pack`); which
product takes a pack is the int8 and bf16 engines' choice (:mod:`.engine`).
Which kernels serve a precision on this CPU is decided once per process by
:mod:`.cpu_support` (the one place that knows about VNNI, AVX2 saturation and native bf16).

**int8** (:func:`quantize`): the LSTM input, state and projection products, the highway layers and
the token projection multiply int8 weights, symmetric per output channel (scale = max |w| / 127 of
each row), by activations that torch quantizes per call (``quantized::linear_dynamic``: 8-bit, or
7-bit where :func:`.cpu_support.int8_kernels` found that this CPU's kernels saturate at full range;
per tensor, its own range); the products come back float32, and the rest (gates, cell, clipping,
char CNN) stays float32. Each weight is packed once, by the engine :mod:`.cpu_support` chose for its role:
the LSTM's step weights (state and projection: a few rows per product, one at batch 1) by the step
kernel (fbgemm), every other weight (input projections, token layers: whole chunks of rows) by the
many-rows kernel (fbgemm, or oneDNN where AMX serves int8). One int8 copy per weight: a second pack of
the step weights for the AMX kernel would add a third of the int8 model again (oneDNN's pack holds two
int8 copies) for products of at most a batch of rows.
By default :func:`quantize` packs every weight at once and *releases* the float32 matrices (their
parameters become meta tensors of the same shape), so an int8 model holds int8 weights, not a
float32 copy beside them; such a model cannot take gradients or change its weights (a clear error
says so). ``keep_float32=True`` keeps the parameters: the int8 engine then makes packs on first use
and remakes them whenever a parameter changes (a new ``(data_ptr, _version)``: an optimizer step, an
in-place edit under ``torch.no_grad()``).
The result is an approximation of the float32 model, not a rounding of it: see
``tests/test_precision.py`` for the measured and allowed error per CPU family.

**bfloat16** (the model itself cast to bfloat16): plain bf16 ``addmm`` re-packs the big operand on
every call, which at a few rows costs more than the arithmetic; oneDNN's pre-packed weights
(``mkldnn::_reorder_linear_weight`` + ``mkldnn::_linear_pointwise``, the ops torch's own CPU
inductor uses) pack once. Only where oneDNN has native bf16 kernels (:func:`.cpu_support.bf16_native`);
elsewhere the plain products run (correct, emulated: the backend warns).

On CUDA neither is used: bf16 and float16 models run torch's ordinary (tensor-core) kernels there,
and int8 is refused. Not batch-invariant to float32 rounding, unlike float32: a sentence's
activations may take other kernels (and other activation ranges) in another batch; they agree
within the precision's tolerance.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import platform
from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar, Optional, TypeVar

import torch
from torch import nn

from . import cpu_support
from .int8_ops import prepack, quantize_weight
from .lstm import ProjectedLSTMCell

BF16_MIN_ELEMENTS = 1 << 18  # smaller bf16 weights gain nothing from a pack
BF16_MAX_ROWS = 256  # measured: from a few hundred rows up plain bf16 GEMM is as fast (faster at 2048 rows)
# the parameters each marked module multiplies, as (name, whether its (out, in) view is the transpose)
_INT8_WEIGHTS = {
    ProjectedLSTMCell: (("input_weight", True), ("state_weight", True), ("projection", True)),
    nn.Linear: (("weight", False),),
}
# the LSTM's step weights: their products have a few rows (one at batch 1, at most a batch), so the step kernel
# (cpu_support.Int8Kernels.few_rows) packs them; input projections and token layers multiply whole chunks of rows
STEP_WEIGHTS = ("state_weight", "projection")


@dataclass(frozen=True)
class Pack:
    """A weight ready to multiply (``packed``), which knows its own product: :class:`Int8Pack` or :class:`Bf16Pack`."""

    kind: ClassVar[str]  # "int8" | "bfloat16"
    packed: object

    def multiply(self, rows: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
        """``rows @ out_in.T (+ bias)``."""
        raise NotImplementedError


@dataclass(frozen=True)
class Int8Pack(Pack):
    """int8 packed params of one quantized engine (the weight's only int8 copy); ``reduce_range``: whether its
    products quantize activations to 7 bits (:class:`.cpu_support.Int8Kernel`). float32 out."""

    kind: ClassVar[str] = "int8"
    reduce_range: bool = False

    def multiply(self, rows: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
        out = torch.ops.quantized.linear_dynamic(rows.contiguous(), self.packed, self.reduce_range)
        return out if bias is None else out.add_(bias)


@dataclass(frozen=True)
class Bf16Pack(Pack):
    """A bfloat16 weight in oneDNN's layout; bf16 out."""

    kind: ClassVar[str] = "bfloat16"

    def multiply(self, rows: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(rows, self.packed, bias, "none", [], "")


RELEASED_PACKS = "_released_int8_packs"  # module attribute: {parameter name: Pack} of weights quantize() released
INT8_MARK = "_spacy_elmo_int8"  # module attribute: quantize() marked it, its products are int8 (bilm/engine)
M = TypeVar("M", bound=nn.Module)


def int8_available() -> bool:
    """Whether this torch has a quantized engine for the int8 path (fbgemm or oneDNN: x86 CPU builds)."""
    return cpu_support.int8_available()


def quantize(model: M, keep_float32: bool = False) -> M:
    """Mark ``model``'s LSTM cells and linear layers for int8 products on the inference path; returns ``model``.

    By default every weight is packed now and its float32 matrix released (a meta tensor of the same
    shape takes its place): the model then holds int8 weights only and serves inference alone.
    ``keep_float32=True`` keeps the parameters and packs each weight on first use (and again after it changes).
    """
    for module in model.modules():  # the mark lives with each module: the engine of the LSTM or encoder reads it
        module.__dict__[INT8_MARK] = True
    marked = [m for m in model.modules() if isinstance(m, (ProjectedLSTMCell, nn.Linear))]
    if keep_float32:
        return model
    if (
        cpu_support.int8_kernels() is None
    ):  # no int8 kernels in this torch (the backend refuses int8 first): keep float32
        return model
    for module in marked:  # one weight at a time: its float32 pages are reused by the next one (a lower peak)
        for name, out_in in _int8_weights(module):
            pack = _pack(out_in.detach(), "int8", step=is_step_weight(module, name))
            if pack is None:  # never a half-released model that computes anything
                raise RuntimeError(
                    f"int8: torch's quantized kernels could not pack {type(module).__name__}.{name} "
                    f"{tuple(out_in.shape)}; load the model with dtype='float32'"
                )
            param = getattr(module, name)
            module.__dict__.setdefault(RELEASED_PACKS, {})[name] = (
                pack  # the pack lives with its module: it *is* the weight now
            )
            setattr(
                module,
                name,
                nn.Parameter(torch.empty(param.shape, device="meta", dtype=param.dtype), requires_grad=False),
            )
            del param, out_in
    return_freed_memory()
    return model


def return_freed_memory() -> None:
    """Give the released float32 matrices' pages back to the system (glibc keeps freed heap memory otherwise).

    ``malloc_trim`` changes no setting: it only unmaps free pages. A no-op where glibc is absent.
    """
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)


def is_int8(module: nn.Module) -> bool:
    """Whether :func:`quantize` marked ``module`` (or the model holding it) for int8 products."""
    return bool(module.__dict__.get(INT8_MARK, False))


def released_packs(module: nn.Module) -> dict[str, Pack]:
    """The int8 packs that replace ``module``'s released float32 weights, by parameter name (empty if none)."""
    return module.__dict__.get(RELEASED_PACKS, {})


def _int8_weights(module: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, (out, in) view)`` of each weight ``module`` multiplies in int8."""
    for kind, weights in _INT8_WEIGHTS.items():
        if isinstance(module, kind):
            for name, transposed in weights:
                param = getattr(module, name)
                yield name, param.t() if transposed else param


def linear(rows: torch.Tensor, pack: Pack, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``rows @ out_in.T (+ bias)`` through ``pack``; float32 out for int8, bf16 for bf16."""
    return pack.multiply(rows, bias)


def is_step_weight(module: nn.Module, name: str) -> bool:
    """Whether ``module.<name>`` is an LSTM step weight (:data:`STEP_WEIGHTS`), packed by the step kernel."""
    return isinstance(module, ProjectedLSTMCell) and name in STEP_WEIGHTS


def make_pack(out_in: torch.Tensor, kind: str, step: bool = False) -> Optional[Pack]:
    """``out_in`` (an ``(out, in)`` weight) packed for ``kind`` ("int8" | "bfloat16"); None where the kernels cannot.
    int8: ``step`` (an LSTM step weight) takes the step kernel, any other weight the many-rows kernel."""
    return _pack(out_in, kind, step)


def _pack(out_in: torch.Tensor, kind: str, step: bool = False) -> Optional[Pack]:
    """``out_in`` packed for ``kind``; int8: one pack, by the kernel of its role (the other role's where that engine
    is missing)."""
    try:
        if kind == "bfloat16":
            return Bf16Pack(torch.ops.mkldnn._reorder_linear_weight(out_in.contiguous(), 32))
        kernels = cpu_support.int8_kernels()
        if kernels is None:
            return None
        q, scale = quantize_weight(out_in)
        roles = (kernels.few_rows, kernels.many_rows) if step else (kernels.many_rows, kernels.few_rows)
        for kernel in roles:
            packed = prepack(q, scale, kernel.engine)
            if packed is not None:
                return Int8Pack(packed, kernel.reduce_range)
        return None
    except (AttributeError, RuntimeError, TypeError):  # torch without oneDNN or these ops
        return None
