"""Inference engines: how the inference path's products and LSTM steps run, chosen once per module and target.

One small interface (:class:`Engine`, :class:`LayerSpec`), one file per kernel family holding its kernels, packs,
step weights and cost model (its size thresholds), and one ordered list, :data:`ENGINES`; :func:`engine_of`
picks the first that serves a module's target (device, dtype, int8). Adding a family is one class and one line
in :data:`ENGINES`:

- :class:`Bf16Engine` (``onednn.py``): oneDNN-packed bfloat16 where bf16 is native
- :class:`Int8Engine` (``int8.py``): int8 weights (``dtype="int8"``): quantize, the int8 kernels, their packs
- :class:`Float32Engine` (``onednn.py``): oneDNN-packed float32 where its exact products beat MKL's on this CPU
  (decided once per process, :func:`..cpu_support.float32_kernels`)
- :class:`MklEngine` (``mkl.py``): float32 on CPU with MKL pre-packed weights for products of a few rows
- :class:`PlainEngine` (``plain.py``): torch's products on any device and dtype (CUDA, emulated precisions)

Shared by all: ``step_loop.py``, the one LSTM time loop (:class:`LayerSteps`; compiled by TorchScript for the
low-precision engines), and ``base.py``: the interface, the one attribute the engines keep on a module, and the
packs an engine holds (:class:`~.base.WeightPacks`, remade when a weight changes). ``tests/bilm/test_engines.py``
checks every engine available here against float32 by the same conformance test, on every device present.
"""

from .base import Engine, ModuleState, Target
from .int8 import Int8Engine
from .mkl import MklEngine
from .onednn import Bf16Engine, Float32Engine
from .plain import PlainEngine
from .registry import ENGINES, engine_of, prepare
from .step_loop import LayerSpec, LayerSteps, StepProduct, StepWeight

__all__ = [
    "ENGINES",
    "Bf16Engine",
    "Engine",
    "Float32Engine",
    "Int8Engine",
    "LayerSpec",
    "LayerSteps",
    "MklEngine",
    "ModuleState",
    "PlainEngine",
    "StepProduct",
    "StepWeight",
    "Target",
    "engine_of",
    "prepare",
]
