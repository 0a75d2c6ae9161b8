"""Which engine serves a module: :data:`ENGINES`, in order, chosen once per module and target.

:func:`engine_of` is the one place an engine is chosen: the first of :data:`ENGINES` that serves the module's
:class:`~.base.Target` (the plain engine, last, serves every one). The engine is held by the module it serves
(the token encoder, the biLSTM: :class:`~.base.ModuleState`), so it lives and dies with the model: no registry
keyed by module. It is chosen again only when the module's target changes (``model.to(...)``,
:func:`.int8.quantize`) or the engine stops serving it (MKL packing turned off); its packs follow weight changes
by themselves (:class:`.base.WeightPacks`). :func:`prepare` is the load-time step (``load_bilm``): the model
made ready for a dtype by the engine family that loads it (a cast, or int8's quantization), and its engines
chosen there and then.
"""

from __future__ import annotations

from typing import TypeVar

import torch
from torch import nn

from ..threads import ForkSafeLock
from .base import Engine, Target, state_of
from .int8 import Int8Engine
from .mkl import MklEngine
from .onednn import Bf16Engine, Float32Engine
from .plain import PlainEngine

# every engine, in the order they are asked: the first that serves a target runs it; the plain engine serves all
ENGINES: tuple[type[Engine], ...] = (Bf16Engine, Int8Engine, Float32Engine, MklEngine, PlainEngine)
M = TypeVar("M", bound=nn.Module)
_lock = ForkSafeLock()


def choose(target: Target) -> type[Engine]:
    """The engine class for ``target`` on this machine."""
    return next(engine for engine in ENGINES if engine.serves(target))


def engine_of(module: nn.Module) -> Engine:
    """The engine serving ``module``'s inference products: the one it holds, or one chosen now (and held)."""
    target = Target.of(module)
    state = state_of(module)
    held = state.engine
    if held is not None and held.target == target and type(held).serves(target):
        return held
    with _lock:
        held = state.engine
        if held is None or held.target != target or not type(held).serves(target):
            held = state.engine = choose(target)(target)
        return held


def prepare(model: M, device: torch.device, dtype: torch.dtype, keep_float32: bool = False) -> M:
    """``model`` ready for inference in ``dtype`` on ``device`` (eval mode), its engines chosen.

    The first engine of :data:`ENGINES` that loads ``dtype`` makes it ready (:meth:`~.base.Engine.load`: int8
    quantizes a float32 model, its float32 matrices released unless ``keep_float32``; packs are then made on
    first use and follow weight changes); any other dtype: the model cast to it.
    """
    loader = next((engine for engine in ENGINES if engine.load_dtype == dtype), PlainEngine)
    model = loader.load(model, device, dtype, keep_float32=keep_float32)
    for module in model.children():
        engine_of(module)
    return model
