"""What ELMo is for, in one table: one word in two sentences, its cosine similarity per layer and for the mix.

Layer 0 (the char CNN) sees only the word itself, so its cosine is 1.0; the LSTM layers see the
sentence, so a word used in two senses ("bank" of a river, of money) drifts apart there.

Importing this module imports neither torch nor matplotlib; its figure is drawn by :mod:`spacy_elmo.plots`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .plots import plot_word_similarity
from .runtime.configuration.defaults import DEFAULT_MAX_LENGTH, DEFAULT_OVERLAP
from .runtime.embedding.windows import embed_segments
from .runtime.features.cosine import cosine
from .runtime.features.mix import mix_layers
from .runtime.features.tokenize import split_on_spaces

if TYPE_CHECKING:  # pragma: no cover
    from .runtime.embedding.backend import ElmoBackend


@dataclass
class WordSimilarity:
    """Cosines of ``word`` between two sentences, per layer and for the equal-weight mix, and all token pairs."""

    word: str
    tokens: tuple[list[str], list[str]]
    positions: tuple[int, int]
    layers: list[tuple[str, float]]  # (label, cosine) per layer, then the mix
    token_matrix: np.ndarray  # (len(a), len(b)) cosines of the mixed vectors

    def table(self) -> str:
        """The per-layer table as text."""
        (a, b), (i, j) = self.tokens, self.positions
        lines = [
            f"cosine similarity of {self.word!r} (token {i} of sentence A, token {j} of sentence B)",
            f"  A: {' '.join(a)}",
            f"  B: {' '.join(b)}",
        ]
        width = max(len(label) for label, _ in self.layers)
        lines += [f"  {label.ljust(width)}  {cosine:.4f}" for label, cosine in self.layers]
        return "\n".join(lines)


def word_similarity(backend: ElmoBackend, sentence_a: str, sentence_b: str, word: str) -> WordSimilarity:
    """Embed both sentences (split on spaces) and compare ``word``'s vectors layer by layer.

    As every front end, a sentence longer than ``settings.DEFAULT_MAX_LENGTH`` tokens is windowed.
    """
    tokens = (split_on_spaces(sentence_a), split_on_spaces(sentence_b))
    positions = (_position(tokens[0], word, "A"), _position(tokens[1], word, "B"))
    embedded = embed_segments(backend, enumerate(tokens), max_length=DEFAULT_MAX_LENGTH, overlap=DEFAULT_OVERLAP)
    layers_a, layers_b = (layers for _, layers in embedded)
    labels = ["layer 0 (char CNN, context-free)"] + [f"layer {k} (LSTM {k})" for k in range(1, backend.n_layers + 1)]
    rows = [(label, cosine(layers_a[k, positions[0]], layers_b[k, positions[1]])) for k, label in enumerate(labels)]
    mix_a, mix_b = mix_layers(layers_a), mix_layers(layers_b)
    rows.append(("mix (equal weights)", cosine(mix_a[positions[0]], mix_b[positions[1]])))
    matrix = np.array([[cosine(x, y) for y in mix_b] for x in mix_a], dtype=np.float32)
    return WordSimilarity(word, tokens, positions, rows, matrix)


def _position(tokens: list[str], word: str, name: str) -> int:
    for match in (
        lambda t: t == word,
        lambda t: t.lower() == word.lower(),
        lambda t: t.strip(".,;:!?\"'()").lower() == word.lower(),
    ):
        found = [i for i, token in enumerate(tokens) if match(token)]
        if found:
            return found[0]
    raise ValueError(f"sentence {name} has no token {word!r} (tokens: {tokens})")


def plot(result: WordSimilarity, path: Path) -> Path:
    """A PNG (or any format matplotlib knows from the suffix): the per-layer bars and the token-by-token heatmap;
    returns the file written (:func:`spacy_elmo.plots.figure_file`)."""
    return plot_word_similarity(result.word, result.layers, result.tokens, result.positions, result.token_matrix, path)
