"""The bf16 engine: oneDNN pre-packed bfloat16 weights where bf16 is native, the steps in the compiled loop.

Plain bf16 ``addmm`` re-packs the big operand on every call, which at a few rows costs more than the
arithmetic; oneDNN's pre-packed weights (``mkldnn::_reorder_linear_weight`` + ``mkldnn::_linear_pointwise``, the
ops torch's own CPU inductor uses) pack once. Its cost model (the constants below): weights from
:data:`MIN_ELEMENTS` up, products of at most :data:`MAX_ROWS` rows; every other product is the plain bf16 one,
and a batch of more rows runs the plain engine's steps. Only where oneDNN has native bf16 kernels
(:func:`..cpu_support.bf16_native`); elsewhere the plain engine serves bf16 (correct, emulated: the backend warns).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from .. import cpu_support
from .base import Target
from .packs import WeightPacks
from .plain import PlainEngine
from .step_loop import LayerSpec, LayerSteps, StepProduct, StepWeight, loop_kind

MIN_ELEMENTS = 1 << 18  # smaller bf16 weights gain nothing from a pack
MAX_ROWS = 256  # measured: from a few hundred rows up plain bf16 GEMM is as fast (faster at 2048 rows)


def make_pack(out_in: torch.Tensor) -> Optional[torch.Tensor]:
    """``out_in`` (an ``(out, in)`` bf16 weight) in oneDNN's layout; None where this torch cannot."""
    try:
        return torch.ops.mkldnn._reorder_linear_weight(out_in.contiguous(), 32)
    except (AttributeError, RuntimeError, TypeError):  # torch without oneDNN or these ops
        return None


def linear(rows: torch.Tensor, pack: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``rows @ out_in.T (+ bias)`` through ``pack`` (:func:`make_pack`); bf16 out."""
    return torch.ops.mkldnn._linear_pointwise(rows, pack, bias, "none", [], "")


class Bf16Engine(PlainEngine):
    """bfloat16 on CPU with native oneDNN kernels: pre-packed weights for products of a few hundred rows or fewer."""

    name = "onednn-bf16"
    load_dtype = torch.bfloat16
    tolerance = 2.5e-2

    def __init__(self, target: Target) -> None:
        super().__init__(target)
        self.packs: WeightPacks[torch.Tensor] = WeightPacks(make_pack)

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

    def pack(self, owner: nn.Module, name: str, out_in: torch.Tensor) -> Optional[torch.Tensor]:
        """The oneDNN pack of parameter ``owner.<name>`` (``out_in``: its ``(out, in)`` view); None for a small one."""
        if out_in.numel() < MIN_ELEMENTS:
            return None
        return self.packs.get(owner, name, out_in)

    def linear(self, layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        pack = self.pack(layer, "weight", layer.weight) if x.shape[0] <= MAX_ROWS else None
        return layer(x) if pack is None else linear(x, pack, layer.bias)

    def layer_steps(self, spec: LayerSpec) -> LayerSteps:
        cells = spec.cells
        states = [self.pack(cell, "state_weight", cell.state_weight.t()) for cell in cells]
        if spec.batch > MAX_ROWS or any(p is None for p in states):  # the plain products are as fast
            return super().layer_steps(spec)
        bias = [cell.bias + cell.forget_offset for cell in cells]

        def input_projection(rows: torch.Tensor, out: torch.Tensor) -> None:
            for d, cell in enumerate(cells):
                pack = self.pack(cell, "input_weight", cell.input_weight.t()) if rows.shape[1] <= MAX_ROWS else None
                if pack is None:
                    torch.addmm(bias[d], rows[d], cell.input_weight, out=out[d])
                else:
                    out[d].copy_(linear(rows[d], pack, bias[d]))

        projections = [self.pack(cell, "projection", cell.projection.t()) for cell in cells]
        state = StepProduct([_step_weight(cell.state_weight, p) for cell, p in zip(cells, states)])
        projection = StepProduct([_step_weight(cell.projection, p) for cell, p in zip(cells, projections)])
        return LayerSteps(spec, input_projection, state, projection, precision=self.precision)


def _step_weight(dense: torch.Tensor, pack: Optional[torch.Tensor]) -> StepWeight:
    """A bf16 weight as the step loop takes it: its oneDNN pack for at most MAX_ROWS rows, else the matrix."""
    return StepWeight(dense, onednn=pack, max_rows=MAX_ROWS)
