"""The interface every inference engine implements, and the facts it is chosen by.

An engine serves one module of the inference path (the token encoder, or the biLSTM) on one
:class:`Target` (device, dtype, int8 or not). It is chosen once (:func:`.registry.engine_of`) and then owns
everything that depends on that choice: the packs of the weights, how each product is computed (the
cost model: which row counts take which kernel), and the step loop of an LSTM layer (compiled or not).
The inference path (:mod:`..inference`) only asks it for products and layer steps; it never looks at a
dtype itself.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Optional

import torch
from torch import nn

from .. import compiled_steps
from ..low_precision import is_int8
from ..lstm import ProjectedLSTMCell


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


class LayerSteps(ABC):
    """One LSTM layer's products and time loop for D directions (D = 1 or 2), made once per layer and call.

    The inference path hands it each chunk of steps: :meth:`project_inputs` (one product per chunk), then
    :meth:`run` (the steps themselves, carrying ``h`` and ``c`` from chunk to chunk), then :meth:`finish`.
    """

    precision: Optional[str] = None  # "int8" | "bfloat16" where the compiled loop serves

    def __init__(
        self,
        cells: Sequence[ProjectedLSTMCell],
        c: torch.Tensor,
        h0: Optional[torch.Tensor],
        cell_clip: float,
        proj_clip: float,
        sigmoid_tanh: bool,
    ) -> None:
        """``c`` ``(D, batch, cell)``: the initial cells (owned: updated in place); ``h0`` ``(D, batch, proj)`` or
        None (the zero state); clips of 0 mean none; ``sigmoid_tanh``: see :func:`..compiled_steps.cell_update`."""
        self.cells, self.c, self.h_prev = cells, c, h0
        self.cell_clip, self.proj_clip, self.sigmoid_tanh = cell_clip, proj_clip, sigmoid_tanh
        self.compiled = self.compiled_loop()  # asked once per layer and call

    def compiled_loop(self) -> Optional[Callable[..., Any]]:
        """The compiled step loop these steps run (:func:`..compiled_steps.compiled`), or None (a Python loop)."""
        return None if self.precision is None else compiled_steps.compiled()

    @abstractmethod
    def project_inputs(self, rows: torch.Tensor, out: torch.Tensor) -> None:
        """``out[d] = rows[d] @ input_weight[d] + bias[d] + forget offset``: a chunk's input projections."""

    @abstractmethod
    def run(
        self,
        gx: torch.Tensor,
        out: torch.Tensor,
        last_c: torch.Tensor,
        step_sizes: list[int],
        step_offsets: list[int],
        start_row: int,
    ) -> None:
        """Steps ``step_sizes`` (packed rows from ``start_row`` on): gates from ``gx`` (overwritten), outputs into
        ``out`` ``(D, N, proj)``, the cells of rows that end into ``last_c``."""

    @abstractmethod
    def finish(self, last_c: torch.Tensor) -> None:
        """Write the cells of the rows still running after the last step into ``last_c``."""


class Engine(ABC):
    """How one module's inference products run on one :class:`Target`; one implementation per kernel family.

    Adding a path (a CUDA graph, fp16 on GPU) is one subclass and one :func:`.registry.register`. Each is
    checked against float32 by ``tests/test_engines.py`` within ``precision``'s bound.
    """

    name: ClassVar[str]  # shown in logs and test ids
    precision: ClassVar[str]  # "float32" | "bfloat16" | "float16" | "int8": what its results approximate
    load_dtype: ClassVar[torch.dtype]  # the dtype load_bilm takes for it (the conformance test builds by it)
    follows_weight_changes: ClassVar[bool] = True  # packs remade when a weight changes (int8: keep_float32 only)
    gate_chunk_elements: ClassVar[int] = 1 << 23  # rows x 4*cell per direction of one chunk of input projections

    def __init__(self, target: Target) -> None:
        self.target = target

    @classmethod
    @abstractmethod
    def serves(cls, target: Target) -> bool:
        """Whether this engine runs ``target`` here (its kernels exist on this CPU / device and build)."""

    @abstractmethod
    def describe(self) -> str:
        """A line for the debug log: the kernels this engine runs."""

    @abstractmethod
    def linear(self, layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        """``layer(x)`` for the token encoder (highway layers, projection)."""

    @abstractmethod
    def layer_steps(
        self,
        cells: Sequence[ProjectedLSTMCell],
        batch: int,
        c: torch.Tensor,
        h0: Optional[torch.Tensor],
        cell_clip: float,
        proj_clip: float,
        sigmoid_tanh: bool,
    ) -> LayerSteps:
        """The steps of one layer of ``cells`` (one per direction) for ``batch`` rows (see :class:`LayerSteps`)."""

    def __deepcopy__(self, memo: dict) -> None:
        """A copied module gets no engine (it chooses its own on first use): packs are never copied."""
        return None

    def __reduce__(self) -> tuple:
        return (_no_engine, ())


def _no_engine() -> None:
    """What a pickled engine comes back as: nothing (the unpickled module chooses its own)."""
    return None
