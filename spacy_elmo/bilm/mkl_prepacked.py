"""MKL pre-packed GEMM: pre-packed copies of big weight matrices, for CPU inference products with a few rows.

(Not to be confused with the *packed sequence layout* of :mod:`.inference`: here "pack" is MKL's
word for a weight matrix reordered once into its GEMM kernel's internal layout.)

The biLSTM multiplies the few active rows of each step by the same wide state matrix, and at
batch 1 the input projections and highway layers see ~20 rows. Plain sgemm re-packs the big
operand on every call; with so few rows that costs about as much as the arithmetic. MKL's packed
GEMM (``cblas_sgemm_pack`` / ``cblas_sgemm_compute``, exposed by torch as ``torch.ops.mkl``)
packs it once: faster products for 3-64 rows (3-32 with two threads; benchmarks/RESULTS.md)
and matrices from 2M elements up (smaller ones and tall-narrow ones do not gain: left alone).
The products agree with plain sgemm to float32 rounding, not bit for bit: MKL's packed kernels
may add the terms of a sum in another order (a few float32 epsilons of the largest product
apart; bit-identical only for some shapes and row counts).
Each pack is checked against plain sgemm on probes of 3 and 64 rows before use (within rtol
1e-5); on a mismatch, or a torch without MKL, the plain path runs.
Only the MKL float32 engine (:mod:`.engine.mkl`) uses these products, on the inference path: :class:`~.model.BiLM`
sends work there only when no gradient is needed, so the packs never see autograd.
Cost: one packed copy (larger than the matrix) per matrix used, made on first use by the engine that holds it
(one per version of the weight) and freed with the module. ``SPACY_ELMO_PACKED_WEIGHTS=0`` (or
``ENABLED = False``) turns it off.
"""

from __future__ import annotations

import os
from typing import Optional

import torch

ENABLED = os.environ.get("SPACY_ELMO_PACKED_WEIGHTS", "1").strip().lower() not in ("0", "false", "no", "off")
# rows for which the packed product beats plain sgemm here (MKL parallelises it less well)
MIN_ROWS, MAX_ROWS, MAX_ROWS_THREADED = 3, 64, 32
MIN_ELEMENTS = 1 << 21  # from 2M elements (e.g. 256 x 8192, 2048 x 2048) up
_PACK_FOR_ROWS = 32  # MKL's packed layout does not depend on it; the probe in make_pack checks that


def available() -> bool:
    """Whether this torch has MKL's packed GEMM ops (x86 builds with MKL)."""
    try:
        _ = (torch.ops.mkl._mkl_linear, torch.ops.mkl._mkl_reorder_linear_weight)  # raise where they are missing
    except (AttributeError, RuntimeError):
        return False
    return torch.backends.mkl.is_available()


def fits(rows: int) -> bool:
    """Whether a product with ``rows`` rows is faster packed: 3-64 rows on one thread, 3-32 on more."""
    return MIN_ROWS <= rows <= (MAX_ROWS if torch.get_num_threads() == 1 else MAX_ROWS_THREADED)


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
