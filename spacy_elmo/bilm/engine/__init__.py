"""Inference engines: how the inference path's products and LSTM steps run, chosen once per module and target.

One small interface (:class:`Engine`, :class:`LayerSteps`), one implementation per kernel family, each
registered; :func:`engine_of` picks the first registered engine that serves a module's target (device, dtype,
int8), else :class:`PlainEngine`. Adding a path is one class and one :func:`register`:

- :class:`Int8Engine` (``int8.py``): int8 weights (``dtype="int8"``), the shared step loop
- :class:`Bf16Engine` (``bf16.py``): oneDNN-packed bfloat16 where bf16 is native, the shared step loop
- :class:`MklEngine` (``mkl.py``): float32 on CPU with MKL pre-packed weights for products of a few rows
- :class:`PlainEngine` (``plain.py``): torch's products on any device and dtype (CUDA, emulated precisions)

``packed_steps.py`` is the low-precision engines' step loop (:func:`..compiled_steps.lstm_steps`, compiled or
not), ``packs.py`` the packs an engine holds (remade when a weight changes). ``tests/test_engines.py`` checks
every engine available here against float32 by the same conformance test.
"""

from .base import Engine, LayerSteps, Target
from .bf16 import Bf16Engine
from .int8 import Int8Engine
from .mkl import MklEngine
from .plain import PlainEngine
from .registry import ENGINES, engine_of, prepare, register

__all__ = [
    "ENGINES",
    "Bf16Engine",
    "Engine",
    "Int8Engine",
    "LayerSteps",
    "MklEngine",
    "PlainEngine",
    "Target",
    "engine_of",
    "prepare",
    "register",
]
