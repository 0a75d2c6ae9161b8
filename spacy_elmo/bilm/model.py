"""The bidirectional language model: character ids -> ELMo layer activations.

This module is the one place that chooses between the two ways of computing the model: the
reference path (``CharCNNEncoder.forward``, ``ElmoBiLSTM.forward``), which autograd and training
use, and the inference path (:mod:`.inference`), which is faster and records no history. The
inference path runs whenever no gradient is needed (:func:`needs_autograd`); the two agree to
float32 rounding. For each half of the model one function here chooses between the module's own ``forward`` and
the inference path: :func:`run_token_encoder` (:func:`.inference.token_vectors_without_autograd`) and
:func:`bilstm_outputs` (:func:`.inference.bilstm_outputs`); :meth:`BiLM.encode_tokens`, the model's public token
encoding, adds the distinct-token dedup on top. On a GPU both run with full float32 products, never TF32
(:mod:`.exact`).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from . import inference
from .encoder import CharCNNEncoder
from .exact import exact_float32
from .lstm import BiLSTMState, ElmoBiLSTM
from .options import BiLMOptions


def needs_autograd(module: nn.Module, *tensors: object) -> bool:
    """True when gradients are on and a parameter or an input tensor (nested lists too) requires them."""
    if not torch.is_grad_enabled():
        return False
    if any(p.requires_grad for p in module.parameters()):
        _check_weights_kept(module)
        return True
    stack = list(tensors)
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            if item.requires_grad:
                _check_weights_kept(module)
                return True
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return False


def _check_weights_kept(module: nn.Module) -> None:
    """The reference path needs the float32 weights: refuse clearly where int8 released them."""
    if any(p.is_meta for p in module.parameters()):
        raise RuntimeError(
            "this biLM was loaded with precision='int8', which keeps only int8 weights for inference: gradients and "
            "training need the float32 model (load_bilm(..., precision='float32'), or load_model())"
        )


def run_token_encoder(encoder: CharCNNEncoder, char_ids: torch.Tensor) -> torch.Tensor:
    """``encoder(char_ids)``: token vectors ``(n_tokens, proj)``, one per row of char ids, through the one chooser:
    the inference path (:func:`.inference.token_vectors_without_autograd`) when no gradient is needed."""
    with exact_float32(char_ids.device):  # no TF32 on a GPU, whatever the process set (:mod:`.exact`)
        if needs_autograd(encoder, char_ids):
            return encoder(char_ids)
        return inference.token_vectors_without_autograd(encoder, char_ids)


def bilstm_outputs(
    lstm: ElmoBiLSTM, inputs: torch.Tensor, lengths: torch.Tensor, initial_state: Optional[BiLSTMState] = None
) -> tuple[list[torch.Tensor], list[torch.Tensor], BiLSTMState]:
    """``lstm(inputs, lengths, initial_state)``, by the inference path (:func:`.inference.bilstm_outputs`) when no
    gradient is needed."""
    with exact_float32(inputs.device):
        if needs_autograd(lstm, inputs, initial_state):
            return lstm(inputs, lengths, initial_state)
        return inference.bilstm_outputs(lstm, inputs, lengths, initial_state)


class BiLM(nn.Module):
    """ELMo biLM. ``forward`` takes right-padded char ids ``(batch, time, 50)`` (no ``<S>``/``</S>``).

    Returns activations ``(n_layers + 1, batch, time, 2 * projection_dim)`` (layer 0 is the token
    embedding repeated, ``[x; x]``), the token mask, and the final LSTM state. By default every
    sentence starts from a zero state (stateless); pass ``initial_state`` to carry state over.
    """

    bos_ids: torch.Tensor  # buffers: the character ids of <S> and </S>
    eos_ids: torch.Tensor

    def __init__(self, options: BiLMOptions, token_encoder: Optional[CharCNNEncoder] = None) -> None:
        """``token_encoder``: another format's token encoder (default: ELMo's char CNN, from ``options``)."""
        super().__init__()
        self.options = options
        self.token_encoder = (
            token_encoder
            if token_encoder is not None
            else CharCNNEncoder(
                options.filters,
                options.char_embed_dim,
                options.char_embedding_rows,  # the weight file has no row for char id 0; the model adds it
                options.n_highway,
                options.projection_dim,
                options.activation,
                options.max_chars,
            )
        )
        self.lstm = ElmoBiLSTM(
            options.projection_dim,
            options.cell_dim,
            options.projection_dim,
            options.n_layers,
            options.cell_clip,
            options.proj_clip,
            options.use_skip_connections,
        )
        markers = self.token_encoder.token_ids([self.token_encoder.bos_token, self.token_encoder.eos_token])
        self.register_buffer("bos_ids", torch.as_tensor(markers[0]), persistent=False)
        self.register_buffer("eos_ids", torch.as_tensor(markers[1]), persistent=False)

    @property
    def n_layers(self) -> int:
        return self.options.n_layers

    @property
    def output_dim(self) -> int:
        return self.options.output_dim

    def encode_tokens(self, char_ids: torch.Tensor) -> torch.Tensor:
        """Token vectors for char ids of any leading shape ``(..., 50)``; each distinct token is encoded once."""
        flat = char_ids.reshape(-1, char_ids.shape[-1])
        unique, inverse = torch.unique(flat, dim=0, return_inverse=True)
        return run_token_encoder(self.token_encoder, unique)[inverse].reshape(*char_ids.shape[:-1], -1)

    def add_boundaries(self, char_ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Insert ``<S>`` before and ``</S>`` after each sentence; returns new ids and lengths."""
        batch, time, n_chars = char_ids.shape
        lengths = mask.sum(dim=1)
        out = char_ids.new_zeros(batch, time + 2, n_chars)
        out[:, 1 : time + 1] = char_ids
        out[:, 0] = self.bos_ids
        out[torch.arange(batch, device=char_ids.device), lengths + 1] = self.eos_ids
        return out, lengths + 2

    def forward(
        self, char_ids: torch.Tensor, initial_state: Optional[BiLSTMState] = None
    ) -> tuple[torch.Tensor, torch.Tensor, Optional[BiLSTMState]]:
        mask = (char_ids > 0).any(dim=-1)
        with_bounds, lengths = self.add_boundaries(char_ids, mask)
        layers, final_state = self.contextualize(with_bounds, lengths, initial_state)
        layers = layers[:, :, 1:-1]  # drop <S>; the </S> column of each row becomes padding below
        layers = layers * mask[None, :, :, None].to(layers.dtype)
        return layers, mask, final_state

    def contextualize(
        self, char_ids: torch.Tensor, lengths: torch.Tensor, initial_state: Optional[BiLSTMState] = None
    ) -> tuple[torch.Tensor, Optional[BiLSTMState]]:
        """Activations ``(n_layers + 1, batch, time, dim)`` for ids that already hold the boundary tokens."""
        return self.contextualize_vectors(self.encode_tokens(char_ids), lengths, initial_state)

    def contextualize_vectors(
        self,
        tokens: torch.Tensor,
        lengths: torch.Tensor,
        initial_state: Optional[BiLSTMState] = None,
        *,
        boundaries: bool = True,
    ) -> tuple[torch.Tensor, Optional[BiLSTMState]]:
        """Like :meth:`contextualize`, from token vectors ``(batch, time, proj)`` (e.g. cached ones).

        Without autograd (inference mode, or nothing requires grad) this takes the inference path
        (:func:`.inference.layer_activations`), which writes every layer straight into the output
        tensor. There, ``boundaries=False`` (for callers that drop the ``<S>`` / ``</S>`` positions,
        like :meth:`ElmoBackend.embed`) skips each LM's step at its final boundary token: the
        forward LM's output at ``</S>`` and the backward LM's at ``<S>`` are left zero and no final
        state is returned. Two steps fewer per layer; every other position agrees with the full
        computation to float32 rounding (fewer rows at some steps can take another GEMM kernel).
        """
        with exact_float32(tokens.device):
            return self._contextualize_vectors(tokens, lengths, initial_state, boundaries)

    def _contextualize_vectors(
        self, tokens: torch.Tensor, lengths: torch.Tensor, initial_state: Optional[BiLSTMState], boundaries: bool
    ) -> tuple[torch.Tensor, Optional[BiLSTMState]]:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        valid = (positions[None, :] < lengths.to(tokens.device)[:, None]).to(tokens.dtype)
        token_layer = torch.cat([tokens, tokens], dim=-1) * valid[..., None]  # layer 0: the token vectors, twice
        if needs_autograd(self, tokens, initial_state):
            forward_layers, backward_layers, final_state = self.lstm(tokens, lengths, initial_state)
            layers: list[torch.Tensor] = [token_layer]
            layers += [torch.cat(pair, dim=-1) for pair in zip(forward_layers, backward_layers)]
            return torch.stack(layers), final_state
        skip_last = not boundaries and bool((lengths >= 2).all())
        return inference.layer_activations(self.lstm, tokens, lengths, token_layer, initial_state, skip_last=skip_last)
