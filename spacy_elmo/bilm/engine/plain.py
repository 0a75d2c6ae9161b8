"""The plain engine: torch's own products, on any device and floating dtype (the fallback every other engine is not).

float32 on CPU without MKL packs, every precision on CUDA (tensor-core kernels for bf16 / fp16), and
the emulated precisions on CPU (bf16 without native kernels, fp16). Both directions run interleaved in
one Python time loop (:class:`InterleavedSteps`); small weights take one batched product for both
directions (fewer operator calls per step). :class:`~.mkl.MklEngine` is this engine with MKL packs for
the products that gain from them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

import torch
from torch import nn

from .. import compiled_steps
from ..lstm import ProjectedLSTMCell
from .base import Engine, LayerSteps, Target

STACK_MAX_ELEMENTS = 1 << 18  # per weight: both directions' copies in one tensor cost little


class PlainEngine(Engine):
    """torch's products; the one engine that serves every target (chosen where no registered engine does)."""

    name = "plain"
    precision = "float32"  # and whatever the target's dtype is: the conformance test bounds by the dtype
    load_dtype = torch.float32

    @classmethod
    def serves(cls, target: Target) -> bool:
        return True

    def describe(self) -> str:
        return f"torch's {self.target.device.type} kernels, {str(self.target.dtype).replace('torch.', '')}"

    def linear(self, layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        return layer(x)

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
        return InterleavedSteps(self, cells, batch, c, h0, cell_clip, proj_clip, sigmoid_tanh)

    def input_packs(self, cells: Sequence[ProjectedLSTMCell], rows: int) -> Optional[list[torch.Tensor]]:
        """Packed input weights for a product of ``rows`` rows, one per cell; None: the plain products."""
        return None

    def state_packs(self, cells: Sequence[ProjectedLSTMCell], batch: int) -> Optional[list[torch.Tensor]]:
        """Packed state weights for steps of up to ``batch`` rows, one per cell; None: the plain products."""
        return None

    def packed_product(
        self, rows: torch.Tensor, out_in: torch.Tensor, bias: Optional[torch.Tensor], pack: torch.Tensor
    ) -> torch.Tensor:
        """``rows @ out_in.T (+ bias)`` through a pack of :meth:`input_packs` / :meth:`state_packs`."""
        raise NotImplementedError("the plain engine makes no packs")

    def packed_rows(self, rows: int) -> bool:
        """Whether a step product of ``rows`` rows takes the state packs (the cost model of a packing engine)."""
        return False


class InterleavedSteps(LayerSteps):
    """Both directions stacked in one Python time loop, products by the plain (or packed) float route.

    State product: the engine's packs where it has them and the step's rows gain, else one batched product
    for both directions for small weights, else one product per direction. Projection: batched for small
    weights, else per direction.
    """

    def __init__(
        self,
        engine: PlainEngine,
        cells: Sequence[ProjectedLSTMCell],
        batch: int,
        c: torch.Tensor,
        h0: Optional[torch.Tensor],
        cell_clip: float,
        proj_clip: float,
        sigmoid_tanh: bool,
    ) -> None:
        super().__init__(cells, c, h0, cell_clip, proj_clip, sigmoid_tanh)
        self.engine = engine
        self.input: list[torch.Tensor] = [cell.input_weight for cell in cells]
        self.bias = [cell.bias + cell.forget_offset for cell in cells]
        self.state: list[torch.Tensor] = [cell.state_weight for cell in cells]
        self.projection: list[torch.Tensor] = [cell.projection for cell in cells]
        self.state_packs = engine.state_packs(cells, batch)
        small = len(cells) > 1 and self.state[0].numel() <= STACK_MAX_ELEMENTS
        self.state_stack = torch.stack(self.state) if small and self.state_packs is None else None
        self.projection_stack = torch.stack(self.projection) if small else None

    def project_inputs(self, rows: torch.Tensor, out: torch.Tensor) -> None:
        packs = self.engine.input_packs(self.cells, rows.shape[1])
        for d, weight in enumerate(self.input):
            if packs is not None:
                out[d] = self.engine.packed_product(rows[d], weight.t(), self.bias[d], packs[d])
            else:
                torch.addmm(self.bias[d], rows[d], weight, out=out[d])

    def run(
        self,
        gx: torch.Tensor,
        out: torch.Tensor,
        last_c: torch.Tensor,
        step_sizes: list[int],
        step_offsets: list[int],
        start_row: int,
    ) -> None:
        c, h_prev = self.c, self.h_prev
        for n, row in zip(step_sizes, step_offsets):
            c = compiled_steps.retire_ended_rows(c, last_c, n)
            g = gx[:, row - start_row : row - start_row + n]  # the gates, computed in place in the input projections
            if h_prev is not None:  # None: the zero state adds nothing
                self._add_recurrent(g, h_prev, n)
            hid, c = compiled_steps.cell_update(g, c, self.cell_clip, self.sigmoid_tanh)
            h = out[:, row : row + n]
            self._project(hid, h)
            if self.proj_clip:
                h.clamp_(-self.proj_clip, self.proj_clip)
            h_prev = h
        self.c, self.h_prev = c, h_prev

    def finish(self, last_c: torch.Tensor) -> None:
        last_c[:, : self.c.shape[1]] = self.c

    def _add_recurrent(self, gates: torch.Tensor, h_prev: torch.Tensor, n: int) -> None:
        """``gates[d] += h_prev[d, :n] @ state[d]`` for every direction ``d``."""
        if self.state_packs is not None and self.engine.packed_rows(n):
            for d, pack in enumerate(self.state_packs):
                gates[d].add_(self.engine.packed_product(h_prev[d, :n], self.state[d].t(), None, pack))
        elif self.state_stack is not None:
            gates.baddbmm_(h_prev[:, :n], self.state_stack)
        else:
            for d, weight in enumerate(self.state):
                gates[d].addmm_(h_prev[d, :n], weight)

    def _project(self, hidden: torch.Tensor, out: torch.Tensor) -> None:
        """``out[d] = hidden[d] @ projection[d]`` for every direction ``d``."""
        if self.projection_stack is not None:
            torch.bmm(hidden, self.projection_stack, out=out)
        else:
            for d, weight in enumerate(self.projection):
                torch.mm(hidden[d], weight, out=out[d])
