"""Which engine serves a module: the registered engines, chosen once per module and target.

:func:`engine_of` is the one place an engine is chosen. The engine is held by the module it serves (the
token encoder, the biLSTM), so it lives and dies with the model: no registry keyed by module. It is
chosen again only when the module's target changes (``model.to(...)``, :func:`..low_precision.quantize`)
or the engine stops serving it (MKL packing turned off); its packs follow weight changes by themselves.
:func:`prepare` is the load-time step (``load_bilm``): the model cast or quantized for a dtype, and its
engines chosen there and then.
"""

from __future__ import annotations

from typing import TypeVar

import torch
from torch import nn

from .. import low_precision
from ..threads import ForkSafeLock
from .base import Engine, Target
from .plain import PlainEngine

ENGINES: list[type[Engine]] = []  # the registered engines, in order: the first that serves a target runs it
E = TypeVar("E", bound=type[Engine])
M = TypeVar("M", bound=nn.Module)
HELD = "_spacy_elmo_engine"  # module attribute: the engine serving it
_lock = ForkSafeLock()


def register(engine: E) -> E:
    """Add ``engine`` to the engines :func:`engine_of` chooses from (a class decorator). The first registered
    engine that serves a target runs it (``engine/__init__.py`` imports the specific ones first); where none
    does, :class:`.plain.PlainEngine` runs."""
    ENGINES.append(engine)
    return engine


def choose(target: Target) -> type[Engine]:
    """The engine class for ``target`` on this machine."""
    return next((engine for engine in ENGINES if engine.serves(target)), PlainEngine)


def engine_of(module: nn.Module) -> Engine:
    """The engine serving ``module``'s inference products: the one it holds, or one chosen now (and held)."""
    target = Target.of(module)
    held = module.__dict__.get(HELD)
    if held is not None and held.target == target and type(held).serves(target):
        return held
    with _lock:
        held = module.__dict__.get(HELD)
        if held is None or held.target != target or not type(held).serves(target):
            held = choose(target)(target)
            module.__dict__[HELD] = held
        return held


def prepare(model: M, device: torch.device, dtype: torch.dtype, keep_float32: bool = False) -> M:
    """``model`` ready for inference in ``dtype`` on ``device`` (eval mode), its engines chosen.

    int8: float32 on CPU, weights packed and their float32 copies released (:func:`..low_precision.quantize`;
    ``keep_float32=True`` keeps them: packs are then made on first use and follow weight changes); any other
    dtype: the model cast to it.
    """
    if dtype == torch.int8:
        float32 = model.to(device=device, dtype=torch.float32).eval()
        model = low_precision.quantize(float32, keep_float32=keep_float32)
    else:
        model = model.to(device=device, dtype=dtype).eval()
    for module in model.children():
        engine_of(module)
    return model
