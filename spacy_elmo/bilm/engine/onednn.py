"""The oneDNN engines: pre-packed weights for bfloat16 and float32 on CPU, one family of kernels and cost model.

Plain ``addmm`` re-packs the big operand on every call, which at a few rows costs about as much as the
arithmetic; oneDNN's pre-packed weights (``mkldnn::_reorder_linear_weight`` + ``mkldnn::_linear_pointwise``, the
ops torch's own CPU inductor uses) pack once, into one copy per weight. Two engines share the kernels:

- :class:`Bf16Engine`: bfloat16 where oneDNN has native bf16 kernels (:func:`..cpu_support.bf16_native`;
  elsewhere the plain engine serves bf16, emulated: the backend warns); the steps in the compiled loop.
- :class:`Float32Engine`: float32 where oneDNN's exact float32 products beat MKL's on this CPU
  (:func:`float32_kernels`); elsewhere :class:`~.mkl.MklEngine` serves float32. Its packs replace MKL's: one
  pack per weight. Its steps run in the compiled loop too (full float32: the same ops as from Python, without the
  interpreter). Training's fused biLSTM takes its packs for its per-step products where this family serves
  float32 (:func:`float32_step_packs`).

float32 products have two exact kernel families on x86 builds: MKL's GEMM and oneDNN's pre-packed products. Which is
faster depends on the CPU's maker: on AMD EPYC (Zen 4, Zen 5, and with every library capped to AVX2 as on Zen 3)
oneDNN's lead MKL's at the biLM's shapes, while on Intel MKL is at home (benchmarks/RESULTS.md, "float32 through
oneDNN's pre-packed products"). :func:`float32_kernels` decides from the CPU's vendor
(:func:`..cpu_support.cpu_vendor`), once per process, so every process on a machine takes the same kernels (a
resumed training run repeats the bits of an uninterrupted one), after a probe that oneDNN's products are exact to
float32 here (:func:`onednn_float32_available`); ``SPACY_ELMO_FLOAT32_KERNELS=onednn|mkl|auto`` forces either (for
debugging and A/B measurements).

The family's cost model (the constants below): weights from :data:`MIN_ELEMENTS` up, products of at most
:data:`MAX_ROWS` rows (bf16) or :data:`FLOAT32_MAX_ROWS` rows (float32; a step's state product from
:data:`FLOAT32_STATE_MIN_ROWS` rows); every other product is the plain one
(MKL's GEMM for float32), and a batch of more rows runs the plain engine's steps.
"""

from __future__ import annotations

import functools
import logging
import os
from typing import ClassVar, Optional

import torch
from torch import nn

from .. import cpu_support
from ..exact import exact_float32
from . import mkl
from .contract import Target, WeightPacks
from .plain import PlainEngine
from .step_loop import LayerSpec, LayerSteps, StepProduct, StepWeight, loop_kind

MIN_ELEMENTS = 1 << 18  # smaller weights gain nothing from a pack
MAX_ROWS = 256  # bf16: from a few hundred rows up plain bf16 GEMM is as fast (RESULTS.md, "Precision: float32 vs")
FLOAT32_MAX_ROWS = 512  # float32: where oneDNN's packed product leads MKL's (RESULTS.md, "float32 through oneDNN's")
FLOAT32_STATE_MIN_ROWS = 2  # float32 state products: at 1 row on one thread MKL's GEMV leads (the same section)
_PACK_FOR_ROWS = 32  # the row count oneDNN lays a pack out for; products of other row counts use it as it is
FLOAT32_KERNELS_ENV = "SPACY_ELMO_FLOAT32_KERNELS"  # onednn | mkl | auto (the default)
FLOAT32_KERNEL_CHOICES = ("onednn", "mkl", "auto")
# CPU vendors whose float32 products run faster on oneDNN's pre-packed kernels than on MKL's GEMM
# (benchmarks/RESULTS.md, "float32 through oneDNN's pre-packed products"); elsewhere (Intel, unknown) MKL's
ONEDNN_FLOAT32_VENDORS = ("AuthenticAMD",)
logger = logging.getLogger(__name__)  # a child of the "spacy_elmo" logger


def float32_kernels_forced() -> Optional[str]:
    """``"onednn"`` or ``"mkl"`` where ``SPACY_ELMO_FLOAT32_KERNELS`` forces one; None for ``auto`` or unset.

    Any other value raises ``ValueError`` naming the variable and the values it takes."""
    value = os.environ.get(FLOAT32_KERNELS_ENV, "auto").strip().lower() or "auto"
    if value not in FLOAT32_KERNEL_CHOICES:
        raise ValueError(
            f"{FLOAT32_KERNELS_ENV}={value!r} is not one of {', '.join(FLOAT32_KERNEL_CHOICES)}: "
            f"unset it or set one of those"
        )
    return None if value == "auto" else value


@functools.cache
def float32_kernels() -> str:
    """Which float32 products the float32 engines run in this process: ``"onednn"`` (this family's pre-packed
    kernels, :class:`Float32Engine`) or ``"mkl"`` (MKL's GEMM and its packs, :class:`~.mkl.MklEngine`). Decided
    once per process, never per product, and alike in every process on one machine.

    Forced by ``SPACY_ELMO_FLOAT32_KERNELS``; else oneDNN on the CPUs of :data:`ONEDNN_FLOAT32_VENDORS` where its
    pre-packed products are exact to float32 (:func:`onednn_float32_available`), MKL's elsewhere.
    """
    forced = float32_kernels_forced()
    if forced == "onednn" and not onednn_float32_available():
        logger.info("%s=onednn: this torch has no oneDNN pre-packed float32 products; MKL's run", FLOAT32_KERNELS_ENV)
        return "mkl"
    if forced is not None:
        return forced
    if cpu_support.cpu_vendor() in ONEDNN_FLOAT32_VENDORS and onednn_float32_available():
        return "onednn"
    return "mkl"


@functools.cache
def onednn_float32_available() -> bool:
    """Whether this torch has oneDNN's pre-packed float32 products and they are exact to float32 here (a probe
    against float64, rows 1, 3 and 64, under the package's full-float32 guard)."""
    try:
        if not torch.backends.mkldnn.is_available():
            return False
        generator = torch.Generator().manual_seed(0)
        weight = torch.randn(96, 128, generator=generator)
        with exact_float32("cpu"):
            pack = torch.ops.mkldnn._reorder_linear_weight(weight, 32)
            for rows in (1, 3, 64):
                x = torch.randn(rows, 128, generator=generator)
                got = torch.ops.mkldnn._linear_pointwise(x, pack, None, "none", [], "")
                expected = x.double() @ weight.double().t()
                scale = float((x.abs().double() @ weight.abs().double().t()).max())
                if got.shape != expected.shape or float((got.double() - expected).abs().max()) > 1e-5 * scale:
                    return False
    except (AttributeError, RuntimeError, TypeError):  # torch without oneDNN or these ops
        return False
    return True


def make_pack(out_in: torch.Tensor) -> Optional[torch.Tensor]:
    """``out_in`` (an ``(out, in)`` weight) in oneDNN's layout; None where this torch cannot."""
    try:
        return torch.ops.mkldnn._reorder_linear_weight(out_in.contiguous(), _PACK_FOR_ROWS)
    except (AttributeError, RuntimeError, TypeError):  # torch without oneDNN or these ops
        return None


def linear(rows: torch.Tensor, pack: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``rows @ out_in.T (+ bias)`` through ``pack`` (:func:`make_pack`), in the pack's dtype."""
    return torch.ops.mkldnn._linear_pointwise(rows, pack, bias, "none", [], "")


def float32_step_packs(out_in: torch.Tensor) -> Optional[list[torch.Tensor]]:
    """Packs of each direction's float32 ``(out, in)`` weight in ``out_in`` for products that repeat at every step
    (training's fused biLSTM, :mod:`spacy_elmo.train.network.packed_lstm`: made once per call), where this family serves
    float32 here (:func:`float32_kernels`); None where those products stay torch's (MKL's GEMM): MKL chosen, a weight
    below :data:`MIN_ELEMENTS`, or a torch that cannot pack."""
    if out_in[0].numel() < MIN_ELEMENTS or float32_kernels() != "onednn":
        return None
    packs = [make_pack(weight) for weight in out_in]
    return None if any(pack is None for pack in packs) else packs  # type: ignore[return-value]


class OneDnnEngine(PlainEngine):
    """oneDNN pre-packed weights for the products of at most :attr:`max_rows` rows by a big weight."""

    max_rows: ClassVar[int]
    state_min_rows: ClassVar[int] = 0  # the step's state products take the pack from this many rows

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
        return LayerSteps(spec, input_projection, state, projection, precision=self.precision)


class Bf16Engine(OneDnnEngine):
    """bfloat16 on CPU with native oneDNN kernels: pre-packed weights for products of a few hundred rows or fewer."""

    name = "onednn-bf16"
    load_dtype = torch.bfloat16
    tolerance = 2.5e-2
    max_rows = MAX_ROWS

    @classmethod
    def serves(cls, target: Target) -> bool:
        return (
            target.device.type == "cpu"
            and target.dtype == torch.bfloat16
            and not target.int8
            and cpu_support.bf16_native()
        )

    def describe(self) -> str:
        return f"bfloat16 products through oneDNN packs, {loop_kind()} LSTM time loop; this CPU: {cpu_support.facts()}"


class Float32Engine(OneDnnEngine):
    """float32 on CPU where oneDNN's exact pre-packed products beat MKL's (:func:`float32_kernels`)."""

    name = "onednn-float32"
    load_dtype = torch.float32
    max_rows = FLOAT32_MAX_ROWS
    state_min_rows = FLOAT32_STATE_MIN_ROWS

    @classmethod
    def serves(cls, target: Target) -> bool:
        return (
            mkl.ENABLED  # SPACY_ELMO_PACKED_WEIGHTS=0 turns every float32 pack off
            and target.device.type == "cpu"
            and target.dtype == torch.float32
            and not target.int8
            and float32_kernels() == "onednn"
        )

    @classmethod
    def choices(cls) -> dict[str, str]:
        return {"float32 kernels": float32_kernels()}

    def describe(self) -> str:
        return (
            f"float32 precision, oneDNN pre-packed products of up to {self.max_rows} rows, MKL's GEMM for more, "
            f"{loop_kind()} LSTM time loop"
        )
