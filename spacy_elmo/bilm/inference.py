"""The inference path: the biLM without autograd, reorganised for speed (CPU and CUDA).

:class:`~.model.BiLM` sends work here when no gradient is needed (``torch.inference_mode()``, or
nothing requires grad); the reference path (:mod:`.lstm`, ``CharCNNEncoder.forward``), which
autograd and training use, computes the same function. The two agree to float32 rounding, not bit
for bit: sums are added in other orders (other matmul shapes, MKL pre-packed products, the char
CNN as one matmul), and with several CPU threads tanh is computed as 2 sigmoid(2x) - 1 (within
1e-7).

biLSTM: both directions in one time loop over a *step layout* (rows sorted by length
once, the forward and the per-row reversed backward sequences sharing it, so at every step both
directions run on the same shrinking prefix of rows, as in torch's ``PackedSequence``); each
layer's input projection is one matmul per chunk of steps; gates, cell and outputs live in
preallocated buffers; the zero initial state skips the first recurrent matmul. With several CPU
threads and enough work per step (:func:`.threads.split_directions`), the two directions
(independent language models) instead run on two single-threaded pool threads, one core each.
How each product and step runs (packed weights, precision, batched products for small weights, a
compiled step loop) is the module's engine's (:mod:`.engine`), chosen once per model and target: nothing
here looks at a dtype. Nothing here records autograd history.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional, cast

import torch

from .encoder import CharCNNEncoder, Highway
from .engine import Engine, LayerSpec, engine_of
from .lstm import BiLSTMState, ElmoBiLSTM, ProjectedLSTMCell
from .threads import split_directions, two_thread_pool, use_sigmoid_tanh

# -- the token encoder ----------------------------------------------------------------------


def token_vectors_without_autograd(encoder: CharCNNEncoder, char_ids: torch.Tensor) -> torch.Tensor:
    """``encoder(char_ids)`` without autograd: the char CNN as one matmul, the highway and projection products
    through the encoder's engine (:mod:`.engine`: packed where that gains)."""
    engine = engine_of(encoder)
    x = encoder.pooled_features(encoder.char_columns(char_ids), encoder.convolve_as_matmul)
    for highway in cast(Sequence[Highway], encoder.highways):  # nn.ModuleList is typed as holding Modules
        x = highway.combine(x, engine.linear(highway.carry, x), engine.linear(highway.transform, x))
    return engine.linear(encoder.projection, encoder.projection_input(char_ids, x))


# -- the biLSTM ------------------------------------------------------------------------------


@dataclass
class StepLayout:
    """Where each (step, row) lives: rows sorted by length, steps time-major."""

    step_sizes: list[int]  # active rows at each step (non-increasing)
    step_offsets: list[int]  # start of each step in the step-ordered data
    forward_index: torch.Tensor  # (N,) flat index row * time + t into (batch, time)
    backward_index: torch.Tensor  # (N,) flat index row * time + (length - 1 - t)
    last_index: torch.Tensor  # (batch,) position in step order of each sorted row's last step
    sorted_rows: torch.Tensor  # (batch,) original row of each sorted row
    unsorted_rows: torch.Tensor  # (batch,) sorted position of each original row


def step_layout(lengths: torch.Tensor, time: int, device: torch.device, skip_last: bool = False) -> StepLayout:
    """Build the step layout for right-padded sequences of the given ``lengths`` (all >= 1).

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
    t_idx, r_idx = active.nonzero(as_tuple=True)  # time-major order = step order
    orig = sorted_rows[r_idx]
    forward_index = orig * time + t_idx
    backward_index = orig * time + (full_lengths[r_idx] - 1 - t_idx)
    last_index = offsets[sorted_lengths - 1] + torch.arange(len(sorted_lengths))
    unsorted_rows = torch.empty_like(sorted_rows)
    unsorted_rows[sorted_rows] = torch.arange(len(sorted_rows))

    def to(x: torch.Tensor) -> torch.Tensor:
        return x.to(device, non_blocking=True)

    return StepLayout(
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

    ``token_layer`` is layer 0. ``skip_last`` (see :func:`step_layout`) leaves each LM's output
    at its last position zero and returns no final state.
    """
    batch, time, dim = tokens.shape
    layout = step_layout(lengths, time, tokens.device, skip_last=skip_last)
    outputs, final_state = run_lstm(lstm, tokens, layout, initial_state)
    acts = tokens.new_zeros(lstm.n_layers + 1, batch, time, 2 * dim)
    acts[0] = token_layer
    flat = acts.view(lstm.n_layers + 1, batch * time, 2, dim)
    for layer, out in enumerate(outputs, start=1):
        flat[layer, :, 0].index_copy_(0, layout.forward_index, out[0])
        flat[layer, :, 1].index_copy_(0, layout.backward_index, out[1])
    return acts, None if skip_last else final_state


def bilstm_outputs(
    lstm: ElmoBiLSTM, inputs: torch.Tensor, lengths: torch.Tensor, initial_state: Optional[BiLSTMState] = None
) -> tuple[list[torch.Tensor], list[torch.Tensor], BiLSTMState]:
    """What ``lstm(inputs, lengths, initial_state)`` returns (padded per-layer outputs, final state), without
    autograd."""
    batch, time = inputs.shape[:2]
    layout = step_layout(lengths, time, inputs.device)
    outputs, final_state = run_lstm(lstm, inputs, layout, initial_state)
    forward = [unpack(out[0], layout.forward_index, batch, time) for out in outputs]
    backward = [unpack(out[1], layout.backward_index, batch, time) for out in outputs]
    return forward, backward, final_state


def run_lstm(
    lstm: ElmoBiLSTM, inputs: torch.Tensor, layout: StepLayout, initial_state: Optional[BiLSTMState] = None
) -> tuple[list[torch.Tensor], BiLSTMState]:
    """Run every layer of ``lstm``; returns per-layer step-ordered outputs ``(2, N, proj)`` and the final state.

    ``inputs`` is ``(batch, time, proj)``; direction 0 of the step-ordered outputs is forward, 1 backward.
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
    engine = engine_of(lstm)  # chosen once per model and target: the products and step loop of every layer
    step_macs = layout.step_sizes[0] * lstm.proj_dim * 4 * lstm.cell_dim  # the first step's recurrent product
    if split_directions(step_macs, x.device):
        futures = [
            two_thread_pool().submit(
                _run_stack_on_thread, engine, stacks[d], x[d : d + 1], layout, _pick(h0, d), _pick(c0, d), skip
            )
            for d in range(2)
        ]
        (out_f, h_f, c_f), (out_b, h_b, c_b) = [f.result() for f in futures]
        outputs = [torch.cat(pair) for pair in zip(out_f, out_b)]
        last_h = [torch.cat(pair, dim=0) for pair in zip(h_f, h_b)]
        last_c = [torch.cat(pair, dim=0) for pair in zip(c_f, c_b)]
    else:
        outputs, last_h, last_c = _run_stack(engine, list(zip(*stacks)), x, layout, h0, c0, skip)
    finals = []
    for h, c in zip(last_h, last_c):
        h, c = h.index_select(1, layout.unsorted_rows), c.index_select(1, layout.unsorted_rows)
        finals.append([(h[0], c[0]), (h[1], c[1])])
    return outputs, finals


def _pick(states: list[Optional[torch.Tensor]], d: int) -> list[Optional[torch.Tensor]]:
    return [None if s is None else s[d : d + 1] for s in states]


def _run_stack_on_thread(engine, cells, x, layout, h0, c0, skip):
    """One direction's stack on a pool thread: single-threaded ops, no autograd (thread-local modes)."""
    with torch.inference_mode():
        return _run_stack(engine, [(cell,) for cell in cells], x, layout, h0, c0, skip)


def _run_stack(engine, layers, x, layout, h0, c0, skip):
    """All layers for the directions stacked in ``x`` ``(D, N, in)``; ``layers[l]`` holds D cells."""
    outputs, last_h, last_c = [], [], []
    for index, cells in enumerate(layers):
        out, c = _run_layer(engine, cells, x, layout, h0[index], c0[index])
        last_h.append(out.index_select(1, layout.last_index))
        last_c.append(c)
        if skip and index > 0:
            out.add_(x)
        outputs.append(out)
        x = out
    return outputs, last_h, last_c


def _run_layer(
    engine: Engine,
    cells: Sequence[ProjectedLSTMCell],
    x: torch.Tensor,
    layout: StepLayout,
    h0: Optional[torch.Tensor],
    c0: Optional[torch.Tensor],
):
    """One layer, D directions: step-ordered inputs ``(D, N, in)`` -> step-ordered outputs ``(D, N, proj)``, last cells.

    The input projections of each chunk of steps are one product; the steps and their products are the
    engine's (:class:`.engine.LayerSteps`, the one step loop).
    """
    first = cells[0]
    c_dim, n_total = first.cell_dim, x.shape[1]
    batch = layout.step_sizes[0]
    cell_clip, proj_clip = float(first.cell_clip or 0.0), float(first.proj_clip or 0.0)  # 0: no clip
    out = x.new_empty(len(cells), n_total, first.proj_dim)
    last_c = x.new_empty(len(cells), batch, c_dim)
    sigmoid_tanh = use_sigmoid_tanh(x.device)  # tanh's form: threads.py's choice, from the thread count
    c = c0.clone() if c0 is not None else x.new_zeros(len(cells), batch, c_dim)
    steps = engine.layer_steps(LayerSpec(cells, batch, c, h0, cell_clip, proj_clip, sigmoid_tanh))  # h0 None: zero
    for first_step, stop in _chunks(layout, max(1, engine.gate_chunk_elements // (4 * c_dim))):
        start_row = layout.step_offsets[first_step]
        end_row = layout.step_offsets[stop - 1] + layout.step_sizes[stop - 1]
        gx = steps.project_inputs(x[:, start_row:end_row])
        steps.run(gx, out, last_c, layout.step_sizes[first_step:stop], layout.step_offsets[first_step:stop], start_row)
    steps.finish(last_c)
    return out, last_c


def _chunks(layout: StepLayout, max_rows: int) -> list[tuple]:
    """Split the steps into consecutive ranges whose step-ordered rows fit ``max_rows`` (at least one step each)."""
    ranges, first, rows = [], 0, 0
    for step, n in enumerate(layout.step_sizes):
        if rows and rows + n > max_rows:
            ranges.append((first, step))
            first, rows = step, 0
        rows += n
    ranges.append((first, len(layout.step_sizes)))
    return ranges


def unpack(rows: torch.Tensor, index: torch.Tensor, batch: int, time: int) -> torch.Tensor:
    """Scatter step-ordered rows ``(N, dim)`` back to a zero-padded ``(batch, time, dim)`` tensor."""
    padded = rows.new_zeros(batch * time, rows.shape[-1])
    padded.index_copy_(0, index, rows)
    return padded.view(batch, time, -1)
