"""ELMoForManyLangs (HIT-SCIR) models: their token encoder and biLM, on this package's biLM pieces.

What differs from ELMo/AllenNLP's format, each as ELMoForManyLangs computes it:

- characters are Unicode code points looked up in the model's char dictionary (``char.dic``),
  not UTF-8 bytes; a character not in it is ``<oov>``;
- a token longer than ``max_characters_per_token - 2`` code points is cut to that length (for the
  word lookup as well); its char row is ``[B, chars..., E, <pad>...]``, where ``B`` and ``E`` are
  the dictionary's ``<eow>`` and ``<bow>`` ids in that order (its batching code swaps the two
  names; trained models learnt them so), and the sentence markers ``<bos>`` / ``<eos>`` are
  ``[B, <bos>|<eos>, E, <pad>...]`` (a token spelled ``<bos>`` or ``<eos>`` is that marker);
- the padding char has a trained, non-zero embedding, and the CNN max-pools over all positions,
  padding included;
- its highway is ``g * x + (1 - g) * relu(A x)`` with ``g = sigmoid(B x)`` (both halves in one
  ``Linear``: ``A`` its first ``n_filters`` rows, ``B`` the rest), and the token vector is a
  projection of ``[word embedding; highway(char CNN)]`` (of the highway output alone in char-only
  models);
- its LSTM (AllenNLP's ``LstmCellWithProjection``) has gates in the order (i, f, j, o) and no
  forget bias added at run time; layers after the first always add their input (residual).

The LSTM is this package's :class:`~.lstm.ElmoBiLSTM` with the gates permuted to its order when
the weights are read, the forget offset zeroed and skip connections on, so both computation paths
(reference and inference) serve these models too. Reading the model directory is
:mod:`.manylangs_reader`'s job.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch
from torch import nn

from .encoder import CharCNNEncoder, Highway
from .manylangs_tokens import ManyLangsVocabulary
from .model import BiLM
from .options import BiLMOptions


@dataclass(frozen=True)
class ManyLangsConfig:
    """The architecture of an ELMoForManyLangs model (its ``encoder`` and ``token_embedder`` config sections)."""

    filters: tuple[tuple[int, int], ...]
    char_dim: int
    word_dim: int  # 0: a char-only model
    n_highway: int
    activation: str
    max_chars: int
    projection_dim: int
    cell_dim: int
    n_layers: int
    cell_clip: Optional[float]
    proj_clip: Optional[float]

    @property
    def n_filters(self) -> int:
        return sum(n for _, n in self.filters)

    def bilm_options(self, n_chars: int) -> BiLMOptions:
        """The same architecture in :class:`BiLMOptions` terms (for the LSTM and what reads ``model.options``)."""
        return BiLMOptions(
            filters=self.filters,
            char_embed_dim=self.char_dim,
            n_characters=n_chars,
            max_chars=self.max_chars,
            n_highway=self.n_highway,
            activation=self.activation,
            cell_dim=self.cell_dim,
            projection_dim=self.projection_dim,
            n_layers=self.n_layers,
            cell_clip=self.cell_clip,
            proj_clip=self.proj_clip,
            use_skip_connections=True,
        )


class ManyLangsHighway(Highway):
    """ELMoForManyLangs' highway layer: ``g * x + (1 - g) * relu(transform(x))``, ``g = sigmoid(carry(x))``.

    The gate keeps the input where bilm-tf's keeps the transform; ``transform`` and ``carry`` are
    the first and second halves of the file's single ``Linear(F, 2F)``.
    """

    def combine(self, x: torch.Tensor, carry: torch.Tensor, transform: torch.Tensor) -> torch.Tensor:
        gate = torch.sigmoid(carry)
        return gate * x + (1 - gate) * self.activation(transform)


class ManyLangsTokenEncoder(CharCNNEncoder):
    """Tokens -> vectors the ELMoForManyLangs way (see the module docstring); the char CNN is ELMo's.

    Id rows (:meth:`token_ids`, :class:`~.manylangs_tokens.ManyLangsVocabulary`'s) hold the word id (word models
    only) then ``max_chars`` char ids, each shifted by +1 so that a row of zeros means "no token here", as in ELMo's
    char ids.
    """

    bos_token = ManyLangsVocabulary.bos_token
    eos_token = ManyLangsVocabulary.eos_token

    def __init__(self, config: ManyLangsConfig, words: Optional[dict[str, int]], chars: dict[str, int]) -> None:
        super().__init__(
            config.filters, config.char_dim, len(chars), 0, config.projection_dim, config.activation, config.max_chars
        )
        self.highways = nn.ModuleList(ManyLangsHighway(config.n_filters, "relu") for _ in range(config.n_highway))
        self.projection = nn.Linear(config.word_dim + config.n_filters, config.projection_dim)
        self.word_embed = nn.Embedding(len(words), config.word_dim) if words is not None else None
        self.vocabulary = ManyLangsVocabulary(chars, words, config.max_chars)
        self.word_columns = self.vocabulary.word_columns
        self.special = self.vocabulary.special

    def token_ids(self, tokens: Sequence[str]) -> np.ndarray:
        """``(len(tokens), [1 +] max_chars)``: [word id,] char ids, each +1 (0 = no token)."""
        return self.vocabulary.token_ids(tokens)

    def char_columns(self, ids: torch.Tensor) -> torch.Tensor:
        return (ids[:, self.word_columns :] - 1).clamp_min(0)  # a padding row (zeros) reads as char 0

    def projection_input(self, ids: torch.Tensor, highway_out: torch.Tensor) -> torch.Tensor:
        if self.word_embed is None:
            return highway_out
        return torch.cat([self.word_embed((ids[:, 0] - 1).clamp_min(0)), highway_out], dim=-1)


class ManyLangsBiLM(BiLM):
    """An ELMoForManyLangs biLM: :class:`ManyLangsTokenEncoder` + the projected biLSTM, residual on.

    Layer outputs are as its ``Embedder`` returns them: layer 0 the token vector twice, layer ``k``
    the forward and backward LSTM outputs of layer ``k``; ``<bos>`` / ``<eos>`` are run and dropped.
    """

    def __init__(self, config: ManyLangsConfig, words: Optional[dict[str, int]], chars: dict[str, int]) -> None:
        """``words`` / ``chars``: the dictionaries (token -> row); ``words`` is None for a char-only model."""
        super().__init__(config.bilm_options(len(chars)), ManyLangsTokenEncoder(config, words, chars))
        self.config = config
        for cell in [*self.lstm.forward_layers, *self.lstm.backward_layers]:
            cell.forget_offset.zero_()  # its forget bias is part of the stored bias
