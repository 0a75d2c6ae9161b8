"""``from spacy_elmo.compat.simple_elmo import ElmoModel``: simple_elmo's API, its numbers, no TensorFlow.

``ElmoModel().load(PATH)`` takes what simple_elmo 0.9.2 takes (an NLPL repository zip with
``options.json``, ``model.hdf5`` and ``vocab.txt`` at its root, or a directory), and every model
``spacy_elmo.load_bilm`` takes. By default ``get_elmo_vectors`` and ``get_elmo_vector_average``
give simple_elmo's numbers, because a migration must (docs/migrating-from-simple-elmo.md):

- the texts run in chunks of ``max_batch_size``, in order; its biLM is *stateful*: row ``i`` of a
  chunk starts from the LSTM state row ``i`` of the previous chunk ended in (the state is zero at
  the start of each call), and ``warmup=True`` runs the first chunk once first, so that chunk's
  state is what the real first chunk starts from;
- a text shorter than its chunk's longest holds, at the padded positions, what the biLM gives
  there: the padding token's char-CNN vector in layer 0 (all-zero char ids are not a zero vector)
  and zeros in the LSTM layers; past the chunk's longest, zeros;
- ``layers="average"`` is each layer times ``softmax`` of equal logits, ``1 / n_layers`` (float32), summed;
- ``get_elmo_vector_average`` averages over every position of the chunk's longest text (padding
  included), then L2-normalises; with ``layers="all"`` it reads the ``(n_layers, length, dim)``
  block as ``(length, n_layers, dim)`` before averaging, as simple_elmo does;
- results are float64.

So a text's vectors depend on the texts before it and beside it. ``stateless=True`` gives this
package's batch-invariant vectors instead (:meth:`spacy_elmo.ElmoBackend.embed`: every text starts
from the zero state, padded positions are zero, averages cover the text's own tokens, and with
``layers="all"`` each layer's mean has unit length). Two departures in both modes: texts must be
token lists (a plain string or a non-``str`` token is the backend's ``TypeError``, where simple_elmo
would split a string into characters), and an average that is the zero vector (an empty text) is a
zero row, where simple_elmo's 0 / 0 gives NaN.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Optional, Union

import numpy as np
import torch

from ..bilm.lstm import BiLSTMState
from ..groundwork.file_names import PathLike
from ..runtime.configuration.validation import positive_int, validate_sentences
from ..runtime.embedding.backend import ElmoBackend, load_bilm
from ..runtime.features.mix import mix_layers

__all__ = ["ElmoModel"]

LAYER_CHOICES = ("average", "top", "all")


class ElmoModel:
    """simple_elmo's ``ElmoModel``: ``load`` a model, then ``get_elmo_vectors`` / ``get_elmo_vector_average``."""

    def __init__(self) -> None:
        self.backend: Optional[ElmoBackend] = None
        self.batch_size: Optional[int] = None
        self.max_chars: Optional[int] = None
        self.vector_size: Optional[int] = None
        self.n_layers: Optional[int] = None
        self.limit: Optional[int] = None

    def load(
        self,
        directory: PathLike,
        max_batch_size: int = 32,
        limit: int = 100,
        full: bool = False,
        *,
        device: Union[str, torch.device, None] = None,
    ) -> str:
        """Load the model in ``directory`` (an NLPL zip, a directory, or any model ``load_bilm`` takes).

        max_batch_size: texts per chunk (simple_elmo's chunks; the stateful numbers depend on it).
        limit: kept for compatibility; simple_elmo caches the char ids of the first ``limit``
            vocabulary words, which does not change them, and here every token is encoded on use.
        full: ``True`` (TensorFlow checkpoints for language modelling) is not supported.
        device: torch device (``None``: CPU).
        """
        if full:
            raise ValueError(
                "full=True loads TensorFlow training checkpoints for language modelling (get_elmo_substitutes), "
                "which spacy-elmo does not support; load the HDF5 model (full=False)"
            )
        if not os.path.exists(directory):
            raise FileNotFoundError(f"ELMo model not found: {directory}")
        self.batch_size = positive_int(max_batch_size, "max_batch_size")
        self.limit = limit
        self.backend = load_bilm(directory, device=device)
        self.max_chars = self.backend.model.options.max_chars
        self.vector_size = self.backend.dim
        self.n_layers = self.backend.n_layers + 1
        return "The model is now loaded."

    def get_elmo_vectors(
        self, texts: Sequence[Sequence[str]], warmup: bool = True, layers: str = "average", *, stateless: bool = False
    ) -> np.ndarray:
        """Token vectors, float64: ``(n_texts, longest, dim)``, or ``(n_texts, n_layers, longest, dim)`` for ``"all"``.

        texts: tokenized texts (lists of words). warmup: run the first chunk once first.
        layers: ``"average"``, ``"top"`` or ``"all"``. stateless: this package's batch-invariant vectors.
        """
        backend, rows = self._ready(texts, layers)
        longest = max((len(t) for t in rows), default=0)
        shape = (
            (len(rows), backend.n_layers + 1, longest, backend.dim)
            if layers == "all"
            else (len(rows), longest, backend.dim)
        )
        final = np.zeros(shape)
        for first_row, chunk_vectors in self._chunks(rows, warmup, layers, stateless):
            last_row = first_row + chunk_vectors.shape[0]
            if layers == "all":
                final[first_row:last_row, :, : chunk_vectors.shape[2]] = chunk_vectors
            else:
                final[first_row:last_row, : chunk_vectors.shape[1]] = chunk_vectors
        return final

    def get_elmo_vector_average(
        self, texts: Sequence[Sequence[str]], warmup: bool = True, layers: str = "average", *, stateless: bool = False
    ) -> np.ndarray:
        """One L2-normalised vector per text, float64 ``(n_texts, dim)`` (``(n_texts, n_layers, dim)``
        for ``"all"``); a text whose average is zero (an empty text) gives a zero row, not simple_elmo's NaN."""
        backend, rows = self._ready(texts, layers)
        n_layers, dim = backend.n_layers + 1, backend.dim
        averages = np.zeros((len(rows), n_layers, dim) if layers == "all" else (len(rows), dim))
        if stateless:
            for row, text_layers in enumerate(self._stateless_texts(rows)):
                if text_layers.shape[1]:  # an empty text keeps its zero row
                    mean = _select(text_layers[None], layers)[0].mean(axis=-2, dtype=np.float64)
                    averages[row] = _unit_rows(mean) if layers == "all" else _unit(mean)
            return averages
        row = 0
        for _, chunk_vectors in self._chunks(rows, warmup, layers, stateless):
            if layers == "all":  # simple_elmo reshapes (n_layers, length, dim) as (length, n_layers, dim)
                chunk_vectors = chunk_vectors.reshape(chunk_vectors.shape[0], chunk_vectors.shape[2], n_layers, dim)
            for vectors in chunk_vectors:
                vectors = np.asarray(vectors, dtype=np.float64)
                if vectors.shape[0]:  # simple_elmo's average over the chunk's positions, padding included
                    averages[row] = _unit(np.divide(np.sum(vectors, axis=0), vectors.shape[0]))
                row += 1
        return averages

    # -- the chunks -----------------------------------------------------------------------------

    def _ready(self, texts: Sequence[Sequence[str]], layers: str) -> tuple[ElmoBackend, list[list[str]]]:
        if self.backend is None or self.batch_size is None:
            raise RuntimeError("no model loaded: call load(PATH) first")
        if layers not in LAYER_CHOICES:
            raise ValueError(f"layers={layers!r}: expected one of {', '.join(map(repr, LAYER_CHOICES))}")
        return self.backend, validate_sentences(texts, "texts")

    def _chunks(
        self, texts: list[list[str]], warmup: bool, layers: str, stateless: bool
    ) -> Iterator[tuple[int, np.ndarray]]:
        """``(first row, the chunk's vectors)`` per chunk of ``batch_size`` texts, in order (float32)."""
        assert self.backend is not None and self.batch_size is not None
        chunks = [texts[i : i + self.batch_size] for i in range(0, len(texts), self.batch_size)]
        if stateless:
            for k, chunk in enumerate(chunks):
                yield k * self.batch_size, _select(_padded(self.backend, self.backend.embed(chunk)), layers)
            return
        runner = _StatefulBiLM(self.backend, self.batch_size)
        if warmup and chunks:
            runner.layers(chunks[0])
        for k, chunk in enumerate(chunks):
            yield k * self.batch_size, _select(runner.layers(chunk), layers)

    def _stateless_texts(self, texts: list[list[str]]) -> Iterator[np.ndarray]:
        """Each text's own layers ``(n_layers, len(text), dim)`` from the stateless backend, in order, ``batch_size``
        texts per call (no padding: nothing depends on the other texts)."""
        assert self.backend is not None and self.batch_size is not None
        for start in range(0, len(texts), self.batch_size):
            yield from self.backend.embed(texts[start : start + self.batch_size])


def _select(layers: np.ndarray, choice: str) -> np.ndarray:
    """``(rows, n_layers, length, dim)`` -> what ``layers=choice`` asks for.

    simple_elmo's "average" weighs each layer by ``softmax`` of equal logits, which is ``1 / n_layers`` each: the
    package's ``mix_layers(..., "average")``, whose float32 weights are those same numbers.
    """
    if choice == "all":
        return layers
    if choice == "top":
        return layers[:, -1]
    rows, n, length, dim = layers.shape
    by_layer = np.moveaxis(layers, 1, 0).reshape(n, rows * length, dim)
    return mix_layers(by_layer, "average").reshape(rows, length, dim)


def _unit(vector: np.ndarray) -> np.ndarray:
    """``vector`` over its L2 norm; a zero vector stays zero (simple_elmo's 0 / 0 would be NaN)."""
    norm = np.linalg.norm(vector)
    return vector / norm if norm > 0 else np.zeros_like(vector)


def _unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Each row of ``vectors`` ``(n, dim)`` over its own L2 norm (zero rows stay zero)."""
    return np.stack([_unit(row) for row in vectors])


def _padded(backend: ElmoBackend, arrays: list[np.ndarray]) -> np.ndarray:
    """The stateless backend's layers of a chunk, zero-padded to the chunk's longest text."""
    longest = max((a.shape[1] for a in arrays), default=0)
    out = np.zeros((len(arrays), backend.n_layers + 1, longest, backend.dim), dtype=np.float32)
    for row, array in enumerate(arrays):
        out[row, :, : array.shape[1]] = array
    return out


class _StatefulBiLM:
    """simple_elmo's stateful biLM: ``max_batch_size`` rows of LSTM state, row ``i`` carried to the next chunk's row
    ``i``."""

    def __init__(self, backend: ElmoBackend, max_batch_size: int) -> None:
        self.model = backend.model
        self.device = backend.device
        like = next(self.model.parameters())
        self.state: BiLSTMState = self.model.lstm.zero_state(max_batch_size, like.float())
        with torch.inference_mode():
            padding = torch.zeros(1, self.model.bos_ids.shape[-1], dtype=torch.int64, device=self.device)
            self.padding_vector = self.model.encode_tokens(padding).float().cpu().numpy()[0]  # all-zero char ids

    def _token_ids(self, chunk: list[list[str]], longest: int) -> np.ndarray:
        """Right-padded id rows ``(rows, longest, width)`` in the model's own spelling; padding tokens all zeros."""
        encoder = self.model.token_encoder
        ids = np.zeros((len(chunk), longest, self.model.bos_ids.shape[-1]), dtype=np.int64)
        for row, text in enumerate(chunk):
            if text:
                ids[row, : len(text)] = encoder.token_ids(text)
        return ids

    def layers(self, chunk: list[list[str]]) -> np.ndarray:
        """``(rows, n_layers + 1, longest, dim)`` float32 as simple_elmo's graph gives them; updates the state."""
        rows, longest = len(chunk), max(len(t) for t in chunk)
        n_layers, dim = self.model.n_layers + 1, self.model.output_dim
        out = np.zeros((rows, n_layers, longest, dim), dtype=np.float32)
        out[:, 0] = np.concatenate([self.padding_vector, self.padding_vector])  # the padded positions' layer 0
        with torch.inference_mode():
            char_ids = torch.as_tensor(self._token_ids(chunk, longest), device=self.device)
            mask = (char_ids > 0).any(dim=-1)
            with_bounds, lengths = self.model.add_boundaries(char_ids, mask)
            initial = [[(h[:rows], c[:rows]) for h, c in layer] for layer in self.state]
            activations, final = self.model.contextualize(with_bounds, lengths, initial)
            assert final is not None  # the full computation (boundaries kept) returns the final state
            self.state = [
                [
                    (torch.cat([h, old_h[rows:]]), torch.cat([c, old_c[rows:]]))
                    for (h, c), (old_h, old_c) in zip(new, old)
                ]
                for new, old in zip(final, self.state)
            ]
            layers = activations.float().cpu().numpy()
        for row, text in enumerate(chunk):
            out[row, :, : len(text)] = layers[:, row, 1 : len(text) + 1]
        return out
