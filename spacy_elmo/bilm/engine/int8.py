"""The int8 engine: every product through int8 weights, the steps in the compiled loop; quantize, the int8 packs.

The two kernel primitives (quantize a weight, pack it for one quantized engine) are in :mod:`..int8_weights`, which
the CPU probe (:mod:`..cpu_support`) shares, so that it multiplies exactly what the model will.

Opt-in, for inference on CPU (``load_bilm(..., dtype="int8")``; ``"auto"`` is float32). :func:`quantize` marks a
model: the LSTM input, state and projection products, the highway layers and the token projection multiply int8
weights, symmetric per output channel (scale = max |w| / 127 of each row, :func:`..int8_weights.quantize_weight`),
by activations that torch quantizes per call (``quantized::linear_dynamic``: 8-bit, or 7-bit where
:func:`..cpu_support.int8_kernels` found that this CPU's kernels saturate at full range; per tensor, its own range);
the products come back float32, and the rest (gates, cell, clipping, char CNN) stays float32. Each weight is packed
once (:func:`..int8_weights.prepack`), by the kernel :mod:`..cpu_support` found for its role: the LSTM's step
weights (state and projection: a few rows per product, one at batch 1) by the step kernel (fbgemm), every other
weight (input projections, token layers: whole chunks of rows) by the many-rows kernel (fbgemm, or oneDNN where
AMX serves int8). One int8 copy per weight: a second pack of the step weights for the AMX kernel would add a third
of the int8 model again (oneDNN's pack holds two int8 copies) for products of at most a batch of rows.
This family's cost model: :attr:`Int8Engine.gate_chunk_elements` (smaller chunks of input projections).

By default :func:`quantize` packs every weight at once and *releases* the float32 matrices (their
parameters become meta tensors of the same shape), so an int8 model holds int8 weights, not a
float32 copy beside them; such a model cannot take gradients or change its weights (a clear error
says so). ``keep_float32=True`` keeps the parameters: the engine then makes packs on first use
and remakes them whenever a parameter changes (a new ``(data_ptr, _version)``: an optimizer step, an
in-place edit under ``torch.no_grad()``). A weight with no pack takes the plain float32 product.
The result is an approximation of the float32 model, not a rounding of it: see
``tests/bilm/test_precision.py`` for the measured and allowed error per CPU family. Not batch-invariant to
float32 rounding: a sentence's activations may take other activation ranges in another batch; they agree
within the tolerance. On CUDA int8 is refused.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import platform
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn

from .. import cpu_support
from ..int8_weights import prepack, quantize_weight
from ..lstm import ProjectedLSTMCell
from .base import M, Target, WeightPacks, state_of
from .plain import PlainEngine
from .step_loop import LayerSpec, LayerSteps, StepProduct, StepWeight, loop_kind

# the parameters each marked module multiplies, as (name, whether its (out, in) view is the transpose)
_INT8_WEIGHTS = {
    ProjectedLSTMCell: (("input_weight", True), ("state_weight", True), ("projection", True)),
    nn.Linear: (("weight", False),),
}
# the LSTM's step weights: their products have a few rows (one at batch 1, at most a batch), so the step kernel
# (cpu_support.Int8Kernels.few_rows) packs them; input projections and token layers multiply whole chunks of rows
STEP_WEIGHTS = ("state_weight", "projection")


@dataclass(frozen=True)
class Int8Pack:
    """int8 packed params of one quantized engine (the weight's only int8 copy); ``reduce_range``: whether its
    products quantize activations to 7 bits (:class:`..cpu_support.Int8Kernel`). float32 out."""

    packed: object
    reduce_range: bool = False

    def multiply(self, rows: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
        """``rows @ out_in.T (+ bias)``."""
        out = torch.ops.quantized.linear_dynamic(rows.contiguous(), self.packed, self.reduce_range)
        return out if bias is None else out.add_(bias)

    def step_weight(self) -> StepWeight:
        """This pack as the step loop takes it."""
        return StepWeight(None, int8=self.packed, int8_reduce_range=self.reduce_range)


def make_pack(out_in: torch.Tensor, step: bool = False) -> Optional[Int8Pack]:
    """``out_in`` (an ``(out, in)`` weight) quantized and packed by the kernel of its role (``step``: an LSTM step
    weight, the step kernel; else the many-rows kernel), the other role's where that engine is missing; None
    where the kernels cannot."""
    try:
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
    except (AttributeError, RuntimeError, TypeError):  # torch without these ops
        return None


def is_step_weight(module: nn.Module, name: str) -> bool:
    """Whether ``module.<name>`` is an LSTM step weight (:data:`STEP_WEIGHTS`), packed by the step kernel."""
    return isinstance(module, ProjectedLSTMCell) and name in STEP_WEIGHTS


# -- a model marked for int8 ----------------------------------------------------------------------


def quantize(model: M, keep_float32: bool = False) -> M:
    """Mark ``model``'s LSTM cells and linear layers for int8 products on the inference path; returns ``model``.

    By default every weight is packed now and its float32 matrix released (a meta tensor of the same
    shape takes its place): the model then holds int8 weights only and serves inference alone.
    ``keep_float32=True`` keeps the parameters and packs each weight on first use (and again after it changes).
    """
    for module in model.modules():  # the mark lives with each module: the engine of the LSTM or encoder reads it
        state_of(module).int8 = True
    marked = [m for m in model.modules() if isinstance(m, (ProjectedLSTMCell, nn.Linear))]
    if keep_float32:
        return model
    if cpu_support.int8_kernels() is None:  # no int8 kernels in this torch (the backend refuses int8 first)
        return model
    for module in marked:  # one weight at a time: its float32 pages are reused by the next one (a lower peak)
        for name, out_in in _int8_weights(module):
            pack = make_pack(out_in.detach(), step=is_step_weight(module, name))
            if pack is None:  # never a half-released model that computes anything
                raise RuntimeError(
                    f"int8: torch's quantized kernels could not pack {type(module).__name__}.{name} "
                    f"{tuple(out_in.shape)}; load the model with dtype='float32'"
                )
            param = getattr(module, name)
            state_of(module).released[name] = pack  # the pack lives with its module: it *is* the weight now
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


def released_packs(module: nn.Module) -> dict[str, Int8Pack]:
    """The int8 packs that replace ``module``'s released float32 weights, by parameter name (empty if none)."""
    return state_of(module).released


def _int8_weights(module: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, (out, in) view)`` of each weight ``module`` multiplies in int8."""
    for kind, weights in _INT8_WEIGHTS.items():
        if isinstance(module, kind):
            for name, transposed in weights:
                param = getattr(module, name)
                yield name, param.t() if transposed else param


# -- the engine ---------------------------------------------------------------------------------------


class Int8Engine(PlainEngine):
    """int8 weights per output channel, activations quantized per product (``quantized::linear_dynamic``).

    Serves the modules :func:`quantize` marked, on CPU, where this torch has int8 kernels. A released weight's
    pack is the one quantize made (it *is* the weight); a model that kept its float32 weights gets packs made
    here, once per version of each weight.
    """

    name = "int8"
    load_dtype = torch.int8
    tolerance = 4e-2
    # each input projection also allocates its own output and accumulators: smaller chunks keep the working
    # memory down at no measured cost in speed (benchmarks/RESULTS.md, "Precision on every CPU")
    gate_chunk_elements = 1 << 21

    def __init__(self, target: Target) -> None:
        super().__init__(target)
        self.packs: WeightPacks[Int8Pack] = WeightPacks(lambda out_in: make_pack(out_in))
        self.step_packs: WeightPacks[Int8Pack] = WeightPacks(lambda out_in: make_pack(out_in, step=True))

    @classmethod
    def serves(cls, target: Target) -> bool:
        return target.int8 and target.device.type == "cpu" and cpu_support.int8_kernels() is not None

    @classmethod
    def load(cls, model: M, device: torch.device, dtype: torch.dtype, keep_float32: bool = False) -> M:
        """float32 on ``device``, quantized (:func:`quantize`: float32 matrices released unless ``keep_float32``)."""
        return quantize(model.to(device=device, dtype=torch.float32).eval(), keep_float32=keep_float32)

    def describe(self) -> str:
        return f"int8 products, {loop_kind()} LSTM time loop; this CPU: {cpu_support.summary()}"

    def pack(self, owner: nn.Module, name: str, out_in: torch.Tensor) -> Optional[Int8Pack]:
        """The int8 pack of parameter ``owner.<name>`` (``out_in``: its ``(out, in)`` view); None where it has none."""
        released = released_packs(owner).get(name)
        if released is not None:
            return released
        packs = self.step_packs if is_step_weight(owner, name) else self.packs
        return packs.get(owner, name, out_in)

    def linear(self, layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        pack = self.pack(layer, "weight", layer.weight)
        return layer(x) if pack is None else pack.multiply(x, layer.bias)

    def layer_steps(self, spec: LayerSpec) -> LayerSteps:
        cells = spec.cells
        packs = [
            [self.pack(cell, name, getattr(cell, name).t()) for name in ("input_weight", "state_weight", "projection")]
            for cell in cells
        ]
        if any(p is None for cell_packs in packs for p in cell_packs):  # a weight int8 cannot pack: float32 products
            return super().layer_steps(spec)
        inputs, states, projections = ([p for p in column if p is not None] for column in zip(*packs))
        bias = [cell.bias + cell.forget_offset for cell in cells]

        def input_projection(rows: torch.Tensor) -> list[torch.Tensor]:  # each direction's own product, no copy
            return [pack.multiply(rows[d], bias[d]) for d, pack in enumerate(inputs)]

        state = StepProduct([p.step_weight() for p in states])
        projection = StepProduct([p.step_weight() for p in projections])
        return LayerSteps(spec, input_projection, state, projection, precision=self.precision)
