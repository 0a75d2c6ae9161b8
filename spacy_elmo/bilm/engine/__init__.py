"""Inference engines: how the inference path's products and LSTM steps run, chosen once per module and target.

One small interface (:class:`Engine`, :class:`LayerSpec`), one file per kernel family holding its kernels, its
kernel choices (which library serves which product on this CPU), packs, step weights and cost model (its size
thresholds), and one ordered table of precisions (:mod:`.precisions`: :data:`PRECISIONS`), each row naming the
engines that serve it; :data:`ENGINES` is built from it, the plain engine last, and :func:`engine_of` picks the first
that serves a module's target (device, dtype, int8). Adding a precision is its engine file and one row:

- :class:`Bf16Engine` (``onednn.py``): oneDNN-packed bfloat16 where bf16 is native
- :class:`Float32Engine` (``onednn.py``): oneDNN-packed float32 where its exact products beat MKL's on this CPU
  (the family's choice, once per process: :func:`.onednn.float32_kernels`)
- :class:`MklEngine` (``mkl.py``): float32 on CPU with MKL pre-packed weights for products of a few rows
- :class:`Int8Engine` (``int8.py``): int8 weights (``precision="int8"``): quantize, the int8 kernels of each role
  (fbgemm or oneDNN, 7-bit activations where they saturate: :func:`.int8.int8_kernels`), their packs
- :class:`PlainEngine` (``plain.py``): torch's products on any device and dtype (CUDA, emulated precisions)

Shared by all: ``step_loop.py``, the one LSTM time loop (:class:`LayerSteps`; compiled by TorchScript for the
low-precision engines), and ``base.py``: the interface, the one attribute the engines keep on a module, and the
packs an engine holds (:class:`~.contract.WeightPacks`, remade when a weight changes). ``tests/bilm/test_engines.py``
checks every engine available here against float32 by the same conformance test, on every device present.

The names are imported on first use (PEP 562), so that the precision table (:mod:`.precisions`) is read without
torch: the command line checks a ``dtype`` before torch is imported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...groundwork.lazy_exports import lazy_exports

if TYPE_CHECKING:  # pragma: no cover
    from .contract import Engine, ModuleState, Target
    from .int8 import Int8Engine
    from .mkl import MklEngine
    from .onednn import Bf16Engine, Float32Engine
    from .plain import PlainEngine
    from .precisions import PRECISIONS, Precision
    from .registry import ENGINES, engine_of, precision_support, prepare, summary, warn_if_slow
    from .step_loop import LayerSpec, LayerSteps, StepProduct, StepWeight

# each public name -> the module that defines it, imported when the name is first used
_HOMES = {
    "ENGINES": ".registry",
    "PRECISIONS": ".precisions",
    "Bf16Engine": ".onednn",
    "Engine": ".contract",
    "Float32Engine": ".onednn",
    "Int8Engine": ".int8",
    "LayerSpec": ".step_loop",
    "LayerSteps": ".step_loop",
    "MklEngine": ".mkl",
    "ModuleState": ".contract",
    "PlainEngine": ".plain",
    "Precision": ".precisions",
    "StepProduct": ".step_loop",
    "StepWeight": ".step_loop",
    "Target": ".contract",
    "engine_of": ".registry",
    "precision_support": ".registry",
    "prepare": ".registry",
    "summary": ".registry",
    "warn_if_slow": ".registry",
}

__all__ = [
    "ENGINES",
    "PRECISIONS",
    "Bf16Engine",
    "Engine",
    "Float32Engine",
    "Int8Engine",
    "LayerSpec",
    "LayerSteps",
    "MklEngine",
    "ModuleState",
    "PlainEngine",
    "Precision",
    "StepProduct",
    "StepWeight",
    "Target",
    "engine_of",
    "precision_support",
    "prepare",
    "summary",
    "warn_if_slow",
]


__getattr__, __dir__ = lazy_exports(__name__, _HOMES, globals())
