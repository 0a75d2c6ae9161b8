"""AllenNLP's stateful ``ElmoLstm`` around this package's biLSTM: each batch row's state carried to the next call.

AllenNLP 0.9's ELMo encoder (``allennlp.modules.elmo_lstm.ElmoLstm``, an ``_EncoderBase`` with
``stateful=True``) starts batch row ``k`` of every call from the final ``(h, c)`` of row ``k`` in
the previous call (forward LM: after ``</S>``; backward LM: after ``<S>``); a larger batch gets
zero states for its new rows, a smaller one uses the first rows and leaves the others stored.
This module keeps that bookkeeping, in AllenNLP's layout (``_states`` = ``(h, c)``, each
``(num_layers, batch, 2 * dim)``, forward then backward in the last axis), and runs the LSTM
itself through :func:`spacy_elmo.bilm.model.bilstm_outputs` (the inference path when no gradient
is needed, the reference autograd path otherwise), which takes an initial state and returns the
final one. ``stateful=False`` starts every call from zeros: this package's batch-invariant vectors.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch
from torch import nn

from ...bilm.lstm import BiLSTMState, ElmoBiLSTM
from ...bilm.model import bilstm_outputs
from ...bilm.threads import batch_thread_limit, thread_limit

RnnStates = tuple[torch.Tensor, torch.Tensor]
Rows = Callable[[torch.Tensor], torch.Tensor]  # picks the batch rows the LSTM runs on


class ElmoLstm(nn.Module):
    """``forward(inputs (batch, time, proj), mask (batch, time))`` -> ``(num_layers, batch, time, 2 * proj)``."""

    def __init__(self, lstm: ElmoBiLSTM, stateful: bool = True) -> None:
        super().__init__()
        self._lstm = lstm
        self.stateful = stateful
        self._states: Optional[RnnStates] = None
        self.num_layers = lstm.n_layers
        self.hidden_size = lstm.proj_dim
        self.cell_size = lstm.cell_dim

    def forward(self, inputs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        batch, _time = mask.shape
        lengths = mask.long().sum(dim=-1)
        valid = torch.nonzero(lengths > 0).flatten()  # AllenNLP leaves all-padding rows out of the LSTM
        initial = self._initial_states(batch)
        run_all = len(valid) == batch
        rows: Rows = (lambda t: t) if run_all else (lambda t: t.index_select(0, valid))
        initial_state = None if initial is None else self._to_bilstm_state(initial, rows)
        step_macs = len(valid) * self.hidden_size * 4 * self.cell_size  # as ElmoBackend: small work on one thread
        with thread_limit(batch_thread_limit(step_macs, inputs.device, 1)):
            forward, backward, final = bilstm_outputs(self._lstm, rows(inputs), rows(lengths), initial_state)
        stacked = torch.stack([torch.cat(pair, dim=-1) for pair in zip(forward, backward)])
        h = torch.stack([torch.cat([layer[0][0], layer[1][0]], dim=-1) for layer in final])
        c = torch.stack([torch.cat([layer[0][1], layer[1][1]], dim=-1) for layer in final])
        if not run_all:
            stacked = _scatter_rows(stacked, valid, batch, dim=1)
            h, c = _scatter_rows(h, valid, batch, dim=1), _scatter_rows(c, valid, batch, dim=1)
        if self.stateful:
            self._update_states((h, c))
        return stacked

    def _initial_states(self, batch: int) -> Optional[RnnStates]:
        """The stored states for a batch of ``batch`` rows (AllenNLP's ``_get_initial_states``: new rows get zeros)."""
        if not self.stateful or self._states is None:
            return None
        stored = self._states[0].size(1)
        if batch > stored:
            h, c = (torch.cat([s, s.new_zeros(s.size(0), batch - stored, s.size(2))], dim=1) for s in self._states)
            self._states = (h, c)
            return self._states
        if batch < stored:
            return self._states[0][:, :batch], self._states[1][:, :batch]
        return self._states

    def _to_bilstm_state(self, states: RnnStates, rows: Rows) -> BiLSTMState:
        """AllenNLP's ``(h, c)`` (layers, batch, [forward; backward]) as ``[layer][direction] -> (h, c)`` of
        ``rows``."""
        h, c = (rows(s.transpose(0, 1)).transpose(0, 1) for s in states)
        return [
            [
                (h[k, :, : self.hidden_size], c[k, :, : self.cell_size]),
                (h[k, :, self.hidden_size :], c[k, :, self.cell_size :]),
            ]
            for k in range(self.num_layers)
        ]

    def _update_states(self, final: RnnStates) -> None:
        """AllenNLP's ``_update_states``: store the final states (detached); rows whose new state is all zero keep the
        old one."""
        if self._states is None:
            self._states = (final[0].detach(), final[1].detach())
            return
        stored, new_batch = self._states[0].size(1), final[0].size(1)
        updated: list[torch.Tensor] = []
        for old, new in zip(self._states, final):
            used = (new[0].sum(-1) != 0.0).to(new.dtype).view(1, new_batch, 1)
            if stored > new_batch:
                old = old.clone()
                old[:, :new_batch] = new + old[:, :new_batch] * (1 - used)
                updated.append(old.detach())
            else:
                updated.append((new + old * (1 - used)).detach())
        self._states = (updated[0], updated[1])

    def reset_states(self, mask: Optional[torch.Tensor] = None) -> None:
        """Forget the carried state: all of it, or (``mask`` ``(batch,)``) the rows where ``mask`` is 1."""
        if mask is None:
            self._states = None
            return
        if self._states is None:
            return
        size = mask.size(0)
        keep = 1 - mask.to(self._states[0].dtype).view(1, size, 1)
        for state in self._states:
            if state.size(1) != size:
                raise ValueError(
                    f"Trying to reset states using mask with incorrect batch size. "
                    f"Expected batch size: {state.size(1)}. Provided batch size: {size}."
                )
        self._states = (self._states[0] * keep, self._states[1] * keep)


def _scatter_rows(values: torch.Tensor, rows: torch.Tensor, batch: int, dim: int) -> torch.Tensor:
    """``values`` with its ``dim`` axis spread to ``batch`` entries: entry ``rows[i]`` is ``values``' ``i``-th, the
    rest zero."""
    shape = list(values.shape)
    shape[dim] = batch
    return values.new_zeros(shape).index_copy(dim, rows, values)
