"""Both directions of one projected-LSTM layer over packed sequences, with a hand-written backward pass.

Why not ``torch.nn.LSTM(proj_size=...)`` on a ``PackedSequence``: on CPU, torch runs that recurrence as
one autograd node per operation per time step, and the backward pass of each per-step slice of the
packed input allocates and zero-fills a gradient the size of the whole sequence (what that costs:
benchmarks/RESULTS.md, "Training speed: the fused biLSTM's recurrence"). :func:`packed_bilstm_layer`
computes the same function (``torch.nn.LSTM``'s four parameter tensors per direction; no clipping) as
one autograd node.

The cell's arithmetic is :func:`spacy_elmo.bilm.lstm.cell_step`'s, the one reference
(``tests/train/test_train_packed_lstm.py`` holds each step to it); it is written out here, not called, because
the backward pass needs what the reference does not keep (each gate's derivative factors, stored per row
as the forward loop runs) and the gates sit in another order with g's weights doubled:

- the forward and backward language models' layers run together, as a batch of two (one
  ``bmm`` per step serves both directions);
- each step's gates are one product of ``[input | previous state | 1]`` with ``[w_ih | w_hh | bias]``
  (the bias's gradient then comes out of the weight-gradient product);
- the gates are kept in the order (o, i, f, g) inside: one product with the cell gradient covers
  i, f and g;
- every tanh is computed as ``2 sigmoid(2x) - 1``: torch's ``tanh`` is slower per number than its
  ``sigmoid`` on the AMD CPUs measured (benchmarks/RESULTS.md, "Training speed: the softmax kernels and
  tanh from sigmoid"). The candidate gate g's weights are kept doubled inside,
  so that one sigmoid covers all four gates; its stored derivative and weight gradient are scaled
  back to match (scaling by 2 is exact);
- the forward loop runs without autograd and stores, per row, the factors the backward pass
  needs (each gate's derivative, o (1 - tanh(c)^2), f): the backward loop is then a few products
  per step, and every weight gradient is one GEMM over all steps.

- float32 on a CPU whose float32 products run on oneDNN's pre-packed kernels (the oneDNN engine family's choice,
  :func:`spacy_elmo.bilm.engine.onednn.float32_step_packs`: AMD CPUs, one choice per machine): the two per-step
  products by a big weight (the gates' forward, the state gradient's backward) go through that family's packs, made
  once per call (the weights change once per optimizer step) and reused at every step; the products over all steps
  stay MKL's.

A training step is bound by memory traffic more than by arithmetic on a 2-core machine, so the
loops work on small per-step tensors and write each step's record once.

``compute_dtype=torch.bfloat16`` (mixed precision): the GEMMs take bfloat16 operands (the bias
too, as autocast's ``linear`` does) and the stored per-row records are bfloat16 (half the traffic);
the recurrent cell state and every elementwise gate operation stay float32, and so do the weights
and their gradients. Each step's
products get a rounded row count (rows past the step are ignored; rows past the data are zeros,
:mod:`.padded_rows`) so that oneDNN reuses their compiled kernels. With float32 everything is
float32 and it agrees with ``torch.nn.LSTM`` to float32 rounding (``tests/train/test_train_packed_lstm.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any, Optional

import torch

from ...bilm.engine import onednn
from ...groundwork.probe import feature
from .padded_rows import row_rounding


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
        with _without_autocast(x.device):
            return _forward(ctx, x, w_ih, w_hh, bias, w_hr, batch_sizes, compute_dtype)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[Optional[torch.Tensor], ...]:  # type: ignore[override]
        with _without_autocast(grad_out.device):
            return _backward(ctx, grad_out)


def _has_autocast_before_2_4(kind: str) -> bool:
    """Whether device type ``kind`` has autocast, in a torch without ``torch.amp.is_autocast_available`` (before
    2.4): CPU and CUDA."""
    return kind in ("cpu", "cuda")


def _without_autocast(device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """The autocast of ``device``'s type turned off: the products' precision is ``compute_dtype``'s, never an
    autocast's (a user's ``torch.autocast("cuda")`` would run the forward products in float16, the backward's in
    float32). Nothing for a device type without autocast (``meta``)."""
    available = feature(torch, "amp.is_autocast_available", _has_autocast_before_2_4)
    if not available(device.type):
        return contextlib.nullcontext()
    return torch.autocast(device.type, enabled=False)


# internal gate order (o, i, f, g): the sigmoid gates are one block, and so are the three gates
# the cell gradient reaches (i, f, g); torch's order is (i, f, g, o)
_TO_INTERNAL = [3, 0, 1, 2]
_TO_TORCH = [1, 2, 3, 0]
# g's weights are doubled inside: tanh(x) = 2 sigmoid(2x) - 1 (the gradients are scaled back; x2 is exact)
_G_SCALE = 2.0
# the bias as a weight column (its input a column of ones), widened with zero columns to a multiple of 16:
# bfloat16 products with an odd inner dimension ran slower (benchmarks/RESULTS.md, "Training speed: per-row records")
BIAS_COLUMNS = 16


def _reorder(blocks: torch.Tensor, cell: int, order: list[int]) -> torch.Tensor:
    """Permute the four gate blocks of axis 1 (``4 * cell`` long)."""
    return blocks.unflatten(1, (4, cell))[:, order].flatten(1, 2)


def _tanh_from_sigmoid_(s: torch.Tensor) -> torch.Tensor:
    """``s = sigmoid(2x)`` overwritten with ``tanh(x) = 2 s - 1``."""
    return s.mul_(2).sub_(1)


def _tanh(x: torch.Tensor) -> torch.Tensor:
    """``tanh(x)`` as ``2 sigmoid(2x) - 1`` (a new tensor): equal to float32 rounding, faster where tanh is slow."""
    return _tanh_from_sigmoid_(torch.mul(x, 2).sigmoid_())


def _float_view(storage: torch.Tensor, step: slice) -> tuple[torch.Tensor, bool]:
    """A float32 tensor for ``storage[:, step]`` (on its device): the slice itself, or a new one to copy in
    (``True``)."""
    slab = storage[:, step]
    if slab.dtype == torch.float32:
        return slab, False
    return slab.new_empty(slab.shape, dtype=torch.float32), True


def _step_packs(out_in: torch.Tensor, like: torch.Tensor, compute_dtype: torch.dtype) -> Optional[list[torch.Tensor]]:
    """Packs of each direction's ``(out, in)`` weight in ``out_in`` for the per-step products, as the float32 engine
    family decides (:func:`~spacy_elmo.bilm.engine.onednn.float32_step_packs`); None where those products stay
    torch's ``bmm`` (MKL's GEMM): bfloat16, another device, or that family's no."""
    if compute_dtype != torch.float32 or like.device.type != "cpu":
        return None
    return onednn.float32_step_packs(out_in)


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
    directions, rows, width_in = x.shape
    cell = w_hh.shape[1] // 4
    proj = w_hr.shape[1]
    pad = row_rounding(compute_dtype)
    # row slots: every (padded) step's product reads inside them; those past the data stay zero
    slots = pad(rows + pad(batch_sizes[0]))
    # [w_ih | w_hh | bias | zeros]: the bias rides the product on a column of ones (its gradient too)
    bias_block = torch.cat([bias[..., None], bias.new_zeros(directions, 4 * cell, BIAS_COLUMNS - 1)], 2)
    weights = _reorder(torch.cat([w_ih, w_hh, bias_block], 2), cell, _TO_INTERNAL)
    weights[:, 3 * cell :] *= _G_SCALE
    weights = weights.to(compute_dtype)
    weights_t = weights.transpose(1, 2)
    w_hr_c = w_hr.to(compute_dtype)
    w_hr_t = w_hr_c.transpose(1, 2)
    # oneDNN packs of the gates' per-step product [w_ih | w_hh | bias] (one pack per weight per call: the weights
    # change once per optimizer step); the backward makes its own of w_hh, only when a gradient is asked for
    gate_packs = _step_packs(weights, x, compute_dtype)
    # each step's product reads [its input | the state it starts from | 1, 0, ...]
    inputs = x.new_zeros(directions, slots, width_in + proj + BIAS_COLUMNS, dtype=compute_dtype)
    inputs[:, :rows, :width_in] = x
    inputs[:, :rows, width_in + proj] = 1
    # what the backward pass reads, per row: the four gates' derivative factors, o (1 - tanh(c)^2), f
    records = x.new_empty(directions, slots, 6 * cell, dtype=compute_dtype)
    projected = x.new_zeros(directions, slots, cell, dtype=compute_dtype)  # o tanh(c), the projection's input
    out = x.new_empty(directions, rows, proj)
    c: Optional[torch.Tensor] = None
    start = 0
    for index, n in enumerate(batch_sizes):
        step = slice(start, start + n)
        if gate_packs is None:
            gates = torch.bmm(inputs[:, start : start + pad(n)], weights_t)[:, :n].float().sigmoid_()
        else:
            gates = torch.stack([onednn.linear(inputs[d, step], pack) for d, pack in enumerate(gate_packs)]).sigmoid_()
        sig = gates[..., : 3 * cell]
        g = _tanh_from_sigmoid_(gates[..., 3 * cell :])  # tanh of g's pre-activation (its weights are doubled)
        o, i, f = sig[..., :cell], sig[..., cell : 2 * cell], sig[..., 2 * cell :]
        i_g = i * g
        c_new = i_g if c is None else torch.addcmul(i_g, f, c[:, :n])
        tanh_c = _tanh(c_new)
        m = o * tanh_c
        projected[:, step] = m
        h = torch.bmm(projected[:, start : start + pad(n)], w_hr_t)[:, :n]
        out[:, step] = h
        if index + 1 < len(batch_sizes):
            following = batch_sizes[index + 1]
            inputs[:, start + n : start + n + following, width_in : width_in + proj] = h[:, :following]
        # the derivative factors: sigmoid' = s (1 - s), tanh' = 1 - t^2
        record, copy = _float_view(records, step)
        slope = torch.addcmul(sig, sig, sig, value=-1)
        torch.mul(slope[..., :cell], tanh_c, out=record[..., :cell])  # o
        torch.mul(slope[..., cell : 2 * cell], g, out=record[..., cell : 2 * cell])  # i
        if c is None:
            record[..., 2 * cell : 3 * cell].zero_()
        else:
            torch.mul(slope[..., 2 * cell :], c[:, :n], out=record[..., 2 * cell : 3 * cell])  # f
        # g: i (1 - g^2), halved: the gradient of the doubled pre-activation the product computed
        torch.addcmul(i, i_g, g, value=-1, out=record[..., 3 * cell : 4 * cell]).mul_(1 / _G_SCALE)
        torch.addcmul(o, m, tanh_c, value=-1, out=record[..., 4 * cell : 5 * cell])  # dh/dc through o tanh(c)
        record[..., 5 * cell :] = f
        if copy:
            records[:, step] = record
        c = c_new
        start += n
    ctx.batch_sizes = list(batch_sizes)
    ctx.shape = (rows, width_in, cell, proj)
    ctx.save_for_backward(inputs, records, projected, weights, w_hr_c)
    return out


def _backward(ctx: Any, grad_out: torch.Tensor) -> tuple[Optional[torch.Tensor], ...]:
    inputs, records, projected, weights, w_hr_c = ctx.saved_tensors
    pad = row_rounding(weights.dtype)
    rows, width_in, cell, proj = ctx.shape
    batch_sizes: list[int] = ctx.batch_sizes
    directions, slots, _ = inputs.shape
    state_packs = _step_packs(weights[..., width_in : width_in + proj].transpose(1, 2), inputs, inputs.dtype)
    # a strided operand costs each step's product a copy
    w_hh_c = weights[..., width_in : width_in + proj].contiguous() if state_packs is None else None
    grad_gates = inputs.new_empty(directions, slots, 4 * cell)
    grad_gates[:, rows:].zero_()
    grad_h_all = inputs.new_zeros(directions, slots, proj)
    # the gradients flowing back from step t + 1; rows a later step did not have stay zero
    grad_h_next = grad_out.new_zeros(directions, batch_sizes[0], proj)
    grad_c_next = grad_out.new_zeros(directions, batch_sizes[0], cell)
    ends = [0]
    for n in batch_sizes:
        ends.append(ends[-1] + n)
    for index in range(len(batch_sizes) - 1, -1, -1):
        n, start = batch_sizes[index], ends[index]
        step = slice(start, start + n)
        torch.add(grad_out[:, step], grad_h_next[:, :n], out=grad_h_all[:, step])
        grad_m = torch.bmm(grad_h_all[:, start : start + pad(n)], w_hr_c)[:, :n].float()
        record = records[:, step].float()
        grad_c = torch.addcmul(grad_c_next[:, :n], grad_m, record[..., 4 * cell : 5 * cell])
        grad, copy = _float_view(grad_gates, step)
        torch.mul(grad_m, record[..., :cell], out=grad[..., :cell])  # o
        ifg = (-1, (3, cell))  # i, f, g: one product with the cell gradient
        factor_ifg = record[..., cell : 4 * cell].unflatten(*ifg)
        torch.mul(grad_c[:, :, None], factor_ifg, out=grad[..., cell:].unflatten(*ifg))
        if copy:
            grad_gates[:, step] = grad
        if index > 0:
            torch.mul(grad_c, record[..., 5 * cell :], out=grad_c_next[:, :n])
            if w_hh_c is not None:
                grad_h_next[:, :n] = torch.bmm(grad_gates[:, start : start + pad(n)], w_hh_c)[:, :n]
            else:
                for d, pack in enumerate(state_packs or ()):
                    grad_h_next[d, :n] = onednn.linear(grad_gates[d, step], pack)
    # the input's gradient and every weight gradient: one product over all steps (rows past the data are zeros)
    grad_x = torch.bmm(grad_gates, weights[..., :width_in])[:, :rows].float()
    grad_w = torch.bmm(grad_gates.transpose(1, 2), inputs).float()
    grad_w[:, 3 * cell :] *= _G_SCALE  # the gradient of g's own weights, not of the doubled ones
    grad_w = _reorder(grad_w, cell, _TO_TORCH)
    grad_w_hr = torch.bmm(grad_h_all.transpose(1, 2), projected).float()
    grad_w_ih, grad_w_hh, grad_bias = (
        grad_w[..., :width_in],
        grad_w[..., width_in:-BIAS_COLUMNS],
        grad_w[..., -BIAS_COLUMNS],
    )
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
