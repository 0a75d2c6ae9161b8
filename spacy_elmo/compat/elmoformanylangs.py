"""``from spacy_elmo.compat.elmoformanylangs import Embedder``: ELMoForManyLangs' API on this package's backend.

``Embedder(model_dir, batch_size=64).sents2elmo(sents, output_layer=-1)`` takes and returns what
``elmoformanylangs.Embedder`` does, and its numbers are the package's for one batch from a fresh
``Embedder`` (zero initial LSTM state). Two things differ on purpose (docs/migrating-from-elmoformanylangs.md):

- stateless and deterministic: the package carries each LSTM row's final state into the next
  batch and shuffles the order of its batches at random, so its vectors for a sentence depend on
  which sentences came before and on the random order (not reproducible); here each sentence
  starts from the zero state, whatever its batch;
- the device is the one asked for (``device=``, CPU by default); the package takes CUDA whenever
  it is present.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Union

import numpy as np
import torch

from ..groundwork.file_names import PathLike
from ..runtime.configuration.validation import positive_int, validate_sentences
from ..runtime.embedding.backend import ElmoBackend, load_bilm

__all__ = ["Embedder"]


class Embedder:
    """An ELMoForManyLangs model directory (any model ``load_bilm`` takes works too), embedding tokenized sentences.

    model_dir: the model directory (``config.json``, ``char.dic``, ``word.dic``, ``encoder.pkl``,
        ``token_embedder.pkl``).
    batch_size: sentences per batch (memory only: the vectors do not depend on it).
    device: torch device (``None``: CPU).
    """

    def __init__(
        self,
        model_dir: PathLike,
        batch_size: int = 64,  # ELMoForManyLangs' own default, not a setting of this package
        *,
        device: Union[str, torch.device, None] = None,
    ) -> None:
        self.model_dir = model_dir
        self.batch_size = positive_int(batch_size, "batch_size")
        self.backend: ElmoBackend = load_bilm(model_dir, device=device)

    def sents2elmo(self, sents: Sequence[Sequence[str]], output_layer: int = -1) -> list[np.ndarray]:
        """One float32 array per sentence, in input order.

        sents: token lists; a plain string where one belongs, or a token that is not a ``str``, is a ``TypeError``
            naming it (where ELMoForManyLangs would split a string into characters).
        output_layer: ``-1`` the average of all layers ``(n_tokens, dim)``; ``-2`` every layer
            ``(n_layers + 1, n_tokens, dim)``; ``0`` the token encoder's layer, ``1``.. an LSTM layer.
        """
        sentences = validate_sentences(sents, "sents")  # before anything reads them (list() splits a string)
        n_layers = self.backend.n_layers + 1
        if (
            isinstance(output_layer, bool)
            or not isinstance(output_layer, (int, np.integer))
            or not -2 <= output_layer < n_layers
        ):
            raise ValueError(
                f"output_layer={output_layer!r}: expected -1 (average), -2 (all layers) or 0..{n_layers - 1}"
            )
        layers = self.backend.embed(sentences, batch_size=self.batch_size)
        if output_layer == -2:
            return layers
        if output_layer == -1:
            return [np.average(array, axis=0) for array in layers]
        return [np.ascontiguousarray(array[output_layer]) for array in layers]
