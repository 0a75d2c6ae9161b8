"""Both directions of one projected-LSTM layer over packed sequences, with a hand-written backward pass.

Training's ``fused`` biLSTM used to call ``torch.nn.LSTM(proj_size=...)`` on a ``PackedSequence``.
On CPU, torch runs that recurrence as one autograd node per operation per time step, and the
backward pass of each per-step slice of the packed input allocates and zero-fills a gradient the
size of the whole sequence: that ``fill_`` was half of a training step (benchmarks/RESULTS.md,
"Training speed"). :func:`packed_bilstm_layer` computes the same function (``torch.nn.LSTM``'s
gate order i, f, g, o; its four parameter tensors per direction; no clipping) as one autograd
node:

- the forward and backward language models' layers run together, as a batch of two (one
  ``bmm`` per step serves both directions);
- the input projection is one GEMM over every time step, before the loop;
- the loop runs without autograd and keeps the gate activations; the backward loop computes only
  what is recurrent (the state gradients), and every weight gradient is then one GEMM over all
  steps.

``compute_dtype=torch.bfloat16`` (mixed precision): the GEMMs take bfloat16 operands (the
recurrent state, cell and every elementwise gate operation stay float32; weights and their
gradients are float32), and the whole-sequence GEMMs get a rounded row count (zero rows:
:mod:`.padded_rows`) so that oneDNN reuses their compiled kernels. With float32 it agrees with
``torch.nn.LSTM`` to float32 rounding (``tests/test_train_packed_lstm.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import torch

from .padded_rows import pad_rows, padded_rows


class _PackedBiLSTMLayer(torch.autograd.Function):
    """``(x, w_ih, w_hh, bias, w_hr)`` -> packed outputs; every tensor has a leading direction axis of 2."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        x: torch.Tensor,
        w_ih: torch.Tensor,
        w_hh: torch.Tensor,
        bias: torch.Tensor,
        w_hr: torch.Tensor,
        batch_sizes: Sequence[int],
        compute_dtype: torch.dtype,
    ) -> torch.Tensor:
        with torch.autocast("cpu", enabled=False):
            return _forward(ctx, x, w_ih, w_hh, bias, w_hr, batch_sizes, compute_dtype)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[Optional[torch.Tensor], ...]:  # type: ignore[override]
        with torch.autocast("cpu", enabled=False):
            return _backward(ctx, grad_out)


def _forward(
    ctx: Any,
    x: torch.Tensor,
    w_ih: torch.Tensor,
    w_hh: torch.Tensor,
    bias: torch.Tensor,
    w_hr: torch.Tensor,
    batch_sizes: Sequence[int],
    compute_dtype: torch.dtype,
) -> torch.Tensor:
    directions, rows, _ = x.shape
    cell = w_hh.shape[1] // 4
    proj = w_hr.shape[1]
    low = compute_dtype != torch.float32
    # bfloat16: the whole-sequence products get a rounded row count (zero rows), so that oneDNN reuses their kernels
    cast_x = pad_rows(x.to(compute_dtype), padded_rows(rows), dim=1) if low else x
    w_ih_c, w_hh_c, w_hr_c = (w.to(compute_dtype) for w in (w_ih, w_hh, w_hr))
    w_hh_t, w_hr_t = w_hh_c.transpose(1, 2), w_hr_c.transpose(1, 2)
    # the input's share of every step's gates, one GEMM for the whole sequence
    gates_x = torch.bmm(cast_x, w_ih_c.transpose(1, 2)).float() if low else torch.bmm(x, w_ih.transpose(1, 2))
    gates_x += bias[:, None, :]
    activations = gates_x  # overwritten step by step with the gates' activations
    cells = x.new_empty(directions, rows, cell)
    tanh_cells = x.new_empty(directions, rows, cell)
    out = x.new_empty(directions, rows, proj)
    h_prev = x.new_zeros(directions, rows, proj)  # the state each step read (for the recurrent weight's gradient)
    h: Optional[torch.Tensor] = None
    c: Optional[torch.Tensor] = None
    start = 0
    for n in batch_sizes:
        step = slice(start, start + n)
        gates = activations[:, step]
        if h is not None and c is not None:
            h_in = h[:, :n]
            h_prev[:, step] = h_in
            if low:
                gates += torch.bmm(h_in.to(compute_dtype), w_hh_t)
            else:
                gates.baddbmm_(h_in, w_hh_t)
        gates[..., : 2 * cell].sigmoid_()
        g = gates[..., 2 * cell : 3 * cell].tanh_()
        gates[..., 3 * cell :].sigmoid_()
        i, f, o = gates[..., :cell], gates[..., cell : 2 * cell], gates[..., 3 * cell :]
        c_new = cells[:, step]
        if c is not None:
            torch.mul(f, c[:, :n], out=c_new)
            c_new.addcmul_(i, g)
        else:
            torch.mul(i, g, out=c_new)
        t = tanh_cells[:, step]
        torch.tanh(c_new, out=t)
        m = o * t
        if low:
            out[:, step] = torch.bmm(m.to(compute_dtype), w_hr_t)
        else:
            torch.bmm(m, w_hr_t, out=out[:, step])
        h, c = out[:, step], c_new
        start += n
    ctx.batch_sizes = list(batch_sizes)
    ctx.rows = rows
    ctx.compute_dtype = compute_dtype
    ctx.save_for_backward(cast_x, w_ih_c, w_hh_c, w_hr_c, activations, cells, tanh_cells, h_prev)
    return out


def _backward(ctx: Any, grad_out: torch.Tensor) -> tuple[Optional[torch.Tensor], ...]:
    cast_x, w_ih_c, w_hh_c, w_hr_c, activations, cells, tanh_cells, h_prev = ctx.saved_tensors
    compute_dtype = ctx.compute_dtype
    low = compute_dtype != torch.float32
    directions, _, cell = cells.shape
    proj = w_hr_c.shape[1]
    batch_sizes: list[int] = ctx.batch_sizes
    rows, padded = ctx.rows, activations.shape[1]  # padded > rows: the products' zero rows (bfloat16)
    grad_gates = torch.empty_like(activations)
    grad_gates[:, rows:].zero_()
    grad_h_total = torch.empty_like(grad_out)  # each step's dL/dh: from the output and from the next step
    # the gradients flowing back from step t + 1; rows a later step did not have stay zero
    grad_h_next = grad_out.new_zeros(directions, batch_sizes[0], proj)
    grad_c_next = grad_out.new_zeros(directions, batch_sizes[0], cell)
    ends = [0]
    for n in batch_sizes:
        ends.append(ends[-1] + n)
    for index in range(len(batch_sizes) - 1, -1, -1):
        n, start = batch_sizes[index], ends[index]
        step = slice(start, start + n)
        grad_h = grad_h_total[:, step]
        torch.add(grad_out[:, step], grad_h_next[:, :n], out=grad_h)
        if low:
            grad_m = torch.bmm(grad_h.to(compute_dtype), w_hr_c).float()
        else:
            grad_m = torch.bmm(grad_h, w_hr_c)
        act = activations[:, step]
        i, f, g, o = act[..., :cell], act[..., cell : 2 * cell], act[..., 2 * cell : 3 * cell], act[..., 3 * cell :]
        t = tanh_cells[:, step]
        grad_act = grad_gates[:, step]  # first dL/d(activation), then dL/d(pre-activation)
        torch.mul(grad_m, t, out=grad_act[..., 3 * cell :])  # d o
        grad_c = grad_m * o * (1 - t * t)
        grad_c += grad_c_next[:, :n]
        torch.mul(grad_c, g, out=grad_act[..., :cell])  # d i
        torch.mul(grad_c, i, out=grad_act[..., 2 * cell : 3 * cell])  # d g
        if index > 0:
            c_prev = cells[:, ends[index - 1] : ends[index - 1] + n]
            torch.mul(grad_c, c_prev, out=grad_act[..., cell : 2 * cell])  # d f
            torch.mul(grad_c, f, out=grad_c_next[:, :n])
        else:
            grad_act[..., cell : 2 * cell].zero_()
        # sigmoid' = s (1 - s) for i, f, o; tanh' = 1 - g^2 for g
        derivative = act * (1 - act)
        derivative[..., 2 * cell : 3 * cell] = 1 - g * g
        grad_act *= derivative
        if index > 0:
            if low:
                grad_h_next[:, :n] = torch.bmm(grad_act.to(compute_dtype), w_hh_c)
            else:
                torch.bmm(grad_act, w_hh_c, out=grad_h_next[:, :n])
    # every weight gradient: one GEMM over all steps
    # o * tanh(c): the projection's input
    output_cells = (activations[:, :rows, 3 * cell :] * tanh_cells).to(compute_dtype)
    grad_gates_c = grad_gates.to(compute_dtype)
    grad_h_c = pad_rows(grad_h_total.to(compute_dtype), padded, dim=1)
    grad_w_hr = torch.bmm(grad_h_c.transpose(1, 2), pad_rows(output_cells, padded, dim=1)).float()
    grad_w_hh = torch.bmm(grad_gates_c.transpose(1, 2), pad_rows(h_prev.to(compute_dtype), padded, dim=1)).float()
    grad_w_ih = torch.bmm(grad_gates_c.transpose(1, 2), cast_x).float()
    grad_bias = grad_gates.sum(1)
    grad_x = torch.bmm(grad_gates_c, w_ih_c).float()[:, :rows]
    return grad_x, grad_w_ih, grad_w_hh, grad_bias, grad_w_hr, None, None


def packed_bilstm_layer(
    x: torch.Tensor,
    w_ih: torch.Tensor,
    w_hh: torch.Tensor,
    bias: torch.Tensor,
    w_hr: torch.Tensor,
    batch_sizes: Sequence[int],
    compute_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """One projected-LSTM layer of both directions over packed data, from a zero state.

    ``x`` ``(2, rows, input)``: each direction's packed input (time-major, a shrinking batch of
    ``batch_sizes`` rows per step, as in a ``PackedSequence``); ``w_ih`` ``(2, 4 cell, input)``,
    ``w_hh`` ``(2, 4 cell, proj)``, ``bias`` ``(2, 4 cell)`` (``bias_ih + bias_hh``), ``w_hr``
    ``(2, proj, cell)``: ``torch.nn.LSTM``'s parameters of each direction, gates in its order (i, f,
    g, o). Returns the packed outputs ``(2, rows, proj)``. ``compute_dtype``: the GEMMs' operand
    type (float32, or bfloat16 for mixed precision).
    """
    if compute_dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"compute_dtype must be torch.float32 or torch.bfloat16, not {compute_dtype}")
    if sum(batch_sizes) != x.shape[1]:
        raise ValueError(f"batch_sizes add up to {sum(batch_sizes)} rows, the input has {x.shape[1]}")
    out: torch.Tensor = _PackedBiLSTMLayer.apply(x, w_ih, w_hh, bias, w_hr, list(batch_sizes), compute_dtype)
    return out


__all__ = ["packed_bilstm_layer"]
