"""The oneDNN engines: pre-packed weights for bfloat16 and float32 on CPU, one family of kernels and cost model.

Plain ``addmm`` re-packs the big operand on every call, which at a few rows costs about as much as the
arithmetic; oneDNN's pre-packed weights (``mkldnn::_reorder_linear_weight`` + ``mkldnn::_linear_pointwise``, the
ops torch's own CPU inductor uses) pack once, into one copy per weight. Two engines share the kernels:

- :class:`Bf16Engine`: bfloat16 where oneDNN has native bf16 kernels (:func:`..cpu_support.bf16_native`;
  elsewhere the plain engine serves bf16, emulated: the backend warns); the steps in the compiled loop.
- :class:`Float32Engine`: float32 where oneDNN's exact float32 products beat MKL's on this CPU
  (:func:`..cpu_support.float32_kernels`: by the CPU's vendor; ``SPACY_ELMO_FLOAT32_KERNELS`` forces it);
  elsewhere :class:`~.mkl.MklEngine` serves float32. Its packs replace MKL's: one pack per weight. Its steps
  run in the compiled loop too (full float32: the same ops as from Python, without the interpreter).

The family's cost model (the constants below): weights from :data:`MIN_ELEMENTS` up, products of at most
:data:`MAX_ROWS` rows (bf16) or :data:`FLOAT32_MAX_ROWS` rows (float32; a step's state product from
:data:`FLOAT32_STATE_MIN_ROWS` rows); every other product is the plain one
(MKL's GEMM for float32), and a batch of more rows runs the plain engine's steps.
"""

from __future__ import annotations

from typing import ClassVar, Optional

import torch
from torch import nn

from .. import cpu_support
from . import mkl
from .base import Target, WeightPacks
from .plain import PlainEngine
from .step_loop import LayerSpec, LayerSteps, StepProduct, StepWeight, loop_kind

MIN_ELEMENTS = 1 << 18  # smaller weights gain nothing from a pack
MAX_ROWS = 256  # bf16, measured: from a few hundred rows up plain bf16 GEMM is as fast (faster at 2048 rows)
FLOAT32_MAX_ROWS = 512  # float32, measured: oneDNN's packed product leads MKL's up to ~640 rows, not at 1024
FLOAT32_STATE_MIN_ROWS = 2  # float32 state products: at 1 row on one thread MKL's GEMV is faster (batch 1)
_PACK_FOR_ROWS = 32  # the row count oneDNN lays a pack out for; products of other row counts use it as it is


def make_pack(out_in: torch.Tensor) -> Optional[torch.Tensor]:
    """``out_in`` (an ``(out, in)`` weight) in oneDNN's layout; None where this torch cannot."""
    try:
        return torch.ops.mkldnn._reorder_linear_weight(out_in.contiguous(), _PACK_FOR_ROWS)
    except (AttributeError, RuntimeError, TypeError):  # torch without oneDNN or these ops
        return None


def linear(rows: torch.Tensor, pack: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``rows @ out_in.T (+ bias)`` through ``pack`` (:func:`make_pack`), in the pack's dtype."""
    return torch.ops.mkldnn._linear_pointwise(rows, pack, bias, "none", [], "")


class OneDnnEngine(PlainEngine):
    """oneDNN pre-packed weights for the products of at most :attr:`max_rows` rows by a big weight."""

    max_rows: ClassVar[int]
    state_min_rows: ClassVar[int] = 0  # the step's state products take the pack from this many rows
    compiled_steps: ClassVar[bool]  # the step loop runs compiled by TorchScript (else from Python)

    def __init__(self, target: Target) -> None:
        super().__init__(target)
        self.packs: WeightPacks[torch.Tensor] = WeightPacks(make_pack)

    def pack(self, owner: nn.Module, name: str, out_in: torch.Tensor) -> Optional[torch.Tensor]:
        """The oneDNN pack of parameter ``owner.<name>`` (``out_in``: its ``(out, in)`` view); None for a small one."""
        if out_in.numel() < MIN_ELEMENTS:
            return None
        return self.packs.get(owner, name, out_in)

    def linear(self, layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        pack = self.pack(layer, "weight", layer.weight) if x.shape[0] <= self.max_rows else None
        return layer(x) if pack is None else linear(x, pack, layer.bias)

    def layer_steps(self, spec: LayerSpec) -> LayerSteps:
        cells = spec.cells
        most = self.max_rows
        states = [self.pack(cell, "state_weight", cell.state_weight.t()) for cell in cells]
        if spec.batch > most or any(p is None for p in states):  # the plain products are as fast
            return super().layer_steps(spec)
        bias = [cell.bias + cell.forget_offset for cell in cells]

        def input_projection(rows: torch.Tensor) -> list[torch.Tensor]:  # each direction's own product, no copy
            fits = rows.shape[1] <= most
            packs = [self.pack(cell, "input_weight", cell.input_weight.t()) if fits else None for cell in cells]
            return [
                torch.addmm(bias[d], rows[d], cell.input_weight) if pack is None else linear(rows[d], pack, bias[d])
                for d, (cell, pack) in enumerate(zip(cells, packs))
            ]

        projections = [self.pack(cell, "projection", cell.projection.t()) for cell in cells]
        fewest = self.state_min_rows
        state = StepProduct(
            [StepWeight(cell.state_weight, onednn=p, min_rows=fewest, max_rows=most) for cell, p in zip(cells, states)]
        )
        projection = StepProduct(
            [StepWeight(cell.projection, onednn=p, max_rows=most) for cell, p in zip(cells, projections)]
        )
        return LayerSteps(
            spec, input_projection, state, projection, precision=self.precision if self.compiled_steps else None
        )


class Bf16Engine(OneDnnEngine):
    """bfloat16 on CPU with native oneDNN kernels: pre-packed weights for products of a few hundred rows or fewer."""

    name = "onednn-bf16"
    load_dtype = torch.bfloat16
    tolerance = 2.5e-2
    max_rows = MAX_ROWS
    compiled_steps = True

    @classmethod
    def serves(cls, target: Target) -> bool:
        return (
            target.device.type == "cpu"
            and target.dtype == torch.bfloat16
            and not target.int8
            and cpu_support.bf16_native()
        )

    def describe(self) -> str:
        return (
            f"bfloat16 products through oneDNN packs, {loop_kind()} LSTM time loop; this CPU: {cpu_support.summary()}"
        )


class Float32Engine(OneDnnEngine):
    """float32 on CPU where oneDNN's exact pre-packed products beat MKL's (:func:`..cpu_support.float32_kernels`)."""

    name = "onednn-float32"
    load_dtype = torch.float32
    max_rows = FLOAT32_MAX_ROWS
    state_min_rows = FLOAT32_STATE_MIN_ROWS
    compiled_steps = True  # measured faster at batch 1 than the Python loop (benchmarks/RESULTS.md)

    @classmethod
    def serves(cls, target: Target) -> bool:
        return (
            mkl.ENABLED  # SPACY_ELMO_PACKED_WEIGHTS=0 turns every float32 pack off
            and target.device.type == "cpu"
            and target.dtype == torch.float32
            and not target.int8
            and cpu_support.float32_kernels() == "onednn"
        )

    def describe(self) -> str:
        return (
            f"float32 precision, oneDNN pre-packed products of up to {self.max_rows} rows, MKL's GEMM for more, "
            f"{loop_kind()} LSTM time loop"
        )
