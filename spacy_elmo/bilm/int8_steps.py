"""The int8 LSTM time loop of one direction as a TorchScript function: no Python, no GIL between steps.

At batch 1 an int8 step is two ~0.3 ms products and a dozen tiny ops. Run from Python, each op
pays the interpreter and a GIL release and re-acquire; with the two directions on two threads
they also queue for the GIL behind each other. Measured on "original" weights, 22 steps, both
layers, one direction per thread: 38 ms alone and 49 ms with both directions at once from
Python, 25 ms and 26 ms through this loop. TorchScript's interpreter runs the same aten ops
(``quantized::linear_dynamic`` on the packs of :mod:`.low_precision`) without holding the GIL.

``torch.jit.script`` is in maintenance mode (torch 2.x warns that it is deprecated); where it is
missing or fails, :func:`compiled` returns None and :mod:`.inference` runs its Python loop, which
computes the same function (the same ops in the same order).
"""
from __future__ import annotations

import threading
import warnings
from typing import Any, Callable, List, Optional, Tuple

import torch

from .threads import at_fork_in_child

try:  # torch's custom class of packed linear weights (x86 and ARM builds with quantized kernels)
    LinearPacked: Any = torch.classes.quantized.LinearPackedParamsBase
except (AttributeError, RuntimeError):  # no quantized kernels: int8 is refused before this is used
    LinearPacked = Any
_lock = threading.Lock()
_compiled: Optional[Callable[..., Any]] = None
_tried = False


@at_fork_in_child
def _new_lock_after_fork() -> None:
    global _lock
    _lock = threading.Lock()


def int8_steps(
    gx: torch.Tensor,
    out: torch.Tensor,
    last_c: torch.Tensor,
    c: torch.Tensor,
    h_prev: Optional[torch.Tensor],
    step_sizes: List[int],
    step_offsets: List[int],
    start_row: int,
    state_few: LinearPacked,
    state_many: LinearPacked,
    projection_few: LinearPacked,
    projection_many: LinearPacked,
    few_rows: int,
    cell_clip: float,
    proj_clip: float,
    sigmoid_tanh: bool,
) -> Tuple[Optional[torch.Tensor], torch.Tensor]:
    """Steps ``step_sizes`` of one direction (packed rows, 2-D tensors); returns the last ``(h, c)``.

    ``gx`` holds the chunk's input projections from packed row ``start_row`` on, and becomes the
    gates in place; ``out`` receives the projected outputs; rows that end keep their cell in
    ``last_c``. ``h_prev`` None is the zero state. A clip of 0 means none. The same ops, in the same
    order, as ``inference._run_layer``'s Python loop.
    """
    c_dim = c.shape[1]
    for k in range(len(step_sizes)):
        n = step_sizes[k]
        if n < c.shape[0]:  # rows n.. ended at the previous step: keep their final cell
            last_c[n : c.shape[0]] = c[n:]
            c = c[:n]
        begin = step_offsets[k] - start_row
        g = gx[begin : begin + n]
        if h_prev is not None:
            rows = h_prev[:n].contiguous()
            packed = state_few if n <= few_rows else state_many
            g.add_(torch.ops.quantized.linear_dynamic(rows, packed, False))
        i = g[:, 0:c_dim]
        j = g[:, c_dim : 2 * c_dim]
        f = g[:, 2 * c_dim : 3 * c_dim]
        o = g[:, 3 * c_dim :]
        if sigmoid_tanh:  # tanh(x) = 2 sigmoid(2x) - 1: one sigmoid over all four gate blocks
            j.mul_(2)
            g.sigmoid_()
            c = torch.addcmul(f * c, i, j, value=2).sub_(i)
        else:
            j = torch.tanh(j)
            g.sigmoid_()
            c = torch.addcmul(f * c, i, j)
        if cell_clip != 0.0:
            c.clamp_(-cell_clip, cell_clip)
        if sigmoid_tanh:
            hid = torch.mul(c, 2).sigmoid_().mul_(o).mul_(2).sub_(o)
        else:
            hid = torch.tanh(c).mul_(o)
        row = step_offsets[k]
        h = out[row : row + n]
        packed = projection_few if n <= few_rows else projection_many
        h.copy_(torch.ops.quantized.linear_dynamic(hid, packed, False))
        if proj_clip != 0.0:
            h.clamp_(-proj_clip, proj_clip)
        h_prev = h
    return h_prev, c


def compiled() -> Optional[Callable[..., Any]]:
    """:func:`int8_steps` compiled by TorchScript (once per process), or None where that is unavailable."""
    global _compiled, _tried
    if _tried:
        return _compiled
    with _lock:
        if not _tried:
            try:
                with warnings.catch_warnings():  # torch 2.x flags torch.jit.script as deprecated
                    warnings.simplefilter("ignore", DeprecationWarning)
                    warnings.simplefilter("ignore", FutureWarning)
                    _compiled = torch.jit.script(int8_steps)
            except Exception:  # no TorchScript, or it cannot compile this: the Python loop runs instead
                _compiled = None
            _tried = True
    return _compiled
