"""The bf16 engine: oneDNN pre-packed bfloat16 weights where bf16 is native, the steps in the shared loop.

Plain bf16 ``addmm`` re-packs the big operand on every call, which at a few rows costs more than the
arithmetic; oneDNN's packs (:mod:`..low_precision`) pack once. Its cost model: weights from
:data:`..low_precision.BF16_MIN_ELEMENTS` up, products of at most :data:`..low_precision.BF16_MAX_ROWS` rows;
every other product is the plain bf16 one, and a batch of more rows runs the plain engine's loop. Where
bf16 is not native the plain engine serves bf16 (correct, emulated: the backend warns).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional, cast

import torch
from torch import nn

from .. import compiled_steps, cpu_support, low_precision
from ..compiled_steps import StepWeight
from ..low_precision import BF16_MAX_ROWS, Pack
from ..lstm import ProjectedLSTMCell
from .base import LayerSteps, Target
from .packed_steps import PackedSteps
from .packs import WeightPacks
from .plain import PlainEngine
from .registry import register


@register
class Bf16Engine(PlainEngine):
    """bfloat16 on CPU with native oneDNN kernels: pre-packed weights for products of a few hundred rows or fewer."""

    name = "onednn-bf16"
    precision = "bfloat16"
    load_dtype = torch.bfloat16

    def __init__(self, target: Target) -> None:
        super().__init__(target)
        self.packs: WeightPacks[Pack] = WeightPacks(lambda out_in: low_precision.make_pack(out_in, "bfloat16"))

    @classmethod
    def serves(cls, target: Target) -> bool:
        return (
            target.device.type == "cpu"
            and target.dtype == torch.bfloat16
            and not target.int8
            and cpu_support.bf16_native()
        )

    def describe(self) -> str:
        loop = compiled_steps.loop_kind()
        return f"bfloat16 products through oneDNN packs, {loop} LSTM time loop; this CPU: {cpu_support.summary()}"

    def pack(self, owner: nn.Module, name: str, out_in: torch.Tensor) -> Optional[Pack]:
        """The oneDNN pack of parameter ``owner.<name>`` (``out_in``: its ``(out, in)`` view); None for a small one."""
        if out_in.numel() < low_precision.BF16_MIN_ELEMENTS:
            return None
        return self.packs.get(owner, name, out_in)

    def linear(self, layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        pack = self.pack(layer, "weight", layer.weight) if x.shape[0] <= BF16_MAX_ROWS else None
        return layer(x) if pack is None else low_precision.linear(x, pack, layer.bias)

    def layer_steps(
        self,
        cells: Sequence[ProjectedLSTMCell],
        batch: int,
        c: torch.Tensor,
        h0: Optional[torch.Tensor],
        cell_clip: float,
        proj_clip: float,
        sigmoid_tanh: bool,
    ) -> LayerSteps:
        states = [self.pack(cell, "state_weight", cell.state_weight.t()) for cell in cells]
        if batch > BF16_MAX_ROWS or any(p is None for p in states):  # the plain products are as fast
            return super().layer_steps(cells, batch, c, h0, cell_clip, proj_clip, sigmoid_tanh)

        def input_product(d: int, rows: torch.Tensor, bias: torch.Tensor, out: torch.Tensor) -> None:
            cell = cells[d]
            pack = self.pack(cell, "input_weight", cell.input_weight.t()) if rows.shape[0] <= BF16_MAX_ROWS else None
            if pack is None:
                torch.addmm(bias, rows, cell.input_weight, out=out)
            else:
                out.copy_(low_precision.linear(rows, pack, bias))

        weights = []
        for cell, state in zip(cells, states):
            projection = self.pack(cell, "projection", cell.projection.t())
            weights.append((_step_weight(cell.state_weight, state), _step_weight(cell.projection, projection)))
        return PackedSteps("bfloat16", cells, c, h0, cell_clip, proj_clip, sigmoid_tanh, input_product, weights)


def _step_weight(dense: torch.Tensor, pack: Optional[Pack]) -> StepWeight:
    """A bf16 weight as the step loop takes it: its oneDNN pack for at most BF16_MAX_ROWS rows, else the matrix."""
    onednn = None if pack is None else cast(torch.Tensor, pack.packed)
    return StepWeight(dense, onednn, BF16_MAX_ROWS, None, False)
