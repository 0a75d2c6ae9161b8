"""The MKL float32 engine: the plain engine with MKL pre-packed weights where products of a few rows gain.

float32 on CPU with packing on (:data:`..mkl_prepacked.ENABLED`). Its cost model
(:mod:`..mkl_prepacked`): weights from ``MIN_ELEMENTS`` up, products of ``MIN_ROWS``..``MAX_ROWS`` rows
(fewer with several threads); the LSTM's input and state weights, the highway layers and the token
projection. Everything else takes the plain engine's route. The packs follow weight changes
(:class:`.packs.WeightPacks`) and agree with plain sgemm to float32 rounding (each is probed first).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional, cast

import torch
from torch import nn

from .. import mkl_prepacked
from ..lstm import ProjectedLSTMCell
from .base import Target
from .packs import WeightPacks
from .plain import PlainEngine
from .registry import register


@register
class MklEngine(PlainEngine):
    """float32 on CPU, MKL's pre-packed GEMM for the products of a few rows by a big weight."""

    name = "mkl-float32"

    def __init__(self, target: Target) -> None:
        super().__init__(target)
        self.packs: WeightPacks[torch.Tensor] = WeightPacks(mkl_prepacked.make_pack)

    @classmethod
    def serves(cls, target: Target) -> bool:
        return (
            mkl_prepacked.ENABLED and target.device.type == "cpu" and target.dtype == torch.float32 and not target.int8
        )

    def describe(self) -> str:
        if mkl_prepacked.available():
            return "float32 precision, MKL pre-packed GEMM for 3-64-row products"
        return "float32 precision, no MKL packs (plain matmul)"

    def pack(self, owner: nn.Module, name: str, out_in: torch.Tensor) -> Optional[torch.Tensor]:
        """The packed form of parameter ``owner.<name>`` (``out_in``: its ``(out, in)`` view); None for a weight too
        small to gain, or where packing is unavailable."""
        if getattr(owner, name).numel() < mkl_prepacked.MIN_ELEMENTS:
            return None
        return self.packs.get(owner, name, out_in)

    def linear(self, layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        if mkl_prepacked.fits(x.shape[0]):
            pack = self.pack(layer, "weight", layer.weight)
            if pack is not None:
                return mkl_prepacked.linear(x, layer.weight, layer.bias, pack)
        return layer(x)

    def input_packs(self, cells: Sequence[ProjectedLSTMCell], rows: int) -> Optional[list[torch.Tensor]]:
        return self._cell_packs(cells, "input_weight") if mkl_prepacked.fits(rows) else None

    def state_packs(self, cells: Sequence[ProjectedLSTMCell], batch: int) -> Optional[list[torch.Tensor]]:
        return self._cell_packs(cells, "state_weight") if batch >= mkl_prepacked.MIN_ROWS else None

    def packed_product(
        self, rows: torch.Tensor, out_in: torch.Tensor, bias: Optional[torch.Tensor], pack: torch.Tensor
    ) -> torch.Tensor:
        return mkl_prepacked.linear(rows, out_in, bias, pack)

    def packed_rows(self, rows: int) -> bool:
        return mkl_prepacked.fits(rows)

    def _cell_packs(self, cells: Sequence[ProjectedLSTMCell], name: str) -> Optional[list[torch.Tensor]]:
        """Each cell's pack of ``name``, or None where any is unavailable."""
        packs = [self.pack(cell, name, getattr(cell, name).t()) for cell in cells]
        return None if any(p is None for p in packs) else cast(list[torch.Tensor], packs)
