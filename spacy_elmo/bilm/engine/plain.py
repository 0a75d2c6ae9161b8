"""The plain engine: torch's own products, on any device and floating dtype (the fallback every other engine is not).

float32 on CPU without MKL packs, every precision on CUDA (tensor-core kernels for bf16 / fp16), and
the emulated precisions on CPU (bf16 without native kernels, fp16). Its step weights are the dense matrices.
Its cost model (:meth:`PlainEngine.steps_compiled`): float32 on CPU runs the compiled step loop one direction at a
time (:mod:`.step_loop`: no interpreter between a step's ops, the GIL released, and one direction's weights hot in
the core's cache at a time; benchmarks/RESULTS.md, "Single sentences on the bundled model"); elsewhere both
directions run interleaved, from Python, and weights of at most :data:`STACK_MAX_ELEMENTS` take one batched product
for both directions (fewer operator calls per step), through one copy of both directions' weights made once per
version of the weights (:class:`Stacks`), not at every call. :class:`~.mkl.MklEngine` is this engine with MKL packs
for the products that gain from them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional, cast

import torch
from torch import nn

from ..lstm import ProjectedLSTMCell
from .contract import Engine, Target, WeightPacks
from .step_loop import LayerSpec, LayerSteps, StepProduct, StepWeight

STACK_MAX_ELEMENTS = 1 << 18  # per weight: both directions' copies in one tensor cost little


class Stacks:
    """Both directions' copies of a small weight in one ``(D, ...)`` tensor, made once per version of the weights
    (:meth:`.contract.WeightPacks.joint`: remade when any copy changes, as the engines' packs are); it lives and dies
    with the engine."""

    def __init__(self) -> None:
        self._packs: WeightPacks[torch.Tensor] = WeightPacks(torch.Tensor.clone)  # (only joint(): no one-weight pack)

    def get(self, cells: Sequence[nn.Module], name: str) -> torch.Tensor:
        """``torch.stack`` of each cell's parameter ``name`` (no autograd history)."""
        stack = self._packs.joint(cells, name, lambda: torch.stack([getattr(cell, name).detach() for cell in cells]))
        return cast(torch.Tensor, stack)  # (its make never returns None)

    def __len__(self) -> int:
        return len(self._packs)


class PlainEngine(Engine):
    """torch's products; the one engine that serves every target (last in :data:`.registry.ENGINES`).

    Its precision is its target's dtype (see :attr:`~.contract.Engine.precision`); ``load_dtype`` and ``tolerance``
    are those of float32, which the conformance test loads it in.
    """

    name = "plain"
    load_dtype = torch.float32

    def __init__(self, target: Target) -> None:
        super().__init__(target)
        self.stacks = Stacks()

    @classmethod
    def serves(cls, target: Target) -> bool:
        return True

    def describe(self) -> str:
        return f"torch's {self.target.device.type} kernels, {self.precision}"

    def linear(self, layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        return layer(x)

    def steps_compiled(self) -> bool:
        """Whether this engine's steps run in the compiled loop, one direction at a time (float32 on CPU), rather
        than interleaved from Python with small weights stacked (every other target)."""
        return self.target.device.type == "cpu" and self.target.dtype == torch.float32

    def layer_steps(self, spec: LayerSpec) -> LayerSteps:
        """Dense step weights (stacked for small ones where the directions run interleaved), or the packed forms
        :meth:`state_weights` gives."""
        cells = spec.cells
        inputs = [cell.input_weight for cell in cells]
        bias = [cell.bias + cell.forget_offset for cell in cells]
        packed_states = self.state_weights(cells, spec.batch)
        state_weights = packed_states or [StepWeight(cell.state_weight) for cell in cells]
        projection_weights = [StepWeight(cell.projection) for cell in cells]

        def input_product(
            rows: torch.Tensor, d: int, packs: Optional[list[torch.Tensor]], out: Optional[torch.Tensor] = None
        ) -> torch.Tensor:
            """``rows @ input_weight[d] + bias[d]``, into ``out`` where given."""
            if packs is None:
                return torch.addmm(bias[d], rows, inputs[d], out=out)
            product = self.packed_product(rows, inputs[d].t(), bias[d], packs[d])
            return product if out is None else out.copy_(product)

        if self.steps_compiled():

            def direction_projections(rows: torch.Tensor) -> list[torch.Tensor]:  # each its own product, no copy
                packs = self.input_packs(cells, rows.shape[1])
                return [input_product(rows[d], d, packs) for d in range(len(cells))]

            return LayerSteps(
                spec, direction_projections, StepProduct(state_weights), StepProduct(projection_weights), self.precision
            )

        small = len(cells) > 1 and cells[0].state_weight.numel() <= STACK_MAX_ELEMENTS
        state = StepProduct(
            state_weights, self.stacks.get(cells, "state_weight") if small and not packed_states else None
        )
        projection = StepProduct(projection_weights, self.stacks.get(cells, "projection") if small else None)

        def input_projection(rows: torch.Tensor) -> torch.Tensor:
            out = rows.new_empty(len(inputs), rows.shape[1], inputs[0].shape[1])
            packs = self.input_packs(cells, rows.shape[1])
            for d in range(len(cells)):
                input_product(rows[d], d, packs, out=out[d])
            return out

        return LayerSteps(spec, input_projection, state, projection)

    def input_packs(self, cells: Sequence[ProjectedLSTMCell], rows: int) -> Optional[list[torch.Tensor]]:
        """Packed input weights for a product of ``rows`` rows, one per cell; None: the plain products."""
        return None

    def state_weights(self, cells: Sequence[ProjectedLSTMCell], batch: int) -> Optional[list[StepWeight]]:
        """Packed state weights for steps of up to ``batch`` rows, one per cell; None: the dense matrices."""
        return None

    def packed_product(
        self, rows: torch.Tensor, out_in: torch.Tensor, bias: Optional[torch.Tensor], pack: torch.Tensor
    ) -> torch.Tensor:
        """``rows @ out_in.T (+ bias)`` through a pack of :meth:`input_packs`."""
        raise NotImplementedError("the plain engine makes no packs")
