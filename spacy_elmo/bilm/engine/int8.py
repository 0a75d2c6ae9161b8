"""The int8 engine: every product through int8 weights (:mod:`..low_precision`), the steps in the shared loop.

Serves the modules :func:`..low_precision.quantize` marked, on CPU, where this torch has int8 kernels
(:func:`..cpu_support.int8_kernels` chose them). A released weight's pack is the one quantize made (it *is*
the weight); a model that kept its float32 weights (``keep_float32=True``) gets packs made here, once per
version of each weight. A weight with no pack takes the plain float32 product.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional, cast

import torch
from torch import nn

from .. import compiled_steps, cpu_support, low_precision
from ..compiled_steps import StepWeight
from ..low_precision import Int8Pack, Pack
from ..lstm import ProjectedLSTMCell
from .base import LayerSteps, Target
from .packed_steps import PackedSteps
from .packs import WeightPacks
from .plain import PlainEngine
from .registry import register


@register
class Int8Engine(PlainEngine):
    """int8 weights per output channel, activations quantized per product (``quantized::linear_dynamic``)."""

    name = "int8"
    precision = "int8"
    load_dtype = torch.int8
    follows_weight_changes = True  # where the float32 weights are kept; released ones cannot change
    # each input projection also allocates its own output and accumulators: smaller chunks keep the working
    # memory down at no measured cost in speed (benchmarks/RESULTS.md, "Precision on every CPU")
    gate_chunk_elements = 1 << 21

    def __init__(self, target: Target) -> None:
        super().__init__(target)
        self.packs: WeightPacks[Pack] = WeightPacks(lambda out_in: low_precision.make_pack(out_in, "int8"))
        self.step_packs: WeightPacks[Pack] = WeightPacks(lambda out_in: low_precision.make_pack(out_in, "int8", True))

    @classmethod
    def serves(cls, target: Target) -> bool:
        return target.int8 and target.device.type == "cpu" and cpu_support.int8_kernels() is not None

    def describe(self) -> str:
        return f"int8 products, {compiled_steps.loop_kind()} LSTM time loop; this CPU: {cpu_support.summary()}"

    def pack(self, owner: nn.Module, name: str, out_in: torch.Tensor) -> Optional[Pack]:
        """The int8 pack of parameter ``owner.<name>`` (``out_in``: its ``(out, in)`` view); None where it has none."""
        released = low_precision.released_packs(owner).get(name)
        if released is not None:
            return released
        packs = self.step_packs if low_precision.is_step_weight(owner, name) else self.packs
        return packs.get(owner, name, out_in)

    def linear(self, layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        pack = self.pack(layer, "weight", layer.weight)
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
        packs = [
            tuple(
                self.pack(cell, name, getattr(cell, name).t())
                for name in ("input_weight", "state_weight", "projection")
            )
            for cell in cells
        ]
        if any(p is None for cell_packs in packs for p in cell_packs):  # a weight int8 cannot pack: float32 products
            return super().layer_steps(cells, batch, c, h0, cell_clip, proj_clip, sigmoid_tanh)
        inputs = [cell_packs[0] for cell_packs in packs]

        def input_product(d: int, rows: torch.Tensor, bias: torch.Tensor, out: torch.Tensor) -> None:
            out.copy_(low_precision.linear(rows, inputs[d], bias))  # type: ignore[arg-type]  # None ruled out above

        weights = [(_step_weight(state), _step_weight(projection)) for _, state, projection in packs]  # type: ignore[arg-type]
        return PackedSteps("int8", cells, c, h0, cell_clip, proj_clip, sigmoid_tanh, input_product, weights)


def _step_weight(pack: Pack) -> StepWeight:
    """An int8 pack as the step loop takes it: its packed params and activation range."""
    pack = cast(Int8Pack, pack)
    return StepWeight(None, None, 0, pack.packed, pack.reduce_range)
