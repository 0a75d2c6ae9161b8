"""The low-precision LSTM time loop of one direction as TorchScript functions: no Python, no GIL between steps.

At batch 1 a step of a big model is two products and a dozen tiny ops. Run from Python, each op
pays the interpreter and a GIL release and re-acquire; with the two directions on two threads
they also queue for the GIL behind each other. Measured on "original" weights (int8), 22 steps,
both layers, one direction per thread: 38 ms alone and 49 ms with both directions at once from
Python, 25 ms and 26 ms through :func:`int8_steps`. TorchScript's interpreter runs the same aten
ops (the packs of :mod:`.low_precision`) without holding the GIL.

:func:`cell_update` (the gate and cell math) and :func:`retire_ended_rows` are the one copy of each:
the Python loop of :mod:`.inference` calls them for every precision, the compiled loops their
compiled forms.
``torch.jit.script`` is in maintenance mode (torch 2.x warns that it is deprecated); where it is
missing or fails, :func:`compiled` returns None and :mod:`.inference` runs its Python loop, which
computes the same function (the same ops in the same order).
"""

from __future__ import annotations

import logging
import warnings
from typing import Any, Callable, Optional, Union

import torch

from .threads import ForkSafeLock

try:  # torch's custom class of packed linear weights (builds with quantized kernels)
    LinearPacked: Any = torch.classes.quantized.LinearPackedParamsBase
except (AttributeError, RuntimeError):  # no quantized kernels: int8 is refused before this is used
    LinearPacked = Any

_lock = ForkSafeLock()
_compiled: dict[str, Optional[Callable[..., Any]]] = {}
logger = logging.getLogger(__name__)  # a child of the "spacy_elmo" logger


def cell_update(
    g: torch.Tensor, c: torch.Tensor, cell_clip: float, sigmoid_tanh: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """One step's gate and cell math: gates ``g`` (``[..., 4 * cell]``, TF order i, j, f, o; overwritten) and the
    previous cell ``c`` -> ``(o * tanh(c'), c')``, with ``c'`` clipped to ``cell_clip`` (0: no clip).

    ``sigmoid_tanh``: tanh(x) as 2 sigmoid(2x) - 1, one sigmoid over all four gate blocks (with
    several CPU threads torch sends tanh to MKL's vector math, whose thread team costs more than
    these few hundred elements; within 1e-7).
    """
    c_dim = c.shape[-1]
    i = g.narrow(-1, 0, c_dim)
    j = g.narrow(-1, c_dim, c_dim)
    f = g.narrow(-1, 2 * c_dim, c_dim)
    o = g.narrow(-1, 3 * c_dim, c_dim)
    if sigmoid_tanh:
        j.mul_(2)
        g.sigmoid_()
        c = torch.addcmul(f * c, i, j, value=2).sub_(i)
    else:
        j = torch.tanh(j)
        g.sigmoid_()  # i, f, o (the sigmoid of the j block is unused)
        c = torch.addcmul(f * c, i, j)
    if cell_clip != 0.0:
        c.clamp_(-cell_clip, cell_clip)
    if sigmoid_tanh:  # o * tanh(c) = 2 o sigmoid(2c) - o
        hid = torch.mul(c, 2).sigmoid_().mul_(o).mul_(2).sub_(o)
    else:
        hid = torch.tanh(c).mul_(o)
    return hid, c


def retire_ended_rows(c: torch.Tensor, last_c: torch.Tensor, n: int) -> torch.Tensor:
    """Rows ``n..`` of cell ``c`` (``[..., rows, cell]``) ended at the previous step: keep their final cell in
    ``last_c``; returns the ``n`` rows still running."""
    rows = c.shape[-2]
    if n < rows:
        last_c.narrow(-2, n, rows - n).copy_(c.narrow(-2, n, rows - n))
        c = c.narrow(-2, 0, n)
    return c


def int8_steps(
    gx: torch.Tensor,
    out: torch.Tensor,
    last_c: torch.Tensor,
    c: torch.Tensor,
    h_prev: Optional[torch.Tensor],
    step_sizes: list[int],
    step_offsets: list[int],
    start_row: int,
    state_few: LinearPacked,
    state_many: LinearPacked,
    projection_few: LinearPacked,
    projection_many: LinearPacked,
    few_rows: int,
    few_reduce_range: bool,
    many_reduce_range: bool,
    cell_clip: float,
    proj_clip: float,
    sigmoid_tanh: bool,
) -> tuple[Optional[torch.Tensor], torch.Tensor]:
    """Steps ``step_sizes`` of one int8 direction (packed rows, 2-D tensors); returns the last ``(h, c)``.

    ``gx`` holds the chunk's input projections from packed row ``start_row`` on, and becomes the
    gates in place; ``out`` receives the projected outputs; rows that end keep their cell in
    ``last_c``. ``h_prev`` None is the zero state. A clip of 0 means none. Products of at most
    ``few_rows`` rows take the ``*_few`` packs; ``*_reduce_range``: 7-bit activations for each kind of pack
    (:mod:`.cpu_support`: where the CPU's kernels saturate at full range). The same ops, in the same order, as
    ``inference._run_layer``'s Python loop.
    """
    for k in range(len(step_sizes)):
        n = step_sizes[k]
        c = retire_ended_rows(c, last_c, n)
        begin = step_offsets[k] - start_row
        g = gx[begin : begin + n]
        if h_prev is not None:  # None: the zero state adds nothing
            if n <= few_rows:
                g.add_(torch.ops.quantized.linear_dynamic(h_prev[:n].contiguous(), state_few, few_reduce_range))
            else:
                g.add_(torch.ops.quantized.linear_dynamic(h_prev[:n].contiguous(), state_many, many_reduce_range))
        hid, c = cell_update(g, c, cell_clip, sigmoid_tanh)
        row = step_offsets[k]
        h = out[row : row + n]
        if n <= few_rows:
            h.copy_(torch.ops.quantized.linear_dynamic(hid, projection_few, few_reduce_range))
        else:
            h.copy_(torch.ops.quantized.linear_dynamic(hid, projection_many, many_reduce_range))
        if proj_clip != 0.0:
            h.clamp_(-proj_clip, proj_clip)
        h_prev = h
    return h_prev, c


def bf16_steps(
    gx: torch.Tensor,
    out: torch.Tensor,
    last_c: torch.Tensor,
    c: torch.Tensor,
    h_prev: Optional[torch.Tensor],
    step_sizes: list[int],
    step_offsets: list[int],
    start_row: int,
    state: torch.Tensor,
    state_packed: Optional[torch.Tensor],
    projection: torch.Tensor,
    projection_packed: Optional[torch.Tensor],
    packed_max_rows: int,
    cell_clip: float,
    proj_clip: float,
    sigmoid_tanh: bool,
) -> tuple[Optional[torch.Tensor], torch.Tensor]:
    """:func:`int8_steps` for a bfloat16 direction: ``state`` ``(in, 4 * cell)`` and ``projection`` ``(cell, proj)``
    multiply through their oneDNN packs (``*_packed``, where there is one) for at most ``packed_max_rows`` rows."""
    no_scalars: list[Optional[Union[int, float, complex]]] = []  # TorchScript's type of the op's Scalar?[]
    for k in range(len(step_sizes)):
        n = step_sizes[k]
        c = retire_ended_rows(c, last_c, n)
        begin = step_offsets[k] - start_row
        g = gx[begin : begin + n]
        if h_prev is not None:
            if state_packed is not None and n <= packed_max_rows:
                g.add_(torch.ops.mkldnn._linear_pointwise(h_prev[:n], state_packed, None, "none", no_scalars, ""))
            else:
                g.addmm_(h_prev[:n], state)
        hid, c = cell_update(g, c, cell_clip, sigmoid_tanh)
        row = step_offsets[k]
        h = out[row : row + n]
        if projection_packed is not None and n <= packed_max_rows:
            h.copy_(torch.ops.mkldnn._linear_pointwise(hid, projection_packed, None, "none", no_scalars, ""))
        else:
            torch.mm(hid, projection, out=h)
        if proj_clip != 0.0:
            h.clamp_(-proj_clip, proj_clip)
        h_prev = h
    return h_prev, c


_LOOPS: dict[str, Callable[..., Any]] = {"int8": int8_steps, "bfloat16": bf16_steps}


def compiled(kind: str) -> Optional[Callable[..., Any]]:
    """The step loop for ``kind`` ("int8" | "bfloat16") compiled by TorchScript (once per process), or None where
    that is unavailable."""
    if kind in _compiled:
        return _compiled[kind]
    with _lock:
        if kind not in _compiled:
            try:
                with warnings.catch_warnings():  # torch 2.x flags torch.jit.script as deprecated
                    warnings.simplefilter("ignore", DeprecationWarning)
                    warnings.simplefilter("ignore", FutureWarning)
                    _compiled[kind] = torch.jit.script(_LOOPS[kind])
                logger.debug("%s LSTM steps: TorchScript loop compiled", kind)
            except Exception as err:  # no TorchScript, or it cannot compile this: the Python loop runs instead
                _compiled[kind] = None
                logger.debug(
                    "%s LSTM steps: TorchScript unavailable (%s: %s); the Python loop runs",
                    kind,
                    type(err).__name__,
                    err,
                )
    return _compiled[kind]
