"""TensorFlow Hub's ELMo module, ported: the same signatures, keys and shapes, as numpy arrays.

The seed snippet most people know, and the one change it needs::

    elmo = hub.load("https://tfhub.dev/google/elmo/3")          # TF-Hub
    elmo = spacy_elmo.hub.load("original")                      # here (any model load_bilm takes)
    vectors = elmo.signatures["default"](sentences)["elmo"]     # tf.constant(...) not needed

Keys (as TF-Hub documents them): ``word_emb`` (batch, max_len, projection_dim: the char-CNN token
representation), ``lstm_outputs1`` ... (batch, max_len, dim: one per LSTM layer), ``elmo``
(batch, max_len, dim: the equal-weight average of all layers, gamma 1, i.e. TF-Hub's initial
mix), ``default`` (batch, dim: the mean of ``elmo`` over each sentence's tokens) and
``sequence_len``. Positions past a sentence's length are zeros. Unlike TF-Hub's LSTM, ours
starts from a zero state for every sentence, so a sentence's vectors do not depend on its batch.
As every front end, a sentence longer than ``settings.DEFAULT_MAX_LENGTH`` tokens is embedded as
overlapping windows (``windows.embed_segments``), a bounded number of tokens per biLM call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable, Optional, Union

import numpy as np

from .runtime.configuration.defaults import DEFAULT_MAX_LENGTH, DEFAULT_OVERLAP
from .runtime.configuration.validation import integer_in, validate_sentences
from .runtime.embedding.backend import ElmoBackend, load_bilm
from .runtime.embedding.windows import embed_segments, fold_segments, window_bounds
from .runtime.features.mix import mix_layers
from .runtime.features.pooling import PoolSink
from .runtime.features.tokenize import split_on_spaces
from .sources.model_paths import PathLike

Outputs = dict[str, np.ndarray]


def load(model: Optional[PathLike] = "default", **load_bilm_kwargs: Any) -> HubModule:
    """The TF-Hub-style module for ``model`` (a name, directory, archive or URL, as :func:`load_bilm` takes)."""
    return HubModule(load_bilm(model, **load_bilm_kwargs))


class HubModule:
    """``signatures["default"](strings)`` and ``signatures["tokens"](tokens=..., sequence_len=...)``, as in TF-Hub."""

    def __init__(self, backend: ElmoBackend) -> None:
        self.backend = backend
        self.signatures: dict[str, Callable[..., Outputs]] = {"default": self.default, "tokens": self.tokens}

    def __call__(self, inputs: Any, signature: str = "default", as_dict: bool = True) -> Union[Outputs, np.ndarray]:
        """TF-Hub 1.x style: ``elmo(strings, signature="default", as_dict=True)``; without ``as_dict`` the ``default``
        output."""
        if signature not in self.signatures:
            raise ValueError(f"signature={signature!r}: expected one of {sorted(self.signatures)}")
        if signature == "default" and not as_dict:  # only the pooled rows: never the padded per-token arrays
            return self._default_rows(_split_sentences(inputs))
        outputs = self.default(inputs) if signature == "default" else self.tokens(**inputs)
        return outputs if as_dict else outputs["default"]

    def default(self, strings: Sequence[str]) -> Outputs:
        """Each string split on spaces (as TF-Hub's ``default`` signature does), then embedded."""
        return self._outputs(_split_sentences(strings))

    def _default_rows(self, sentences: list[list[str]]) -> np.ndarray:
        """The ``default`` output alone, ``(batch, dim)``: each sentence's layers averaged, then its tokens, as it
        comes.

        Memory stays that of one backend call (``windows.fold_segments``), where the full outputs
        pad every sentence to the longest: ``(n_layers + 1, batch, longest, dim)``.
        """

        def new_sink(shape: tuple[int, int, int], windows: int) -> PoolSink:
            return PoolSink(shape, windows, "mean", _average_layers)

        rows = np.zeros((len(sentences), self.backend.dim), dtype=np.float32)
        folded = fold_segments(
            self.backend, enumerate(sentences), new_sink, max_length=DEFAULT_MAX_LENGTH, overlap=DEFAULT_OVERLAP
        )
        for row, pooled in folded:
            rows[row] = pooled
        return rows

    def tokens(self, tokens: Sequence[Sequence[str]], sequence_len: Sequence[int]) -> Outputs:
        """Padded token lists and the true length of each (padding tokens past the length, TF-Hub's ``""``, are
        ignored).

        Every token, padding too, must be a ``str`` (as in TF-Hub's string tensor): ``bytes``, ``None`` or a number
        is a ``TypeError`` naming the row and token
        (:func:`~spacy_elmo.runtime.configuration.validation.validate_sentences`), checked before anything reads the
        rows, never embedded as its ``str()``; so is a plain string where a row belongs. A numpy array of strings is
        taken as a list of its rows.
        """
        rows = validate_sentences(_as_list(tokens) if isinstance(tokens, np.ndarray) else tokens, "tokens")
        lengths = list(_as_list(sequence_len))
        if len(rows) != len(lengths):
            raise ValueError(f"tokens has {len(rows)} rows but sequence_len has {len(lengths)} entries")
        sentences = []
        for i, (row, n) in enumerate(zip(rows, lengths)):
            length = integer_in(n, f"sequence_len[{i}]", 0, len(row), f" (row {i} of tokens has {len(row)} entries)")
            sentences.append(row[:length])
        return self._outputs(sentences)

    def _outputs(self, sentences: list[list[str]]) -> Outputs:
        backend = self.backend
        embedded = embed_segments(backend, enumerate(sentences), max_length=DEFAULT_MAX_LENGTH, overlap=DEFAULT_OVERLAP)
        layers = [array for _, array in embedded]
        batch, longest = len(sentences), max((len(s) for s in sentences), default=0)
        projection = backend.dim // 2
        padded = np.zeros((backend.n_layers + 1, batch, longest, backend.dim), dtype=np.float32)
        for row, array in enumerate(layers):
            padded[:, row, : array.shape[1]] = array
        lengths = np.array([len(s) for s in sentences], dtype=np.int32)
        elmo = mix_layers(padded)
        outputs: Outputs = {"word_emb": np.ascontiguousarray(padded[0, :, :, :projection])}  # layer 0 is [x; x]
        for k in range(1, backend.n_layers + 1):
            outputs[f"lstm_outputs{k}"] = padded[k]
        outputs["elmo"] = elmo
        outputs["default"] = (
            np.stack([_default_row(array) for array in layers])
            if layers
            else (np.zeros((0, backend.dim), dtype=np.float32))
        )  # window by window as _default_rows pools them: the same bits either way
        outputs["sequence_len"] = lengths
        return outputs


def _default_row(layers: np.ndarray) -> np.ndarray:
    """``default`` of one sentence's stitched layers, pooled window by window as ``_default_rows`` folds them."""
    plan = window_bounds(layers.shape[1], DEFAULT_MAX_LENGTH, DEFAULT_OVERLAP) or [(0, 0, 0, 0)]
    n_outputs, tokens, dim = layers.shape
    sink = PoolSink((n_outputs, tokens, dim), len(plan), "mean", _average_layers)
    for _, _, keep_start, keep_end in plan:
        sink.add(keep_start, layers if len(plan) == 1 else layers[:, keep_start:keep_end])
    return sink.result()


def _average_layers(layers: np.ndarray) -> np.ndarray:
    """``elmo``: the equal-weight average of all layers (TF-Hub's initial mix), ``(n_tokens, dim)``."""
    return mix_layers(layers)


def _split_sentences(strings: Sequence[str]) -> list[list[str]]:
    """Each string split on spaces, as TF-Hub's ``default`` signature does."""
    if isinstance(strings, str):
        raise TypeError("the default signature takes a list of strings (one per sentence), not one string")
    sentences = []
    for i, text in enumerate(_as_list(strings)):
        if not isinstance(text, str):
            raise TypeError(f"sentence {i}: expected a string, not {type(text).__name__}")
        sentences.append(split_on_spaces(text))
    return sentences


def _as_list(values: Any) -> list[Any]:
    """A list from a list, tuple or numpy array (TF users often hold numpy arrays of strings)."""
    return values.tolist() if isinstance(values, np.ndarray) else list(values)
