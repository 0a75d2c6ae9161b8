"""ELMo's biLSTM: LSTM cells with a clipped projection, stacked with optional residual links.

Each direction runs over the valid positions of each sentence only (a shrinking
prefix of the length-sorted batch, like a ``PackedSequence``), so a sentence's
outputs do not depend on padding or on its neighbours in the batch.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from .fast import packed_layout, run_packed, unpack

# (h, c) for one direction of one layer, each (batch, dim)
State = Tuple[torch.Tensor, torch.Tensor]
# [layer][direction] -> State, direction 0 = forward, 1 = backward
BiLSTMState = List[List[State]]

FORGET_BIAS = 1.0  # added by TensorFlow's LSTMCell at run time; not stored in the weight file


class ProjectedLSTMCell(nn.Module):
    """bilm-tf ``LSTMCell`` with ``num_proj``: gates in TF order (i, j, f, o), clipped cell and projection.

    ``bias`` holds the file's raw bias; the +1.0 forget bias is added in ``forward`` so
    that reading and writing the weight file is bit-exact.
    """

    def __init__(self, input_dim: int, cell_dim: int, proj_dim: int, cell_clip: Optional[float], proj_clip: Optional[float]) -> None:
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

    def run(self, packed_input: torch.Tensor, batch_sizes: List[int], initial: State) -> Tuple[torch.Tensor, State]:
        """Run over packed data (time-major, shrinking batch); returns packed outputs and final states."""
        gates_x = packed_input @ self.input_weight + (self.bias + self.forget_offset)
        h, c = initial
        outputs, finished_h, finished_c = [], [], []
        c_dim = self.cell_dim
        start = 0
        for n in batch_sizes:
            if n < h.shape[0]:  # rows n.. ended at the previous step: keep their final state
                finished_h.append(h[n:])
                finished_c.append(c[n:])
                h, c = h[:n], c[:n]
            gates = gates_x[start : start + n] + h @ self.state_weight
            start += n
            i = torch.sigmoid(gates[:, :c_dim])
            j = torch.tanh(gates[:, c_dim : 2 * c_dim])
            f = torch.sigmoid(gates[:, 2 * c_dim : 3 * c_dim])
            o = torch.sigmoid(gates[:, 3 * c_dim :])
            c = i * j + f * c
            if self.cell_clip:
                c = c.clamp(-self.cell_clip, self.cell_clip)
            h = (o * torch.tanh(c)) @ self.projection
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
        zeros = lambda dim: like.new_zeros(batch_size, dim)  # noqa: E731
        return [[(zeros(self.proj_dim), zeros(self.cell_dim)) for _ in range(2)] for _ in range(self.n_layers)]

    def forward(
        self, inputs: torch.Tensor, lengths: torch.Tensor, initial_state: Optional[BiLSTMState] = None
    ) -> Tuple[List[torch.Tensor], List[torch.Tensor], BiLSTMState]:
        """``inputs`` (batch, time, proj) right-padded, ``lengths`` (batch,) all >= 1.

        Returns per-layer forward outputs and backward outputs, each (batch, time, proj) with
        zeros at padding, and the final state of every layer and direction (batch order).
        """
        if not needs_autograd(self, inputs, initial_state):
            return self._forward_inference(inputs, lengths, initial_state)
        return self.forward_reference(inputs, lengths, initial_state)

    def forward_reference(
        self, inputs: torch.Tensor, lengths: torch.Tensor, initial_state: Optional[BiLSTMState] = None
    ) -> Tuple[List[torch.Tensor], List[torch.Tensor], BiLSTMState]:
        """The autograd-friendly path (one packed run per direction); ``forward`` uses it when gradients are needed."""
        batch, time = inputs.shape[:2]
        lengths_cpu = lengths.to("cpu", torch.int64)
        state = initial_state if initial_state is not None else self.zero_state(batch, inputs)
        reverse_index = _reverse_index(lengths_cpu, time).to(inputs.device)
        directions = []
        for direction, layers in enumerate((self.forward_layers, self.backward_layers)):
            x = inputs if direction == 0 else _gather_time(inputs, reverse_index)
            packed = pack_padded_sequence(x, lengths_cpu, batch_first=True, enforce_sorted=False)
            sorted_idx, unsorted_idx = packed.sorted_indices, packed.unsorted_indices
            batch_sizes = packed.batch_sizes.tolist()
            data = packed.data
            outputs, finals = [], []
            for layer_index, cell in enumerate(layers):
                h0, c0 = state[layer_index][direction]
                out, (h, c) = cell.run(data, batch_sizes, (h0[sorted_idx], c0[sorted_idx]))
                if self.use_skip_connections and layer_index > 0:
                    out = out + data
                data = out
                padded, _ = pad_packed_sequence(
                    PackedSequence(out, packed.batch_sizes, sorted_idx, unsorted_idx), batch_first=True, total_length=time
                )
                outputs.append(padded if direction == 0 else _gather_time(padded, reverse_index))
                finals.append((h[unsorted_idx], c[unsorted_idx]))
            directions.append((outputs, finals))
        (fwd_out, fwd_final), (bwd_out, bwd_final) = directions
        final_state = [[fwd_final[layer], bwd_final[layer]] for layer in range(self.n_layers)]
        return fwd_out, bwd_out, final_state


    def _forward_inference(
        self, inputs: torch.Tensor, lengths: torch.Tensor, initial_state: Optional[BiLSTMState]
    ) -> Tuple[List[torch.Tensor], List[torch.Tensor], BiLSTMState]:
        batch, time = inputs.shape[:2]
        layout = packed_layout(lengths, time, inputs.device)
        packed, final_state = run_packed(self, inputs, layout, initial_state)
        fwd = [unpack(p[0], layout.forward_index, batch, time) for p in packed]
        bwd = [unpack(p[1], layout.backward_index, batch, time) for p in packed]
        return fwd, bwd, final_state


def needs_autograd(module: nn.Module, *tensors: object) -> bool:
    """True when gradients are on and a parameter or an input tensor (nested lists too) requires them."""
    if not torch.is_grad_enabled():
        return False
    if any(p.requires_grad for p in module.parameters()):
        return True
    stack = list(tensors)
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            if item.requires_grad:
                return True
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return False


def _reverse_index(lengths: torch.Tensor, time: int) -> torch.Tensor:
    """Index that reverses each row within its length (padding positions map to themselves)."""
    positions = torch.arange(time).unsqueeze(0)
    reversed_positions = lengths.unsqueeze(1) - 1 - positions
    return torch.where(reversed_positions >= 0, reversed_positions, positions)


def _gather_time(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return x.gather(1, index.unsqueeze(-1).expand(-1, -1, x.shape[-1]))
