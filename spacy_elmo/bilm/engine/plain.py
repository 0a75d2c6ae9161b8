"""The plain engine: torch's own products, on any device and floating dtype (the fallback every other engine is not).

float32 on CPU without MKL packs, every precision on CUDA (tensor-core kernels for bf16 / fp16), and
the emulated precisions on CPU (bf16 without native kernels, fp16). Its step weights are the dense matrices;
both directions run interleaved in the one step loop (:mod:`.step_loop`), from Python. Its cost model: weights
of at most :data:`STACK_MAX_ELEMENTS` take one batched product for both directions (fewer operator calls per
step), through one copy of both directions' weights made once per version of the weights (:class:`Stacks`), not
at every call. :class:`~.mkl.MklEngine` is this engine with MKL packs for the products that gain from them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional, cast

import torch
from torch import nn

from ..lstm import ProjectedLSTMCell
from .base import Engine, Target, WeightPacks
from .step_loop import LayerSpec, LayerSteps, StepProduct, StepWeight

STACK_MAX_ELEMENTS = 1 << 18  # per weight: both directions' copies in one tensor cost little


class Stacks:
    """Both directions' copies of a small weight in one ``(D, ...)`` tensor, made once per version of the weights
    (:meth:`.base.WeightPacks.joint`: remade when any copy changes, as the engines' packs are); it lives and dies with
    the engine."""

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

    Its precision is its target's dtype (see :attr:`~.base.Engine.precision`); ``load_dtype`` and ``tolerance``
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

    def layer_steps(self, spec: LayerSpec) -> LayerSteps:
        """Dense step weights (stacked for small ones), or the packed forms :meth:`state_weights` gives."""
        cells = spec.cells
        inputs = [cell.input_weight for cell in cells]
        bias = [cell.bias + cell.forget_offset for cell in cells]
        packed_states = self.state_weights(cells, spec.batch)
        small = len(cells) > 1 and cells[0].state_weight.numel() <= STACK_MAX_ELEMENTS
        states: list[torch.Tensor] = [cell.state_weight for cell in cells]
        projections: list[torch.Tensor] = [cell.projection for cell in cells]
        state = StepProduct(
            packed_states if packed_states is not None else [StepWeight(w) for w in states],
            self.stacks.get(cells, "state_weight") if small and packed_states is None else None,
        )
        projection = StepProduct(
            [StepWeight(w) for w in projections], self.stacks.get(cells, "projection") if small else None
        )

        def input_projection(rows: torch.Tensor) -> torch.Tensor:
            out = rows.new_empty(len(inputs), rows.shape[1], inputs[0].shape[1])
            packs = self.input_packs(cells, rows.shape[1])
            for d, weight in enumerate(inputs):
                if packs is not None:
                    out[d] = self.packed_product(rows[d], weight.t(), bias[d], packs[d])
                else:
                    torch.addmm(bias[d], rows[d], weight, out=out[d])
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
