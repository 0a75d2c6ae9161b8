"""Which engine serves a module: :data:`ENGINES`, in order, chosen once per module and target; what a precision
without native kernels here says (:func:`warn_if_slow`); what this process runs (:func:`summary`).

:data:`ENGINES` is built from the precision table (:data:`.precisions.PRECISIONS`): each row's engines, in the
table's order, then the plain engine, which serves every target (CUDA, the emulated precisions). Engines of
different precisions never serve the same target, so only the order within a row matters (oneDNN's float32 before
MKL's). :func:`engine_of` is the one place an engine is chosen: the first of :data:`ENGINES` that serves the module's
:class:`~.base.Target` (the plain engine, last, serves every one). The engine is held by the module it serves
(the token encoder, the biLSTM: :class:`~.base.ModuleState`), so it lives and dies with the model: no registry
keyed by module. It is chosen again only when the module's target changes (``model.to(...)``,
:func:`.int8.quantize`) or the engine stops serving it (MKL packing turned off); its packs follow weight changes
by themselves (:class:`.base.WeightPacks`). :func:`prepare` is the load-time step (``load_bilm``): the model
made ready for a dtype by the engine family that loads it (a cast, or int8's quantization), and its engines
chosen there and then.
"""

from __future__ import annotations

import importlib
import logging
import warnings
from typing import Optional, TypeVar

import torch
from torch import nn

from .. import cpu_support
from ..threads import ForkSafeLock
from .base import Engine, Target, state_of
from .plain import PlainEngine
from .precisions import PRECISIONS, auto_precision

logger = logging.getLogger("spacy_elmo")  # the package's logger: the emulated-precision line is the user's


def _engine_class(path: str) -> type[Engine]:
    """The engine class a row of the precision table names: ``"onednn.Bf16Engine"``, class Bf16Engine of
    ``bilm/engine/onednn.py``."""
    module, _, name = path.rpartition(".")
    found = getattr(importlib.import_module(f"{__package__}.{module}"), name)
    if not (isinstance(found, type) and issubclass(found, Engine)):
        raise TypeError(f"the precision table names {path}, which is no Engine of bilm/engine")
    return found


# every engine, in the order they are asked: the first that serves a target runs it; the plain engine serves all
ENGINES: tuple[type[Engine], ...] = (*(_engine_class(path) for p in PRECISIONS for path in p.engines), PlainEngine)
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


def slow_precision_reason(dtype: torch.dtype, device: torch.device) -> Optional[str]:
    """Why ``dtype`` would run emulated (slower than float32) on ``device``, with what to pick instead, or None: its
    row's probe (:attr:`.precisions.Precision.native`, a fact of :mod:`..cpu_support`) says this CPU has no native
    kernels for it."""
    name = str(dtype).replace("torch.", "")
    row = next((p for p in PRECISIONS if p.torch_name == name), None)
    if device.type != "cpu" or row is None or row.native is None or getattr(cpu_support, row.native)():
        return None
    return row.emulated.format(flags=cpu_support.isa_flags(), aten=cpu_support.aten_capability())


_warned: dict[str, bool] = {}


def warn_if_slow(dtype: torch.dtype, device: torch.device, stacklevel: int = 3) -> None:
    """Warn once per process and precision (:class:`..cpu_support.SlowPrecisionWarning`) when ``dtype`` runs emulated
    on ``device``."""
    reason = slow_precision_reason(dtype, device)
    if reason is None or _warned.get(str(dtype)):
        return
    _warned[str(dtype)] = True
    logger.info(reason)
    warnings.warn(reason, cpu_support.SlowPrecisionWarning, stacklevel=stacklevel)


def summary() -> dict[str, object]:
    """What this process runs natively and which kernels each family chose, for ``spacy-elmo info`` and bug reports."""
    chosen = {key: value for engine in ENGINES for key, value in engine.choices().items()}
    return {**cpu_support.facts(), **chosen, "auto (cpu)": auto_precision("cpu")}
