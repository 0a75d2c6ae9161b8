"""Which engine serves a module: :data:`ENGINES`, in order, chosen once per module and target; what a precision
without native kernels here says (:func:`warn_if_slow`); what this process runs (:func:`summary`).

:data:`ENGINES` is built from the precision table (:data:`.precisions.PRECISIONS`): each row's engines, in the
table's order, then the plain engine, which serves every target (CUDA, the emulated precisions). Engines of
different precisions never serve the same target, so only the order within a row matters (oneDNN's float32 before
MKL's). :func:`engine_of` is the one place an engine is chosen: the first of :data:`ENGINES` that serves the module's
:class:`~.contract.Target` (the plain engine, last, serves every one). The engine is held by the module it serves
(the token encoder, the biLSTM: :class:`~.contract.ModuleState`), so it lives and dies with the model: no registry
keyed by module. It is chosen again only when the module's target changes (``model.to(...)``,
:func:`.int8.quantize`) or the engine stops serving it (MKL packing turned off); its packs follow weight changes
by themselves (:class:`.contract.WeightPacks`). :func:`prepare` is the load-time step (``load_bilm``): the model
made ready for a dtype by the engine family that loads it (a cast, or int8's quantization), and its engines
chosen there and then.
"""

from __future__ import annotations

import logging
import warnings
from typing import Optional, TypeVar, Union, cast

import torch
from torch import nn

from .. import cpu_support
from ..threads import ForkSafeLock
from .contract import Engine, Target, state_of
from .plain import PlainEngine
from .precisions import PRECISIONS, Precision, auto_precision, of_dtype

logger = logging.getLogger("spacy_elmo")  # the package's logger: the emulated-precision line is the user's


def _engines_of(row: Precision) -> tuple[type[Engine], ...]:
    """The engine classes ``row`` names, each checked to be an :class:`~.contract.Engine`."""
    for cls, path in zip(row.engine_classes(), row.engines):
        if not issubclass(cls, Engine):
            raise TypeError(f"the precision table names {path}, which is no Engine of bilm/engine")
    return cast(tuple[type[Engine], ...], row.engine_classes())


# every engine, in the order they are asked: the first that serves a target runs it; the plain engine serves all
ENGINES: tuple[type[Engine], ...] = (*(cls for p in PRECISIONS for cls in _engines_of(p)), PlainEngine)
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

    The first engine of :data:`ENGINES` that loads ``dtype`` makes it ready (:meth:`~.contract.Engine.load`: int8
    quantizes a float32 model, its float32 matrices released unless ``keep_float32``; packs are then made on
    first use and follow weight changes); any other dtype: the model cast to it.
    """
    loader = next((engine for engine in ENGINES if engine.load_dtype == dtype), PlainEngine)
    model = loader.load(model, device, dtype, keep_float32=keep_float32)
    for module in model.children():
        engine_of(module)
    return model


def slow_precision_reason(precision: Union[Precision, torch.dtype], device: torch.device) -> Optional[str]:
    """Why ``precision`` (a row, or its torch dtype) would run emulated (slower than float32) on ``device``, with what
    to pick instead, or None: its row's probe (:meth:`.precisions.Precision.emulated_reason`)."""
    row = precision if isinstance(precision, Precision) else of_dtype(precision)
    return row.emulated_reason(device.type)


_warned: dict[str, bool] = {}


def warn_if_slow(precision: Union[Precision, torch.dtype], device: torch.device, stacklevel: int = 3) -> None:
    """Warn once per process and precision (:class:`..cpu_support.SlowPrecisionWarning`) when ``precision`` (a row,
    or its torch dtype) runs emulated on ``device``."""
    row = precision if isinstance(precision, Precision) else of_dtype(precision)
    reason = row.emulated_reason(device.type)
    if reason is None or _warned.get(row.name):
        return
    _warned[row.name] = True
    logger.info(reason)
    warnings.warn(reason, cpu_support.SlowPrecisionWarning, stacklevel=stacklevel)


def precision_support() -> dict[str, str]:
    """What this CPU does with each precision of the table, in its order, for ``spacy-elmo info``: the kernels its
    engines chose where they choose (by their own label, "float32 kernels"), else native or emulated by its row's
    probe (by its name)."""
    support: dict[str, str] = {}
    for row in PRECISIONS:
        chosen = {key: value for cls in _engines_of(row) for key, value in cls.choices().items()}
        support.update(chosen or {row.name: row.support()})
    return support


def summary() -> dict[str, object]:
    """What this process runs natively and which kernels each family chose, for ``spacy-elmo info`` and bug reports."""
    return {**cpu_support.facts(), **precision_support(), "auto (cpu)": auto_precision("cpu")}
