"""AllenNLP 0.9's ELMo modules (``allennlp.modules.elmo``, ``ScalarMix``, ``ElmoTokenEmbedder``) on this package's biLM.

The same class names, constructor arguments, defaults, ``forward`` results and shapes, and the
module structure that user code reaches into: ``Elmo._elmo_lstm`` is the :class:`_ElmoBiLm`, whose
``_elmo_lstm`` is the stateful :class:`~.stateful_lstm.ElmoLstm` (``reset_states()``) and whose
``_token_embedder`` is the :class:`_ElmoCharacterEncoder`; every biLM parameter's name in an
``Elmo`` contains ``_elmo_lstm``. The weights, char ids and both computing paths are
:mod:`spacy_elmo.bilm`'s (one :class:`~spacy_elmo.bilm.model.BiLM` is loaded and its token encoder
and biLSTM are used here); the parameters themselves keep this package's layout and names
below those attributes.
"""

from __future__ import annotations

import logging
from typing import Any, Optional, Union

import torch
from torch import nn

from ...bilm.chars import BOS_CHAR_IDS, BOS_TOKEN, EOS_CHAR_IDS, EOS_TOKEN, tokens_to_char_ids
from ...bilm.encoder import CharCNNEncoder
from ...bilm.model import BiLM, run_token_encoder
from ...bilm.weights import load_model
from ...runtime.configuration.validation import check_tokens
from .stateful_lstm import ElmoLstm
from .util import (
    ConfigurationError,
    PathOrUrl,
    add_sentence_boundary_token_ids,
    local_files,
    remove_sentence_boundaries,
)

logger = logging.getLogger(__name__)

Outputs = dict[str, Union[torch.Tensor, list[torch.Tensor]]]


def _load_bilm(options_file: PathOrUrl, weight_file: PathOrUrl, requires_grad: bool) -> BiLM:
    """The biLM of two files (paths or URLs); its parameters train only with ``requires_grad``."""
    bilm = load_model(*local_files(options_file, weight_file))
    for parameter in bilm.parameters():
        parameter.requires_grad_(requires_grad)
    return bilm


class ScalarMix(nn.Module):
    """AllenNLP's ``ScalarMix``: ``gamma * sum(softmax(w)_k * tensor_k)``, each tensor layer-normed first if asked."""

    def __init__(
        self,
        mixture_size: int,
        do_layer_norm: bool = False,
        initial_scalar_parameters: Optional[list[float]] = None,
        trainable: bool = True,
    ) -> None:
        super().__init__()
        self.mixture_size = mixture_size
        self.do_layer_norm = do_layer_norm
        if initial_scalar_parameters is None:
            initial_scalar_parameters = [0.0] * mixture_size
        elif len(initial_scalar_parameters) != mixture_size:
            raise ConfigurationError(
                f"Length of initial_scalar_parameters {initial_scalar_parameters} differs from mixture_size "
                f"{mixture_size}"
            )
        self.scalar_parameters = nn.ParameterList(
            [nn.Parameter(torch.FloatTensor([value]), requires_grad=trainable) for value in initial_scalar_parameters]
        )
        self.gamma = nn.Parameter(torch.FloatTensor([1.0]), requires_grad=trainable)

    def forward(self, tensors: list[torch.Tensor], mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        if len(tensors) != self.mixture_size:
            raise ConfigurationError(
                f"{len(tensors)} tensors were passed, but the module was initialized to mix {self.mixture_size} "
                "tensors."
            )
        weights = torch.split(torch.softmax(torch.cat(list(self.scalar_parameters)), dim=0), 1)
        if not self.do_layer_norm:
            return self.gamma * sum(w * t for w, t in zip(weights, tensors))
        if mask is None:
            raise ConfigurationError("ScalarMix with do_layer_norm=True needs the mask")
        mask_float = mask.float()
        broadcast_mask = mask_float.unsqueeze(-1)
        count = torch.sum(mask_float) * tensors[0].size(-1)

        def layer_norm(tensor: torch.Tensor) -> torch.Tensor:
            masked = tensor * broadcast_mask
            mean = torch.sum(masked) / count
            variance = torch.sum(((masked - mean) * broadcast_mask) ** 2) / count
            return (tensor - mean) / torch.sqrt(variance + 1e-12)

        return self.gamma * sum(w * layer_norm(t) for w, t in zip(weights, tensors))


class _ElmoCharacterEncoder(nn.Module):
    """Context-independent token vectors: char ids ``(batch, time, 50)`` -> ``{"mask", "token_embedding"}``.

    ``<S>`` and ``</S>`` are added to each sentence, so both outputs have ``time + 2`` positions
    (``token_embedding`` ``(batch, time + 2, projection_dim)``, the mask a long tensor).
    """

    def __init__(self, options_file: PathOrUrl, weight_file: PathOrUrl, requires_grad: bool = False) -> None:
        super().__init__()
        self._setup(_load_bilm(options_file, weight_file, requires_grad).token_encoder, requires_grad)

    @classmethod
    def _of(cls, encoder: CharCNNEncoder, requires_grad: bool) -> _ElmoCharacterEncoder:
        """The module around an already loaded token encoder (the biLM's own: no second copy of the weights)."""
        module = cls.__new__(cls)
        nn.Module.__init__(module)
        module._setup(encoder, requires_grad)
        return module

    def _setup(self, encoder: CharCNNEncoder, requires_grad: bool) -> None:
        self._char_cnn = encoder.train()
        self.output_dim = encoder.projection_dim
        self.requires_grad = requires_grad
        self._beginning_of_sentence_characters = torch.from_numpy(BOS_CHAR_IDS.copy())
        self._end_of_sentence_characters = torch.from_numpy(EOS_CHAR_IDS.copy())

    def get_output_dim(self) -> int:
        return self.output_dim

    def forward(self, inputs: torch.Tensor) -> dict[str, torch.Tensor]:
        mask = ((inputs > 0).long().sum(dim=-1) > 0).long()
        ids, mask_with_bos_eos = add_sentence_boundary_token_ids(
            inputs,
            mask,
            self._beginning_of_sentence_characters.to(inputs.device),
            self._end_of_sentence_characters.to(inputs.device),
        )
        batch, time, n_chars = ids.shape
        embedding = run_token_encoder(self._char_cnn, ids.view(-1, n_chars))
        return {"mask": mask_with_bos_eos, "token_embedding": embedding.view(batch, time, -1)}

    def token_vectors(self, tokens: list[str]) -> torch.Tensor:
        """Vectors ``(len(tokens), projection_dim)`` of tokens (``<S>`` / ``</S>`` the markers), without gradients."""
        tokens = check_tokens(tokens, "tokens")
        with torch.no_grad():
            device = next(self._char_cnn.parameters()).device
            return run_token_encoder(self._char_cnn, torch.from_numpy(tokens_to_char_ids(tokens)).to(device)).detach()


class _ElmoBiLm(nn.Module):
    """The pre-trained biLM: ``forward(inputs, word_inputs=None)`` -> ``{"activations": [...], "mask": ...}``.

    ``activations`` holds ``num_layers`` tensors ``(batch, time + 2, 2 * projection_dim)`` (the
    char-CNN layer doubled, then each LSTM layer), with the ``<S>`` / ``</S>`` positions; ``mask``
    is ``(batch, time + 2)``. With ``vocab_to_cache``, ``word_inputs`` ``(batch, time)`` (ids into
    that list) look the char-CNN layer up instead of computing it; ids outside the list fall back
    to the char CNN over ``inputs``. ``stateful=False`` (not in AllenNLP) starts every call from a
    zero LSTM state, so a sentence's vectors do not depend on earlier calls or its batch row.
    """

    def __init__(
        self,
        options_file: PathOrUrl,
        weight_file: PathOrUrl,
        requires_grad: bool = False,
        vocab_to_cache: Optional[list[str]] = None,
        *,
        stateful: bool = True,
    ) -> None:
        super().__init__()
        if vocab_to_cache is not None:  # checked before the model is read
            vocab_to_cache = check_tokens(vocab_to_cache, "vocab_to_cache")
        bilm = _load_bilm(options_file, weight_file, requires_grad)
        if not bilm.options.use_skip_connections:
            raise ConfigurationError("We only support pretrained biLMs with residual connections")
        self._token_embedder = _ElmoCharacterEncoder._of(bilm.token_encoder, requires_grad)
        self._requires_grad = requires_grad
        self._word_embedding: Optional[nn.Embedding] = None
        self._bos_embedding: Optional[torch.Tensor] = None
        self._eos_embedding: Optional[torch.Tensor] = None
        if vocab_to_cache:
            self.create_cached_cnn_embeddings(vocab_to_cache)
        self._elmo_lstm = ElmoLstm(bilm.lstm.train(), stateful=stateful)
        self.num_layers = bilm.n_layers + 1

    def get_output_dim(self) -> int:
        return 2 * self._token_embedder.get_output_dim()

    def create_cached_cnn_embeddings(self, tokens: list[str]) -> None:
        """Precompute the char-CNN vectors of ``tokens`` (word id ``i`` is ``tokens[i]``; id 0, padding, is zeros) and
        of ``<S>`` / ``</S>``."""
        vectors = self._token_embedder.token_vectors([BOS_TOKEN, EOS_TOKEN, *check_tokens(tokens, "tokens")])
        self._bos_embedding, self._eos_embedding = vectors[0], vectors[1]
        weight = vectors[2:].clone()
        weight[0] = 0.0  # AllenNLP's Embedding(padding_index=0) zeroes word 0: padding positions stay masked
        embedding = nn.Embedding(len(tokens), vectors.shape[1], padding_idx=0, _weight=weight)
        embedding.weight.requires_grad_(self._requires_grad)
        self._word_embedding = embedding

    def _cached(self, word_inputs: torch.Tensor) -> bool:
        """Whether every id of ``word_inputs`` is in the cached vocabulary (else the char CNN runs)."""
        if self._word_embedding is None:
            return False
        size = self._word_embedding.num_embeddings
        return bool(((word_inputs >= 0) & (word_inputs < size)).all())

    def forward(self, inputs: torch.Tensor, word_inputs: Optional[torch.Tensor] = None) -> Outputs:
        if word_inputs is not None and self._cached(word_inputs):
            assert self._word_embedding is not None and self._bos_embedding is not None
            mask_without_bos_eos = (word_inputs > 0).long()
            device = word_inputs.device
            type_representation, mask = add_sentence_boundary_token_ids(
                self._word_embedding(word_inputs),
                mask_without_bos_eos,
                self._bos_embedding.to(device),
                self._eos_embedding.to(device),  # type: ignore[union-attr]
            )
        else:
            token_embedding = self._token_embedder(inputs)
            mask, type_representation = token_embedding["mask"], token_embedding["token_embedding"]
        lstm_outputs = self._elmo_lstm(type_representation, mask)
        doubled = torch.cat([type_representation, type_representation], dim=-1)
        activations = [doubled * mask.to(doubled.dtype).unsqueeze(-1)]
        activations += [layer.squeeze(0) for layer in torch.chunk(lstm_outputs, lstm_outputs.size(0), dim=0)]
        return {"activations": activations, "mask": mask}


class Elmo(nn.Module):
    """ELMo representations: ``num_output_representations`` learned (or fixed) mixes of the biLM's layers.

    ``forward(inputs, word_inputs=None)`` takes char ids ``(batch, time, 50)`` (or more leading
    dimensions) and returns ``{"elmo_representations": [(batch, time, dim)] * n, "mask": (batch, time)}``,
    the boundary tokens removed unless ``keep_sentence_boundaries``. Dropout acts in ``train()``
    mode only. ``stateful`` (keyword only, not in AllenNLP) is passed to :class:`_ElmoBiLm`.
    """

    def __init__(
        self,
        options_file: Optional[PathOrUrl],
        weight_file: Optional[PathOrUrl],
        num_output_representations: int,
        requires_grad: bool = False,
        do_layer_norm: bool = False,
        dropout: float = 0.5,
        vocab_to_cache: Optional[list[str]] = None,
        keep_sentence_boundaries: bool = False,
        scalar_mix_parameters: Optional[list[float]] = None,
        module: Optional[nn.Module] = None,
        *,
        stateful: bool = True,
    ) -> None:
        super().__init__()
        if module is not None:
            if options_file is not None or weight_file is not None:
                raise ConfigurationError("Don't provide options_file or weight_file with module")
            self._elmo_lstm: Any = module
        else:
            if options_file is None or weight_file is None:
                raise ConfigurationError("Elmo needs options_file and weight_file (or module)")
            self._elmo_lstm = _ElmoBiLm(
                options_file, weight_file, requires_grad=requires_grad, vocab_to_cache=vocab_to_cache, stateful=stateful
            )
        self._has_cached_vocab = vocab_to_cache is not None
        self._keep_sentence_boundaries = keep_sentence_boundaries
        self._dropout = nn.Dropout(p=dropout)
        self._scalar_mixes: list[ScalarMix] = []
        for k in range(num_output_representations):
            scalar_mix = ScalarMix(
                self._elmo_lstm.num_layers,
                do_layer_norm=do_layer_norm,
                initial_scalar_parameters=scalar_mix_parameters,
                trainable=scalar_mix_parameters is None,
            )
            self.add_module(f"scalar_mix_{k}", scalar_mix)
            self._scalar_mixes.append(scalar_mix)

    def get_output_dim(self) -> int:
        return int(self._elmo_lstm.get_output_dim())

    def forward(self, inputs: torch.Tensor, word_inputs: Optional[torch.Tensor] = None) -> Outputs:
        original_shape = inputs.size()
        reshaped_inputs = inputs.view(-1, *original_shape[-2:]) if len(original_shape) > 3 else inputs
        reshaped_word_inputs = None
        if word_inputs is not None and self._has_cached_vocab:
            reshaped_word_inputs = word_inputs.view(-1, word_inputs.size(-1)) if word_inputs.dim() > 2 else word_inputs
        elif word_inputs is not None:
            logger.warning("Word inputs were passed to ELMo but it does not have a cached vocab.")
        bilm_output = self._elmo_lstm(reshaped_inputs, reshaped_word_inputs)
        layer_activations, mask_with_bos_eos = bilm_output["activations"], bilm_output["mask"]
        representations = []
        mask = mask_with_bos_eos
        for k in range(len(self._scalar_mixes)):
            representation = getattr(self, f"scalar_mix_{k}")(layer_activations, mask_with_bos_eos)
            if not self._keep_sentence_boundaries:
                representation, mask = remove_sentence_boundaries(representation, mask_with_bos_eos)
            representations.append(self._dropout(representation))
        if word_inputs is not None and word_inputs.dim() > 2:
            shape = word_inputs.size()
        elif len(original_shape) > 3:
            shape = original_shape[:-1]
        else:
            return {"elmo_representations": representations, "mask": mask}
        return {"elmo_representations": [r.view(*shape, -1) for r in representations], "mask": mask.view(shape)}


class ElmoTokenEmbedder(nn.Module):
    """One ELMo representation as a token embedder (AllenNLP's ``elmo_token_embedder``), optionally projected.

    ``forward(inputs, word_inputs=None)`` -> ``(batch, time, get_output_dim())``.
    """

    def __init__(
        self,
        options_file: PathOrUrl,
        weight_file: PathOrUrl,
        do_layer_norm: bool = False,
        dropout: float = 0.5,
        requires_grad: bool = False,
        projection_dim: Optional[int] = None,
        vocab_to_cache: Optional[list[str]] = None,
        scalar_mix_parameters: Optional[list[float]] = None,
        *,
        stateful: bool = True,
    ) -> None:
        super().__init__()
        self._elmo = Elmo(
            options_file,
            weight_file,
            1,
            do_layer_norm=do_layer_norm,
            dropout=dropout,
            requires_grad=requires_grad,
            vocab_to_cache=vocab_to_cache,
            scalar_mix_parameters=scalar_mix_parameters,
            stateful=stateful,
        )
        self._projection: Optional[nn.Linear] = None
        self.output_dim = self._elmo.get_output_dim()
        if projection_dim:
            self._projection = nn.Linear(self._elmo.get_output_dim(), projection_dim)
            self.output_dim = projection_dim

    def get_output_dim(self) -> int:
        return self.output_dim

    def forward(self, inputs: torch.Tensor, word_inputs: Optional[torch.Tensor] = None) -> torch.Tensor:
        representation = self._elmo(inputs, word_inputs)["elmo_representations"][0]
        assert isinstance(representation, torch.Tensor)
        return self._projection(representation) if self._projection is not None else representation
