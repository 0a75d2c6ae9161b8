"""The inference path: the biLM without autograd, reorganised for speed (CPU and CUDA).

:class:`~.model.BiLM` sends work here when no gradient is needed (``torch.inference_mode()``, or
nothing requires grad); the reference path (:mod:`.lstm`, ``CharCNNEncoder.forward``), which
autograd and training use, computes the same function. The two agree to float32 rounding, not bit
for bit: sums are added in other orders (other matmul shapes, MKL pre-packed products, the char
CNN as one matmul), and with several CPU threads tanh is computed as 2 sigmoid(2x) - 1 (within
1e-7).

biLSTM: both directions in one time loop over a *packed sequence layout* (rows sorted by length
once, the forward and the per-row reversed backward sequences sharing it, so at every step both
directions run on the same shrinking prefix of rows, as in torch's ``PackedSequence``); each
layer's input projection is one matmul per chunk of steps; gates, cell and outputs live in
preallocated buffers; the zero initial state skips the first recurrent matmul. With several CPU
threads and enough work per step (:func:`.threads.split_directions`), the two directions
(independent language models) instead run on two single-threaded pool threads, one core each.
Products of a few rows by big weights go through MKL pre-packed weights (:mod:`.mkl_prepacked`);
small weights take one batched product for both directions. Nothing here records autograd history.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Callable, Optional, cast

import torch
from torch import nn

from . import compiled_steps, low_precision, mkl_prepacked
from .encoder import CharCNNEncoder, Highway
from .lstm import BiLSTMState, ElmoBiLSTM, ProjectedLSTMCell
from .threads import pool, split_directions

# rows x 4*cell_dim floats per direction for one chunk of precomputed input projections
GATE_CHUNK_ELEMENTS = 1 << 23
# int8: each input projection also allocates its own output and accumulators: smaller chunks keep the working
# memory down at no measured cost in speed (benchmarks/RESULTS.md, "Precision on every CPU")
INT8_GATE_CHUNK_ELEMENTS = 1 << 21
STACK_MAX_ELEMENTS = 1 << 18  # per weight: both directions' copies in one tensor cost little


# -- the token encoder ----------------------------------------------------------------------


def encode_tokens(encoder: CharCNNEncoder, char_ids: torch.Tensor) -> torch.Tensor:
    """``encoder(char_ids)`` without autograd: the char CNN as one matmul, pre-packed highway and projection products."""
    x = encoder.pooled_features(encoder.char_columns(char_ids), encoder.convolve_as_matmul)
    for highway in cast(Sequence[Highway], encoder.highways):  # nn.ModuleList is typed as holding Modules
        x = highway.combine(x, _linear(highway.carry, x), _linear(highway.transform, x))
    return _linear(encoder.projection, encoder.projection_input(char_ids, x))


def _linear(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """``layer(x)``: int8 or bf16 packs where :mod:`.low_precision` has one, MKL's pre-packed GEMM for a few rows
    of a big float32 layer (:mod:`.mkl_prepacked`), else the plain product."""
    low = low_precision.pack_of(layer, "weight", layer.weight, x)
    if low is not None:
        return low_precision.linear(x, low, layer.bias)
    if mkl_prepacked.fits(x.shape[0]) and mkl_prepacked.usable(x):
        pack = mkl_prepacked.pack_of(layer, "weight", layer.weight)
        if pack is not None:
            return mkl_prepacked.linear(x, layer.weight, layer.bias, pack)
    return layer(x)


# -- the biLSTM ------------------------------------------------------------------------------


@dataclass
class PackedLayout:
    """Where each packed (step, row) lives: rows sorted by length, steps time-major."""

    step_sizes: list[int]  # active rows at each step (non-increasing)
    step_offsets: list[int]  # start of each step in the packed data
    forward_index: torch.Tensor  # (N,) flat index row * time + t into (batch, time)
    backward_index: torch.Tensor  # (N,) flat index row * time + (length - 1 - t)
    last_index: torch.Tensor  # (batch,) packed position of each sorted row's last step
    sorted_rows: torch.Tensor  # (batch,) original row of each sorted row
    unsorted_rows: torch.Tensor  # (batch,) sorted position of each original row


def packed_layout(lengths: torch.Tensor, time: int, device: torch.device, skip_last: bool = False) -> PackedLayout:
    """Build the packed layout for right-padded sequences of the given ``lengths`` (all >= 1).

    ``skip_last`` (all lengths >= 2) leaves out each direction's last step: the forward LM's
    last position and the backward LM's first one. Their outputs, which depend on nothing else,
    are then not computed, and the final states are those one step earlier.
    """
    lengths_cpu = lengths.to("cpu", torch.int64)
    if lengths_cpu.numel() == 0 or int(lengths_cpu.min()) < 1 + skip_last:
        raise ValueError(f"every sequence needs at least {'two positions' if skip_last else 'one position'}")
    sorted_lengths, sorted_rows = torch.sort(lengths_cpu, descending=True, stable=True)
    full_lengths = sorted_lengths
    sorted_lengths = sorted_lengths - int(skip_last)
    steps = torch.arange(int(sorted_lengths[0]))
    active = steps[:, None] < sorted_lengths[None, :]  # (steps, batch), a prefix of rows per step
    step_sizes = active.sum(dim=1)
    offsets = torch.cumsum(step_sizes, 0) - step_sizes
    t_idx, r_idx = active.nonzero(as_tuple=True)  # time-major order = packed order
    orig = sorted_rows[r_idx]
    forward_index = orig * time + t_idx
    backward_index = orig * time + (full_lengths[r_idx] - 1 - t_idx)
    last_index = offsets[sorted_lengths - 1] + torch.arange(len(sorted_lengths))
    unsorted_rows = torch.empty_like(sorted_rows)
    unsorted_rows[sorted_rows] = torch.arange(len(sorted_rows))
    to = lambda x: x.to(device, non_blocking=True)
    return PackedLayout(
        step_sizes.tolist(),
        offsets.tolist(),
        to(forward_index),
        to(backward_index),
        to(last_index),
        to(sorted_rows),
        to(unsorted_rows),
    )


def layer_activations(
    lstm: ElmoBiLSTM,
    tokens: torch.Tensor,
    lengths: torch.Tensor,
    token_layer: torch.Tensor,
    initial_state: Optional[BiLSTMState] = None,
    skip_last: bool = False,
) -> tuple[torch.Tensor, Optional[BiLSTMState]]:
    """All activations ``(n_layers + 1, batch, time, 2 * proj)``, each layer written straight into the result.

    ``token_layer`` is layer 0. ``skip_last`` (see :func:`packed_layout`) leaves each LM's output
    at its last position zero and returns no final state.
    """
    batch, time, dim = tokens.shape
    layout = packed_layout(lengths, time, tokens.device, skip_last=skip_last)
    outputs, final_state = run_lstm(lstm, tokens, layout, initial_state)
    acts = tokens.new_zeros(lstm.n_layers + 1, batch, time, 2 * dim)
    acts[0] = token_layer
    flat = acts.view(lstm.n_layers + 1, batch * time, 2, dim)
    for layer, out in enumerate(outputs, start=1):
        flat[layer, :, 0].index_copy_(0, layout.forward_index, out[0])
        flat[layer, :, 1].index_copy_(0, layout.backward_index, out[1])
    return acts, None if skip_last else final_state


def lstm_outputs(
    lstm: ElmoBiLSTM, inputs: torch.Tensor, lengths: torch.Tensor, initial_state: Optional[BiLSTMState] = None
) -> tuple[list[torch.Tensor], list[torch.Tensor], BiLSTMState]:
    """What ``lstm(inputs, lengths, initial_state)`` returns (padded per-layer outputs, final state), without autograd."""
    batch, time = inputs.shape[:2]
    layout = packed_layout(lengths, time, inputs.device)
    outputs, final_state = run_lstm(lstm, inputs, layout, initial_state)
    forward = [unpack(out[0], layout.forward_index, batch, time) for out in outputs]
    backward = [unpack(out[1], layout.backward_index, batch, time) for out in outputs]
    return forward, backward, final_state


def run_lstm(
    lstm: ElmoBiLSTM, inputs: torch.Tensor, layout: PackedLayout, initial_state: Optional[BiLSTMState] = None
) -> tuple[list[torch.Tensor], BiLSTMState]:
    """Run every layer of ``lstm``; returns per-layer packed outputs ``(2, N, proj)`` and the final state.

    ``inputs`` is ``(batch, time, proj)``; direction 0 of the packed outputs is forward, 1 backward.
    The two directions are independent language models: with two or more CPU threads and enough
    work per step they run on two threads of their own (one core each, no per-operation thread
    team), otherwise interleaved in one loop.
    """
    batch, time, dim = inputs.shape
    flat = inputs.reshape(batch * time, dim)
    x = torch.stack([flat.index_select(0, layout.forward_index), flat.index_select(0, layout.backward_index)])
    h0: list[Optional[torch.Tensor]] = [None] * lstm.n_layers
    c0: list[Optional[torch.Tensor]] = [None] * lstm.n_layers
    if initial_state is not None:
        for layer, states in enumerate(initial_state):
            h0[layer] = torch.stack([states[d][0] for d in range(2)]).index_select(1, layout.sorted_rows)
            c0[layer] = torch.stack([states[d][1] for d in range(2)]).index_select(1, layout.sorted_rows)
    stacks = [list(lstm.forward_layers), list(lstm.backward_layers)]
    skip = lstm.use_skip_connections
    step_macs = layout.step_sizes[0] * lstm.proj_dim * 4 * lstm.cell_dim  # the first step's recurrent product
    if split_directions(step_macs, x.device):
        futures = [
            pool().submit(_run_stack_on_thread, stacks[d], x[d : d + 1], layout, _pick(h0, d), _pick(c0, d), skip)
            for d in range(2)
        ]
        (out_f, h_f, c_f), (out_b, h_b, c_b) = [f.result() for f in futures]
        outputs = [torch.cat(pair) for pair in zip(out_f, out_b)]
        last_h = [torch.cat(pair, dim=0) for pair in zip(h_f, h_b)]
        last_c = [torch.cat(pair, dim=0) for pair in zip(c_f, c_b)]
    else:
        outputs, last_h, last_c = _run_stack(list(zip(*stacks)), x, layout, h0, c0, skip)
    finals = []
    for h, c in zip(last_h, last_c):
        h, c = h.index_select(1, layout.unsorted_rows), c.index_select(1, layout.unsorted_rows)
        finals.append([(h[0], c[0]), (h[1], c[1])])
    return outputs, finals


def _pick(states: list[Optional[torch.Tensor]], d: int) -> list[Optional[torch.Tensor]]:
    return [None if s is None else s[d : d + 1] for s in states]


def _run_stack_on_thread(cells, x, layout, h0, c0, skip):
    """One direction's stack on a pool thread: single-threaded ops, no autograd (thread-local modes)."""
    with torch.inference_mode():
        return _run_stack([(cell,) for cell in cells], x, layout, h0, c0, skip)


def _run_stack(layers, x, layout, h0, c0, skip):
    """All layers for the directions stacked in ``x`` ``(D, N, in)``; ``layers[l]`` holds D cells."""
    outputs, last_h, last_c = [], [], []
    for index, cells in enumerate(layers):
        out, c = _run_layer(cells, x, layout, h0[index], c0[index])
        last_h.append(out.index_select(1, layout.last_index))
        last_c.append(c)
        if skip and index > 0:
            out.add_(x)
        outputs.append(out)
        x = out
    return outputs, last_h, last_c


def _run_layer(
    cells: Sequence[ProjectedLSTMCell],
    x: torch.Tensor,
    layout: PackedLayout,
    h0: Optional[torch.Tensor],
    c0: Optional[torch.Tensor],
):
    """One layer, D directions: packed inputs ``(D, N, in)`` -> packed outputs ``(D, N, proj)``, last cells."""
    first = cells[0]
    c_dim, n_total = first.cell_dim, x.shape[1]
    batch = layout.step_sizes[0]
    cell_clip, proj_clip = float(first.cell_clip or 0.0), float(first.proj_clip or 0.0)  # 0: no clip
    out = x.new_empty(len(cells), n_total, first.proj_dim)
    last_c = x.new_empty(len(cells), batch, c_dim)
    # With several threads on CPU, torch sends tanh of contiguous float tensors to MKL's vector
    # math, which starts its own thread team even for a few hundred elements; on a busy machine
    # each call can then wait milliseconds. The sigmoid form (compiled_steps.cell_update) stays on torch's own kernels.
    sigmoid_tanh = x.device.type == "cpu" and torch.get_num_threads() > 1
    products = _StepProducts(cells, x, batch)
    c = c0.clone() if c0 is not None else x.new_zeros(len(cells), batch, c_dim)
    h_prev = h0  # None means the zero state: the first recurrent matmul is skipped

    chunk_elements = INT8_GATE_CHUNK_ELEMENTS if products.int8 else GATE_CHUNK_ELEMENTS
    chunk_steps = _chunks(layout, max(1, chunk_elements // (4 * c_dim)))
    loop = products.compiled_loop()
    if loop is not None:  # each direction's steps in TorchScript (:mod:`.compiled_steps`): no GIL between ops
        c_d = [c[d] for d in range(len(cells))]
        h_d = [None if h_prev is None else h_prev[d] for d in range(len(cells))]
    for first_step, stop in chunk_steps:
        start_row = layout.step_offsets[first_step]
        end_row = layout.step_offsets[stop - 1] + layout.step_sizes[stop - 1]
        gx = x.new_empty(len(cells), end_row - start_row, 4 * c_dim)
        products.project_inputs(x[:, start_row:end_row], gx)
        if loop is not None:
            sizes, offsets = layout.step_sizes[first_step:stop], layout.step_offsets[first_step:stop]
            for d, weights in enumerate(loop.weights):
                h_d[d], c_d[d] = loop.run(
                    gx[d],
                    out[d],
                    last_c[d],
                    c_d[d],
                    h_d[d],
                    sizes,
                    offsets,
                    start_row,
                    *weights,
                    cell_clip,
                    proj_clip,
                    sigmoid_tanh,
                )
            continue
        for step in range(first_step, stop):
            n = layout.step_sizes[step]
            begin = layout.step_offsets[step] - start_row
            c = compiled_steps.retire_ended_rows(c, last_c, n)
            g = gx[:, begin : begin + n]  # the gates, computed in place in the input projections
            if h_prev is not None:  # None: the zero state adds nothing
                products.add_recurrent(g, h_prev, n)
            hid, c = compiled_steps.cell_update(g, c, cell_clip, sigmoid_tanh)
            row = layout.step_offsets[step]
            h = out[:, row : row + n]
            products.project(hid, h)
            if proj_clip:
                h.clamp_(-proj_clip, proj_clip)
            h_prev = h
    if loop is not None:
        for d, c_last in enumerate(c_d):
            last_c[d, : c_last.shape[0]] = c_last
        return out, last_c
    last_c[:, : c.shape[1]] = c
    return out, last_c


class _StepProducts:
    """A layer's matrix products (input projections, recurrent, projection) for D directions, by the fastest route.

    int8 cells and bf16 weights: :mod:`.low_precision` packs. Big float32 weights with 3-64 rows to
    multiply: MKL pre-packed products (:mod:`.mkl_prepacked`). Small weights (both directions
    interleaved in one loop): one batched product for both directions, fewer operator calls per
    step. Otherwise one plain product per direction.
    """

    def __init__(self, cells: Sequence[ProjectedLSTMCell], x: torch.Tensor, batch: int) -> None:
        self.cells, self.usable = cells, mkl_prepacked.usable(x)
        self.low = [low_precision.pack_of(cell, "state_weight", cell.state_weight.t(), x[0, :batch]) for cell in cells]
        self.low_ok = all(p is not None for p in self.low)
        self.int8 = self.low_ok and all(cast(low_precision.Pack, p).kind == "int8" for p in self.low)
        self.probe = x[0, :batch]  # the step rows' dtype and most rows: what pack_of picks a pack by
        self.input: list[torch.Tensor] = [cell.input_weight for cell in cells]
        self.bias = [cell.bias + cell.forget_offset for cell in cells]
        self.state: list[torch.Tensor] = [cell.state_weight for cell in cells]
        self.projection: list[torch.Tensor] = [cell.projection for cell in cells]
        self.state_packs = self._packs("state_weight", self.state) if batch >= mkl_prepacked.MIN_ROWS else None
        small = len(cells) > 1 and self.state[0].numel() <= STACK_MAX_ELEMENTS and not self.low_ok
        self.state_stack = torch.stack(self.state) if small and self.state_packs is None else None
        self.projection_stack = torch.stack(self.projection) if small else None

    def compiled_loop(self) -> Optional[_CompiledLoop]:
        """The compiled step loop (:mod:`.compiled_steps`) and each direction's weights, where every step product
        here has an int8 pack, or every state product a bf16 one, and TorchScript works."""
        if not self.low_ok:
            return None
        kind = cast(low_precision.Pack, self.low[0]).kind
        run = compiled_steps.compiled(kind)
        if run is None or any(cast(low_precision.Pack, p).kind != kind for p in self.low):
            return None
        weights: list[tuple] = []
        for cell, state, projection in zip(self.cells, cast(list[low_precision.Pack], self.low), self.projection):
            proj = low_precision.pack_of(cell, "projection", projection.t(), self.probe)
            if kind == "int8":
                if proj is None:
                    return None
                weights.append(
                    (
                        *_int8_pair(state),
                        *_int8_pair(proj),
                        low_precision.INT8_FEW_ROWS,
                        state.few_reduce_range,
                        state.reduce_range,
                    )
                )
            else:
                packed = None if proj is None else proj.packed
                weights.append((cell.state_weight, state.packed, projection, packed, low_precision.BF16_MAX_ROWS))
        return _CompiledLoop(run, weights)

    def project_inputs(self, rows: torch.Tensor, out: torch.Tensor) -> None:
        """``out[d] = rows[d] @ input[d] + bias[d]``: the input projections of a chunk of steps."""
        low = [
            low_precision.pack_of(cell, "input_weight", w.t(), rows[d])
            for d, (cell, w) in enumerate(zip(self.cells, self.input))
        ]
        if all(p is not None for p in low):
            for d, pack in enumerate(low):
                out[d] = low_precision.linear(rows[d], pack, self.bias[d])  # type: ignore[arg-type]  # None ruled out above
            return
        packs = self._packs("input_weight", self.input) if mkl_prepacked.fits(rows.shape[1]) else None
        for d, weight in enumerate(self.input):
            if packs is not None:
                out[d] = mkl_prepacked.linear(rows[d], weight.t(), self.bias[d], packs[d])
            else:
                torch.addmm(self.bias[d], rows[d], weight, out=out[d])

    def add_recurrent(self, gates: torch.Tensor, h_prev: torch.Tensor, n: int) -> None:
        """``gates[d] += h_prev[d, :n] @ state[d]`` for every direction ``d``."""
        if self.low_ok:
            for d, cell in enumerate(self.cells):
                low = low_precision.pack_of(cell, "state_weight", self.state[d].t(), h_prev[d, :n])
                if low is not None:
                    gates[d].add_(low_precision.linear(h_prev[d, :n], low))
                else:
                    gates[d].addmm_(h_prev[d, :n], self.state[d])
            return
        if self.state_packs is not None and mkl_prepacked.fits(n):
            for d, pack in enumerate(self.state_packs):
                gates[d].add_(mkl_prepacked.linear(h_prev[d, :n], self.state[d].t(), None, pack))
        elif self.state_stack is not None:
            gates.baddbmm_(h_prev[:, :n], self.state_stack)
        else:
            for d, weight in enumerate(self.state):
                gates[d].addmm_(h_prev[d, :n], weight)

    def project(self, hidden: torch.Tensor, out: torch.Tensor) -> None:
        """``out[d] = hidden[d] @ projection[d]`` for every direction ``d``."""
        if self.low_ok:
            for d, cell in enumerate(self.cells):
                low = low_precision.pack_of(cell, "projection", self.projection[d].t(), hidden[d])
                if low is not None:
                    out[d] = low_precision.linear(hidden[d], low)
                else:
                    torch.mm(hidden[d], self.projection[d], out=out[d])
            return
        if self.projection_stack is not None:
            torch.bmm(hidden, self.projection_stack, out=out)
        else:
            for d, weight in enumerate(self.projection):
                torch.mm(hidden[d], weight, out=out[d])

    def _packs(self, name: str, weights: list[torch.Tensor]) -> Optional[list[torch.Tensor]]:
        """Each cell's MKL pre-packed ``name`` weight (:mod:`.mkl_prepacked`), or None where any is unavailable.

        None for low-precision cells: they multiply their own packs (int8 ones may have released their float32
        weights), so no MKL copy is made beside them."""
        if not self.usable or self.low_ok:
            return None
        packs = [mkl_prepacked.pack_of(cell, name, w.t()) for cell, w in zip(self.cells, weights)]
        return None if any(p is None for p in packs) else cast(list[torch.Tensor], packs)


@dataclass
class _CompiledLoop:
    """A compiled step loop (:func:`.compiled_steps.int8_steps` or ``bf16_steps``) and, per direction, its weight arguments."""

    run: Callable[..., tuple[Optional[torch.Tensor], torch.Tensor]]
    weights: list[tuple]


def _int8_pair(pack: low_precision.Pack) -> tuple[object, object]:
    """An int8 pack's (few rows, many rows) packed weights."""
    return pack.few_rows, pack.packed


def _chunks(layout: PackedLayout, max_rows: int) -> list[tuple]:
    """Split the steps into consecutive ranges whose packed rows fit ``max_rows`` (at least one step each)."""
    ranges, first, rows = [], 0, 0
    for step, n in enumerate(layout.step_sizes):
        if rows and rows + n > max_rows:
            ranges.append((first, step))
            first, rows = step, 0
        rows += n
    ranges.append((first, len(layout.step_sizes)))
    return ranges


def unpack(rows: torch.Tensor, index: torch.Tensor, batch: int, time: int) -> torch.Tensor:
    """Scatter packed rows ``(N, dim)`` back to a zero-padded ``(batch, time, dim)`` tensor."""
    padded = rows.new_zeros(batch * time, rows.shape[-1])
    padded.index_copy_(0, index, rows)
    return padded.view(batch, time, -1)
