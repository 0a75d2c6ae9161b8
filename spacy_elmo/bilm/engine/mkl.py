"""The MKL float32 engine: the plain engine with MKL pre-packed weights where products of a few rows gain.

It serves float32 on CPU where oneDNN's pre-packed float32 products are not faster
(:func:`.onednn.float32_kernels`; where they are, :class:`~.onednn.Float32Engine` serves, its packs instead
of these: one pack per weight either way).

MKL pre-packed GEMM: pre-packed copies of big weight matrices, for CPU inference products with a few rows.
(Not to be confused with the *step layout* of :mod:`..inference`: "pack" here is MKL's word for a weight matrix
reordered once into its GEMM kernel's internal layout.)

The biLSTM multiplies the few active rows of each step by the same wide state matrix, and at
batch 1 the input projections and highway layers see ~20 rows. Plain sgemm re-packs the big
operand on every call; with so few rows that costs about as much as the arithmetic. MKL's packed
GEMM (``cblas_sgemm_pack`` / ``cblas_sgemm_compute``, exposed by torch as ``torch.ops.mkl``)
packs it once. This family's cost model (the constants below): faster products for
``MIN_ROWS``..``MAX_ROWS`` rows (3-64; 3-32 with two threads; benchmarks/RESULTS.md) and weights from
``MIN_ELEMENTS`` (2M) up (smaller ones and tall-narrow ones do not gain: left alone); the LSTM's input and
state weights, the highway layers and the token projection. Everything else takes the plain engine's route.

The products agree with plain sgemm to float32 rounding, not bit for bit: MKL's packed kernels
may add the terms of a sum in another order (a few float32 epsilons of the largest product
apart; bit-identical only for some shapes and row counts).
Each pack is checked against plain sgemm on probes of 3 and 64 rows before use (within rtol
1e-5); on a mismatch, or a torch without MKL, the plain path runs. Only the inference path uses them
(:class:`~..model.BiLM` sends work there only when no gradient is needed), so the packs never see autograd.
Cost: one packed copy (larger than the matrix) per matrix used, made on first use by the engine that holds it
(one per version of the weight, :class:`.contract.WeightPacks`) and freed with the module.
``SPACY_ELMO_PACKED_WEIGHTS=0`` (or ``ENABLED = False``) turns it off.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Optional, cast

import torch
from torch import nn

from ...groundwork.probe import has_feature
from ..lstm import ProjectedLSTMCell
from .contract import Target, WeightPacks
from .plain import PlainEngine
from .step_loop import StepWeight

ENABLED = os.environ.get("SPACY_ELMO_PACKED_WEIGHTS", "1").strip().lower() not in ("0", "false", "no", "off")
# rows for which the packed product beats plain sgemm here (MKL parallelises it less well)
MIN_ROWS, MAX_ROWS, MAX_ROWS_THREADED = 3, 64, 32
MIN_ELEMENTS = 1 << 21  # from 2M elements (e.g. 256 x 8192, 2048 x 2048) up
_PACK_FOR_ROWS = 32  # MKL's packed layout does not depend on it; the probe in make_pack checks that


def available() -> bool:
    """Whether this torch has MKL's packed GEMM ops (x86 builds with MKL)."""
    ops = ("ops.mkl._mkl_linear", "ops.mkl._mkl_reorder_linear_weight")
    return all(has_feature(torch, op) for op in ops) and torch.backends.mkl.is_available()


def max_rows() -> int:
    """The most rows a product takes packed on this thread: 64 on one thread, 32 on more."""
    return MAX_ROWS if torch.get_num_threads() == 1 else MAX_ROWS_THREADED


def fits(rows: int) -> bool:
    """Whether a product with ``rows`` rows is faster packed (:data:`MIN_ROWS`..:func:`max_rows`)."""
    return MIN_ROWS <= rows <= max_rows()


def linear(rows: torch.Tensor, out_in: torch.Tensor, bias: Optional[torch.Tensor], pack: torch.Tensor) -> torch.Tensor:
    """``rows @ out_in.T (+ bias)`` with ``pack`` the packed form of ``out_in``."""
    return torch.ops.mkl._mkl_linear(rows, pack, out_in, bias, rows.shape[0])


def make_pack(out_in: torch.Tensor) -> Optional[torch.Tensor]:
    """Pack ``out_in`` (an ``(out, in)`` float32 weight); None unless packed products match plain sgemm on probes
    of the smallest and largest row counts."""
    try:
        pack = torch.ops.mkl._mkl_reorder_linear_weight(out_in.contiguous(), _PACK_FOR_ROWS)
        for rows in (MIN_ROWS, MAX_ROWS):
            probe = torch.linspace(-1.0, 1.0, rows * out_in.shape[1]).reshape(rows, out_in.shape[1])
            got = linear(probe, out_in, None, pack)
            expected = probe @ out_in.t()
            scale = float((probe.abs() @ out_in.abs().t()).max())
            if got.shape != expected.shape or not torch.allclose(got, expected, rtol=1e-5, atol=1e-6 * max(scale, 1.0)):
                return None
    except (AttributeError, RuntimeError, TypeError):  # torch without MKL, these ops or this signature
        return None
    return pack


class MklEngine(PlainEngine):
    """float32 on CPU, MKL's pre-packed GEMM for the products of a few rows by a big weight."""

    name = "mkl-float32"

    def __init__(self, target: Target) -> None:
        super().__init__(target)
        self.packs: WeightPacks[torch.Tensor] = WeightPacks(make_pack)

    @classmethod
    def serves(cls, target: Target) -> bool:
        return ENABLED and target.device.type == "cpu" and target.dtype == torch.float32 and not target.int8

    def describe(self) -> str:
        if available():
            return f"float32 precision, MKL pre-packed GEMM for {MIN_ROWS}-{MAX_ROWS}-row products"
        return "float32 precision, no MKL packs (plain matmul)"

    def pack(self, owner: nn.Module, name: str, out_in: torch.Tensor) -> Optional[torch.Tensor]:
        """The packed form of parameter ``owner.<name>`` (``out_in``: its ``(out, in)`` view); None for a weight too
        small to gain, or where packing is unavailable."""
        if getattr(owner, name).numel() < MIN_ELEMENTS:
            return None
        return self.packs.get(owner, name, out_in)

    def linear(self, layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        if fits(x.shape[0]):
            pack = self.pack(layer, "weight", layer.weight)
            if pack is not None:
                return linear(x, layer.weight, layer.bias, pack)
        return layer(x)

    def input_packs(self, cells: Sequence[ProjectedLSTMCell], rows: int) -> Optional[list[torch.Tensor]]:
        return self._cell_packs(cells, "input_weight") if fits(rows) else None

    def state_weights(self, cells: Sequence[ProjectedLSTMCell], batch: int) -> Optional[list[StepWeight]]:
        packs = self._cell_packs(cells, "state_weight") if batch >= MIN_ROWS else None
        if packs is None:
            return None
        most = max_rows()  # this thread's count: the layer's steps run on it
        return [
            StepWeight(cell.state_weight, mkl=pack, min_rows=MIN_ROWS, max_rows=most)
            for cell, pack in zip(cells, packs)
        ]

    def packed_product(
        self, rows: torch.Tensor, out_in: torch.Tensor, bias: Optional[torch.Tensor], pack: torch.Tensor
    ) -> torch.Tensor:
        return linear(rows, out_in, bias, pack)

    def _cell_packs(self, cells: Sequence[ProjectedLSTMCell], name: str) -> Optional[list[torch.Tensor]]:
        """Each cell's pack of ``name``, or None where any is unavailable."""
        packs = [self.pack(cell, name, getattr(cell, name).t()) for cell in cells]
        return None if any(p is None for p in packs) else cast(list[torch.Tensor], packs)
