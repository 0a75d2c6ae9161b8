"""The interface every inference engine implements, the facts it is chosen by, and what a module holds for it.

An engine serves one module of the inference path (the token encoder, or the biLSTM) on one
:class:`Target` (device, dtype, int8 or not). It is chosen once (:func:`.registry.engine_of`) and then owns
everything that depends on that choice: which kernels its family runs on this CPU, the packs of the weights, how
each product is computed (its family's cost model: which row counts and weight sizes take which kernel, constants
of its own file), and the step weights of an LSTM layer, which the one step loop (:mod:`.step_loop`) runs. The
inference path (:mod:`..inference`) only asks it for products and layer steps; it never looks at a dtype itself.

The packs an engine holds (:class:`WeightPacks`) are one per weight, remade whenever the weight changes. A pack is
keyed by its owner module and parameter name, and is valid for one version of that parameter (the same tensor
object, its ``(data_ptr, _version)``: an optimizer step, an in-place edit under ``torch.no_grad()`` or a reload
makes a new one). The engine lives on the module it serves, so its packs are freed with the model. Looked up once
per layer and call, not per step; the lock is taken only to make a pack (two direction threads asking for the
same one make it once).
"""

from __future__ import annotations

import weakref
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Generic, Optional, TypeVar

import torch
from torch import nn

from ..threads import ForkSafeLock
from .precisions import of_dtype
from .step_loop import LayerSpec, LayerSteps

M = TypeVar("M", bound=nn.Module)
STATE = "_spacy_elmo_engine_state"  # the one module attribute the engines keep: a ModuleState


@dataclass
class ModuleState:
    """What the engine layer keeps on a module (``module.__dict__[STATE]``), so that it lives and dies with the model.

    ``int8``: :func:`.int8.quantize` marked it (its products are int8); ``released``: the int8 packs that replaced
    its released float32 weights, by parameter name; ``engine``: the engine serving it (the token encoder, the
    biLSTM), chosen by :func:`.registry.engine_of`. A copied or unpickled module keeps the first two and chooses
    its engine anew (an engine copies and pickles as None).
    """

    int8: bool = False
    released: dict[str, Any] = field(default_factory=dict)
    engine: Optional[Engine] = None


def state_of(module: nn.Module) -> ModuleState:
    """``module``'s :class:`ModuleState`, made empty on first use."""
    state = module.__dict__.get(STATE)
    if state is None:
        state = module.__dict__[STATE] = ModuleState()
    return state


def is_int8(module: nn.Module) -> bool:
    """Whether :func:`.int8.quantize` marked ``module`` (or the model holding it) for int8 products."""
    state = module.__dict__.get(STATE)
    return state is not None and state.int8


@dataclass(frozen=True)
class Target:
    """What an engine is chosen by: the module's device and floating dtype, and whether it was quantized to int8."""

    device: torch.device
    dtype: torch.dtype
    int8: bool

    @classmethod
    def of(cls, module: nn.Module) -> Target:
        """The target of ``module``: its first parameter that holds data (int8 releases its weights to meta)."""
        first = next((p for p in module.parameters() if not p.is_meta), None)
        if first is None:
            return cls(torch.device("meta"), torch.float32, is_int8(module))
        return cls(first.device, first.dtype, is_int8(module))

    @property
    def precision(self) -> str:
        """What results here approximate: the name of its precision's row (``"float32"``, ``"bfloat16"``,
        ``"int8"``...)."""
        return of_dtype(self.dtype, self.int8).name


class Engine(ABC):
    """How one module's inference products run on one :class:`Target`; one subclass per kernel family.

    Adding one (fp16 on CPU, a CUDA graph) is one subclass, in its family's file, named by its precision's row of
    :data:`.precisions.PRECISIONS` (which orders :data:`.registry.ENGINES`); its ``tolerance`` is what
    ``tests/bilm/test_engines.py`` holds it to against float32, on every device it serves.
    """

    name: ClassVar[str]  # shown in logs and test ids
    load_dtype: ClassVar[torch.dtype]  # the dtype load_bilm takes for it (the conformance test builds by it)
    # each layer's largest error over its activation scale against float32; None: float32 rounding
    tolerance: ClassVar[Optional[float]] = None
    gate_chunk_elements: ClassVar[int] = 1 << 23  # rows x 4*cell per direction of one chunk of input projections

    def __init__(self, target: Target) -> None:
        self.target = target

    @property
    def precision(self) -> str:
        """What this engine's results approximate here (``"float32"``, ``"bfloat16"``, ``"int8"``...)."""
        return self.target.precision

    @classmethod
    @abstractmethod
    def serves(cls, target: Target) -> bool:
        """Whether this engine runs ``target`` here (its kernels exist on this CPU / device and build)."""

    @classmethod
    def load(cls, model: M, device: torch.device, dtype: torch.dtype, keep_float32: bool = False) -> M:
        """``model`` ready for this engine in ``dtype`` on ``device`` (eval mode): a cast, unless a family does more."""
        return model.to(device=device, dtype=dtype).eval()

    @classmethod
    def choices(cls) -> dict[str, str]:
        """The kernels this family chose in this process where it chooses among several (its line of ``spacy-elmo
        info``: :func:`.registry.summary`), by what it serves; empty where it runs one set of kernels."""
        return {}

    @abstractmethod
    def describe(self) -> str:
        """A line for the debug log: the kernels this engine runs."""

    @abstractmethod
    def linear(self, layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        """``layer(x)`` for the token encoder (highway layers, projection)."""

    @abstractmethod
    def layer_steps(self, spec: LayerSpec) -> LayerSteps:
        """The products and steps of one layer call (see :class:`.step_loop.LayerSteps`)."""

    def __deepcopy__(self, memo: dict) -> None:
        """A copied module gets no engine (it chooses its own on first use): packs are never copied."""
        return None

    def __reduce__(self) -> tuple:
        return (_no_engine, ())


def _no_engine() -> None:
    """What a pickled engine comes back as: nothing (the unpickled module chooses its own)."""
    return None


P = TypeVar("P")
_lock = ForkSafeLock()  # held only while a pack is made


@dataclass
class _Entry(Generic[P]):
    params: tuple[weakref.ref[torch.Tensor], ...]
    versions: tuple[tuple[int, int], ...]
    pack: Optional[P]

    def holds(self, params: tuple[torch.Tensor, ...], versions: tuple[tuple[int, int], ...]) -> bool:
        """Whether the pack was made from these very parameters, each at this version."""
        return self.versions == versions and all(ref() is param for ref, param in zip(self.params, params))


class WeightPacks(Generic[P]):
    """``make(out_in)`` of each weight, once per version of the weight; ``make`` may return None (no pack)."""

    def __init__(self, make: Callable[[torch.Tensor], Optional[P]]) -> None:
        self._make = make
        self._entries: dict[tuple[tuple[int, ...], str], _Entry[P]] = {}

    def get(self, owner: nn.Module, name: str, out_in: torch.Tensor) -> Optional[P]:
        """The pack of parameter ``owner.<name>`` (``out_in``: its ``(out, in)`` view), made now if missing or stale."""
        return self.joint((owner,), name, lambda: self._make(out_in.detach()))

    def joint(self, owners: Sequence[nn.Module], name: str, make: Callable[[], Optional[P]]) -> Optional[P]:
        """``make()``'s pack of the parameters ``<owner>.<name>`` of ``owners`` together (one per owner, e.g. both
        directions' copies stacked), made now if missing or if any of them changed."""
        params = tuple(getattr(owner, name) for owner in owners)
        key = (tuple(id(owner) for owner in owners), name)
        versions = tuple((param.data_ptr(), param._version) for param in params)
        entry = self._entries.get(key)
        if entry is not None and entry.holds(params, versions):
            return entry.pack
        with _lock:
            entry = self._entries.get(key)
            if entry is None or not entry.holds(params, versions):
                entry = _Entry(tuple(weakref.ref(param) for param in params), versions, make())
                self._entries[key] = entry
            return entry.pack

    def __len__(self) -> int:
        return len(self._entries)
