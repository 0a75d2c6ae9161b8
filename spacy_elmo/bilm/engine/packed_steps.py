"""The step loop of the low-precision engines (int8, bf16): one direction at a time through
:func:`..compiled_steps.lstm_steps`, compiled by TorchScript where it can be, else the same function from Python.

The engines differ only in their products: each hands this class its input projection and, per direction,
the :class:`..compiled_steps.StepWeight` of the state and projection products (packs looked up once per
layer and call, never per step).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Callable, Optional

import torch

from .. import compiled_steps
from ..compiled_steps import StepWeight
from ..lstm import ProjectedLSTMCell
from .base import LayerSteps

# input_product(d, rows, bias, out): out = rows @ input_weight[d] + bias, direction d's input projection
InputProduct = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], None]


class PackedSteps(LayerSteps):
    """Each direction's steps in :func:`..compiled_steps.lstm_steps`, with its own ``(h, c)`` carried over chunks."""

    def __init__(
        self,
        precision: str,
        cells: Sequence[ProjectedLSTMCell],
        c: torch.Tensor,
        h0: Optional[torch.Tensor],
        cell_clip: float,
        proj_clip: float,
        sigmoid_tanh: bool,
        input_product: InputProduct,
        weights: Sequence[tuple[StepWeight, StepWeight]],
    ) -> None:
        """``input_product(d, rows, bias, out)``: direction ``d``'s input projection of ``rows`` plus ``bias``
        into ``out``; ``weights[d]``: its state and projection weights."""
        self.precision = precision  # before the base class asks for the compiled loop
        super().__init__(cells, c, h0, cell_clip, proj_clip, sigmoid_tanh)
        self.input_product, self.weights = input_product, list(weights)
        self.bias = [cell.bias + cell.forget_offset for cell in cells]
        self.c_d = [c[d] for d in range(len(cells))]
        self.h_d: list[Optional[torch.Tensor]] = [None if h0 is None else h0[d] for d in range(len(cells))]
        self.loop = self.compiled or compiled_steps.lstm_steps

    def project_inputs(self, rows: torch.Tensor, out: torch.Tensor) -> None:
        for d in range(len(self.cells)):
            self.input_product(d, rows[d], self.bias[d], out[d])

    def run(
        self,
        gx: torch.Tensor,
        out: torch.Tensor,
        last_c: torch.Tensor,
        step_sizes: list[int],
        step_offsets: list[int],
        start_row: int,
    ) -> None:
        for d, (state, projection) in enumerate(self.weights):
            self.h_d[d], self.c_d[d] = self.loop(
                gx[d],
                out[d],
                last_c[d],
                self.c_d[d],
                self.h_d[d],
                step_sizes,
                step_offsets,
                start_row,
                state,
                projection,
                self.cell_clip,
                self.proj_clip,
                self.sigmoid_tanh,
            )

    def finish(self, last_c: torch.Tensor) -> None:
        for d, c_last in enumerate(self.c_d):
            last_c[d, : c_last.shape[0]] = c_last
