"""ELMo's biLSTM: LSTM cells with a clipped projection, stacked with optional residual links.

This is the reference path, which autograd and training use: one packed run per direction
(:func:`run_directions`), a Python loop over the steps in :meth:`ProjectedLSTMCell.run`. Each
direction runs over the valid positions of each sentence only (a shrinking prefix of the
length-sorted batch, a ``PackedSequence``), so a sentence's outputs do not depend on padding or on
its neighbours in the batch. The inference path (:mod:`.inference`) computes the same function
faster without autograd; :class:`~.model.BiLM` chooses between them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Callable, Optional, cast

import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

# (h, c) for one direction of one layer, each (batch, dim)
State = tuple[torch.Tensor, torch.Tensor]
# [layer][direction] -> State, direction 0 = forward, 1 = backward
BiLSTMState = list[list[State]]

FORGET_BIAS = 1.0  # added by TensorFlow's LSTMCell at run time; not stored in the weight file


def cell_step(gates: torch.Tensor, c: torch.Tensor, cell_clip: Optional[float]) -> State:
    """The LSTM cell's arithmetic, the reference: gates ``(rows, 4 * cell)`` (pre-activations, TF order i, j, f, o,
    forget offset included) and the previous cell ``c`` -> ``(o * tanh(c'), c')``, ``c' = i * tanh(j) + f * c`` clipped
    to ``cell_clip`` (None or 0: no clip).

    The one definition the other copies are tested against (``tests/bilm/test_inference_path.py``,
    ``tests/train/test_train_packed_lstm.py``), each with its reason to differ written where it does: the inference
    path's :func:`.engine.step_loop.cell_update` works in place in its gate buffers, compiled by TorchScript, with
    tanh optionally as ``2 sigmoid(2x) - 1``; training's :mod:`spacy_elmo.train.network.packed_lstm` keeps the gates
    in another order, stores each step's derivatives for its hand-written backward pass, and has no clip. This form
    builds new tensors, so that autograd can differentiate it.
    """
    c_dim = c.shape[-1]
    i = torch.sigmoid(gates[:, :c_dim])
    j = torch.tanh(gates[:, c_dim : 2 * c_dim])
    f = torch.sigmoid(gates[:, 2 * c_dim : 3 * c_dim])
    o = torch.sigmoid(gates[:, 3 * c_dim :])
    c = i * j + f * c
    if cell_clip:
        c = c.clamp(-cell_clip, cell_clip)
    return o * torch.tanh(c), c


class ProjectedLSTMCell(nn.Module):
    """bilm-tf ``LSTMCell`` with ``num_proj``: gates in TF order (i, j, f, o), clipped cell and projection.

    ``bias`` holds the file's raw bias; the +1.0 forget bias is added in :meth:`run` so
    that reading and writing the weight file is bit-exact.
    """

    forget_offset: torch.Tensor  # a buffer: +1.0 on the forget gate's columns

    def __init__(
        self, input_dim: int, cell_dim: int, proj_dim: int, cell_clip: Optional[float], proj_clip: Optional[float]
    ) -> None:
        super().__init__()
        self.input_dim, self.cell_dim, self.proj_dim = input_dim, cell_dim, proj_dim
        self.cell_clip, self.proj_clip = cell_clip, proj_clip
        self.input_weight = nn.Parameter(torch.empty(input_dim, 4 * cell_dim))
        self.state_weight = nn.Parameter(torch.empty(proj_dim, 4 * cell_dim))
        self.bias = nn.Parameter(torch.zeros(4 * cell_dim))
        self.projection = nn.Parameter(torch.empty(cell_dim, proj_dim))
        offset = torch.zeros(4 * cell_dim)
        offset[2 * cell_dim : 3 * cell_dim] = FORGET_BIAS
        self.register_buffer("forget_offset", offset, persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / self.cell_dim**0.5
        for weight in (self.input_weight, self.state_weight, self.projection):
            nn.init.uniform_(weight, -bound, bound)
        nn.init.zeros_(self.bias)

    def run(self, packed_input: torch.Tensor, batch_sizes: list[int], initial: State) -> tuple[torch.Tensor, State]:
        """Run over packed data (time-major, shrinking batch); returns packed outputs and final states."""
        gates_x = packed_input @ self.input_weight + (self.bias + self.forget_offset)
        h, c = initial
        outputs, finished_h, finished_c = [], [], []
        start = 0
        for n in batch_sizes:
            if n < h.shape[0]:  # rows n.. ended at the previous step: keep their final state
                finished_h.append(h[n:])
                finished_c.append(c[n:])
                h, c = h[:n], c[:n]
            gates = gates_x[start : start + n] + h @ self.state_weight
            start += n
            hidden, c = cell_step(gates, c, self.cell_clip)
            h = hidden @ self.projection
            if self.proj_clip:
                h = h.clamp(-self.proj_clip, self.proj_clip)
            outputs.append(h)
        finished_h.append(h)
        finished_c.append(c)
        final = (torch.cat(finished_h[::-1]), torch.cat(finished_c[::-1]))
        return torch.cat(outputs), final


class ElmoBiLSTM(nn.Module):
    """Stacked forward and backward projected LSTMs (separate stacks), as in bilm-tf."""

    def __init__(
        self,
        input_dim: int,
        cell_dim: int,
        proj_dim: int,
        n_layers: int,
        cell_clip: Optional[float] = None,
        proj_clip: Optional[float] = None,
        use_skip_connections: bool = False,
    ) -> None:
        super().__init__()
        if input_dim != proj_dim:
            raise ValueError(f"the token encoder's output ({input_dim}) must equal lstm.projection_dim ({proj_dim})")
        self.n_layers, self.cell_dim, self.proj_dim = n_layers, cell_dim, proj_dim
        self.use_skip_connections = use_skip_connections
        self.forward_layers = nn.ModuleList(
            ProjectedLSTMCell(proj_dim, cell_dim, proj_dim, cell_clip, proj_clip) for _ in range(n_layers)
        )
        self.backward_layers = nn.ModuleList(
            ProjectedLSTMCell(proj_dim, cell_dim, proj_dim, cell_clip, proj_clip) for _ in range(n_layers)
        )

    def zero_state(self, batch_size: int, like: torch.Tensor) -> BiLSTMState:
        def zeros(dim: int) -> torch.Tensor:
            return like.new_zeros(batch_size, dim)

        return [[(zeros(self.proj_dim), zeros(self.cell_dim)) for _ in range(2)] for _ in range(self.n_layers)]

    def forward(
        self, inputs: torch.Tensor, lengths: torch.Tensor, initial_state: Optional[BiLSTMState] = None
    ) -> tuple[list[torch.Tensor], list[torch.Tensor], BiLSTMState]:
        """``inputs`` (batch, time, proj) right-padded, ``lengths`` (batch,) all >= 1.

        Returns per-layer forward outputs and backward outputs, each (batch, time, proj) with
        zeros at padding, and the final state of every layer and direction (batch order).
        """
        state = initial_state if initial_state is not None else self.zero_state(inputs.shape[0], inputs)
        finals: list[list[State]] = [[] for _ in range(self.n_layers)]

        def run(direction: int, packed: PackedSequence) -> list[torch.Tensor]:
            sorted_idx, unsorted_idx = packed.sorted_indices, packed.unsorted_indices
            batch_sizes = packed.batch_sizes.tolist()
            data, outputs = packed.data, []
            cells = cast(Sequence[ProjectedLSTMCell], (self.forward_layers, self.backward_layers)[direction])
            for layer_index, cell in enumerate(cells):
                h0, c0 = state[layer_index][direction]
                out, (h, c) = cell.run(data, batch_sizes, (h0[sorted_idx], c0[sorted_idx]))
                if self.use_skip_connections and layer_index > 0:
                    out = out + data
                data = out
                outputs.append(out)
                finals[layer_index].append((h[unsorted_idx], c[unsorted_idx]))
            return outputs

        forward_outputs, backward_outputs = run_directions(inputs, lengths, run)
        return forward_outputs, backward_outputs, finals


def run_directions(
    inputs: torch.Tensor, lengths: torch.Tensor, run: Callable[[int, PackedSequence], list[torch.Tensor]]
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Run a forward and a backward language model over right-padded ``inputs`` ``(batch, time, dim)``.

    The backward LM reads each row reversed within its ``lengths``. For direction 0 (forward), then
    1 (backward), ``run(direction, packed)`` gets that direction's inputs as a ``PackedSequence``
    and returns its per-layer outputs as packed data (rows in ``packed.data``'s order). Returns the
    per-layer forward and backward outputs, each ``(batch, time, out)`` in natural time order,
    zero at padding.
    """
    time = inputs.shape[1]
    lengths_cpu = lengths.to("cpu", torch.int64)
    reverse_index = _reverse_index(lengths_cpu, time).to(inputs.device)
    directions = []
    for direction in range(2):
        x = inputs if direction == 0 else _gather_time(inputs, reverse_index)
        packed = pack_padded_sequence(x, lengths_cpu, batch_first=True, enforce_sorted=False)
        outputs = []
        for out in run(direction, packed):
            padded, _ = pad_packed_sequence(
                PackedSequence(out, packed.batch_sizes, packed.sorted_indices, packed.unsorted_indices),
                batch_first=True,
                total_length=time,
            )
            outputs.append(padded if direction == 0 else _gather_time(padded, reverse_index))
        directions.append(outputs)
    return directions[0], directions[1]


def _reverse_index(lengths: torch.Tensor, time: int) -> torch.Tensor:
    """Index that reverses each row within its length (padding positions map to themselves)."""
    positions = torch.arange(time).unsqueeze(0)
    reversed_positions = lengths.unsqueeze(1) - 1 - positions
    return torch.where(reversed_positions >= 0, reversed_positions, positions)


def _gather_time(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return x.gather(1, index.unsqueeze(-1).expand(-1, -1, x.shape[-1]))
