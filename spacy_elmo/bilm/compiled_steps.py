"""The low-precision LSTM time loop of one direction (:func:`lstm_steps`), compiled by TorchScript: no Python, no
GIL between steps.

At batch 1 a step of a big model is two products and a dozen tiny ops. Run from Python, each op
pays the interpreter and a GIL release and re-acquire; with the two directions on two threads
they also queue for the GIL behind each other (measured: benchmarks/RESULTS.md). TorchScript's
interpreter runs the same aten ops (the packs of :mod:`.low_precision`) without holding the GIL.
int8 and bf16 run the same loop: they differ only in the form of each step weight (:class:`StepWeight`).

:func:`cell_update` (the gate and cell math) and :func:`retire_ended_rows` are the one copy of each:
every engine's step loop calls them (the compiled loop their compiled forms).
``torch.jit.script`` is in maintenance mode (torch 2.x warns that it is deprecated); where it is
missing or fails, :func:`compiled` returns None and the engines run :func:`lstm_steps` from Python,
the same function.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any, Callable, NamedTuple, Optional, Union

import torch

from .threads import ForkSafeLock

try:  # torch's custom class of packed linear weights (builds with quantized kernels)
    LinearPacked: Any = torch.classes.quantized.LinearPackedParamsBase
except (AttributeError, RuntimeError):  # no quantized kernels: int8 is refused before this is used
    LinearPacked = Any

_lock = ForkSafeLock()
_LOOP = "lstm_steps"
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


class StepWeight(NamedTuple):
    """One step product's weight in every form an engine may hold it; the loop uses the first one present.

    int8 (``int8``): packed params (the weight's one int8 copy), with whether it quantizes activations to 7 bits
    (``int8_reduce_range``, :mod:`.cpu_support`). Else a oneDNN pack (``onednn``) for at most ``onednn_max_rows``
    rows, and the plain ``dense`` ``(in, out)`` matrix for every other product.
    """

    dense: Optional[torch.Tensor]
    onednn: Optional[torch.Tensor]
    onednn_max_rows: int
    int8: Optional[LinearPacked]
    int8_reduce_range: bool


def _product(rows: torch.Tensor, weight: StepWeight) -> Optional[torch.Tensor]:
    """``rows @ weight`` through its int8 or oneDNN pack, as a new tensor; None where the dense matrix serves."""
    int8 = weight.int8
    if int8 is not None:
        return torch.ops.quantized.linear_dynamic(rows.contiguous(), int8, weight.int8_reduce_range)
    packed = weight.onednn
    if packed is not None and rows.shape[0] <= weight.onednn_max_rows:
        no_scalars: list[Optional[Union[int, float, complex]]] = []  # TorchScript's type of the op's Scalar?[]
        return torch.ops.mkldnn._linear_pointwise(rows, packed, None, "none", no_scalars, "")
    return None


def _dense(weight: StepWeight) -> torch.Tensor:
    dense = weight.dense
    assert dense is not None, "a step weight without a pack for these rows needs its dense matrix"
    return dense


def lstm_steps(
    gx: torch.Tensor,
    out: torch.Tensor,
    last_c: torch.Tensor,
    c: torch.Tensor,
    h_prev: Optional[torch.Tensor],
    step_sizes: list[int],
    step_offsets: list[int],
    start_row: int,
    state: StepWeight,
    projection: StepWeight,
    cell_clip: float,
    proj_clip: float,
    sigmoid_tanh: bool,
) -> tuple[Optional[torch.Tensor], torch.Tensor]:
    """Steps ``step_sizes`` of one direction (packed rows, 2-D tensors) whose products have packs; returns the
    last ``(h, c)``. The one low-precision step loop: int8 and bf16 differ only in their :class:`StepWeight`.

    ``gx`` holds the chunk's input projections from packed row ``start_row`` on, and becomes the gates in
    place; ``out`` receives the projected outputs; rows that end keep their cell in ``last_c``. ``h_prev``
    None is the zero state. A clip of 0 means none. Compiled by :func:`compiled`, or run as it is from Python
    where TorchScript is missing: the same ops in the same order either way.
    """
    for k in range(len(step_sizes)):
        n = step_sizes[k]
        c = retire_ended_rows(c, last_c, n)
        begin = step_offsets[k] - start_row
        g = gx[begin : begin + n]
        if h_prev is not None:  # None: the zero state adds nothing
            rows = h_prev[:n]
            recurrent = _product(rows, state)
            if recurrent is None:
                g.addmm_(rows, _dense(state))
            else:
                g.add_(recurrent)
        hid, c = cell_update(g, c, cell_clip, sigmoid_tanh)
        row = step_offsets[k]
        h = out[row : row + n]
        projected = _product(hid, projection)
        if projected is None:
            torch.mm(hid, _dense(projection), out=h)
        else:
            h.copy_(projected)
        if proj_clip != 0.0:
            h.clamp_(-proj_clip, proj_clip)
        h_prev = h
    return h_prev, c


def compiled() -> Optional[Callable[..., Any]]:
    """:func:`lstm_steps` compiled by TorchScript (once per process), or None where that is unavailable.

    One compiled loop serves every low-precision engine (int8 and bf16 differ only in their step weights).
    """
    if _LOOP in _compiled:
        return _compiled[_LOOP]
    with _lock:
        if _LOOP not in _compiled:
            try:
                with warnings.catch_warnings():  # torch 2.x flags torch.jit.script as deprecated
                    warnings.simplefilter("ignore", DeprecationWarning)
                    warnings.simplefilter("ignore", FutureWarning)
                    _compiled[_LOOP] = torch.jit.script(lstm_steps)
                logger.debug("LSTM steps: TorchScript loop compiled")
            except Exception as err:  # no TorchScript, or it cannot compile this: the Python loop runs instead
                _compiled[_LOOP] = None
                logger.debug(
                    "LSTM steps: TorchScript unavailable (%s: %s); the Python loop runs", type(err).__name__, err
                )
    return _compiled[_LOOP]


def loop_kind() -> str:
    """How the low-precision step loop runs here, for the engines' log lines."""
    return "TorchScript" if compiled() is not None else "Python (no TorchScript)"
