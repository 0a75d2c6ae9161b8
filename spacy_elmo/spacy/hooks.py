"""spaCy user hooks so ``.vector``, ``.has_vector`` and ``.similarity`` of Doc, Span and Token use ELMo.

Whitespace (SPACE) tokens carry zero vectors and no vector; span and doc vectors average the
other tokens. The vocab's static vectors stay reachable through ``token.lex.vector`` and
``nlp.vocab.get_vector(...)``.

spaCy never serialises user hooks, so :func:`set_hooks` also sets ``doc.tensor`` to the mixed
vectors (whitespace rows zero). ``Doc.to_bytes`` keeps the tensor, so after ``Doc.from_bytes`` and
``nlp.pipe(n_process=...)`` spaCy's own fallback (used when the vocab has no static vectors) gives
``token.vector`` as before, ``has_vector`` True and span and doc vectors the mean of the tensor rows
(whitespace rows included). A ``DocBin`` keeps neither hooks nor tensor: with
``store_user_data=True`` the ``._.elmo*`` data comes back and ``set_hooks(docs)`` restores both;
without it nothing of ELMo comes back, ``has_vector`` is False and ``set_hooks`` warns
(:class:`NoElmoLayersWarning`).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any, Optional, Union

import numpy as np
from spacy.tokens import Doc, Span, Token

from ..runtime.features.cosine import cosine
from ..runtime.features.pooling import pool
from ..runtime.features.tokenize import is_whitespace
from .extensions import doc_layers, mixed


class NoElmoLayersWarning(UserWarning):
    """:func:`set_hooks` was given docs without ELMo layers (a ``DocBin`` saved without ``store_user_data=True``,
    docs the ``elmo`` component never ran on): their vectors stay empty."""


class EmptyVectorWarning(UserWarning):
    """``.similarity`` compared an object with no ELMo vector (an empty or whitespace-only doc, span or token, or a
    doc without ELMo layers): the result is 0.0, not a measure of the texts. Shown once per process (Python's default
    filter), as spaCy's W008."""


def set_hooks(docs: Union[Doc, Iterable[Doc]]) -> None:
    """Make ``.vector`` & co of ``docs`` (a Doc or an iterable of Docs) use ELMo: hooks, and ``doc.tensor``.

    A doc without ELMo layers gets the hooks only (its tensor is left alone; ``has_vector`` is False), and one
    :class:`NoElmoLayersWarning` per call says how many docs had none.
    """
    total = without_layers = 0
    for doc in [docs] if isinstance(docs, Doc) else docs:
        total += 1
        vectors = mixed(doc, 0, len(doc))
        without_layers += vectors is None
        attach_vectors(doc, vectors)
    if without_layers:
        warnings.warn(
            f"spacy_elmo: set_hooks: {without_layers} of {total} docs have no ELMo layers, so their vectors stay "
            "empty; a DocBin keeps them only when saved with DocBin(store_user_data=True), else run the pipeline "
            "on the texts again",
            NoElmoLayersWarning,
            stacklevel=2,
        )


def attach_vectors(doc: Doc, vectors: Optional[np.ndarray]) -> None:
    """Set ``doc``'s hooks and, given its mixed ``vectors`` ``(len(doc), dim)``, ``doc.tensor``.

    The ``elmo`` component calls this with the vectors it has just mixed, so a doc it embeds is not read back
    from its stored layers; :func:`set_hooks` calls it with what it mixes from them.
    """
    if vectors is not None:
        doc.tensor = vectors
    doc.user_hooks.update(vector=doc_vector, has_vector=doc_has_vector, similarity=similarity)
    doc.user_span_hooks.update(vector=span_vector, has_vector=span_has_vector, similarity=similarity)
    doc.user_token_hooks.update(vector=token_vector, has_vector=token_has_vector, similarity=similarity)


def _mean_vector(doc: Doc, start: int, end: int) -> np.ndarray:
    """Mean mixed vector of the non-space tokens in ``start:end`` (zeros when there are none), pooled as
    ``ElmoVectorizer(pooling="mean")`` pools a text's row (``runtime/features/pooling.py``): the same numbers."""
    keep = [i - start for i in range(start, end) if not is_whitespace(doc[i].text)]
    vectors = mixed(doc, start, end)
    if vectors is None:
        return np.zeros((0,), dtype=np.float32)
    return pool(vectors[keep], "mean")


def _has_content(doc: Doc, start: int, end: int) -> bool:
    return doc_layers(doc) is not None and any(not is_whitespace(doc[i].text) for i in range(start, end))


def doc_vector(doc: Doc) -> np.ndarray:
    """``doc.vector``: mean ELMo vector of the doc's non-space tokens."""
    return _mean_vector(doc, 0, len(doc))


def span_vector(span: Span) -> np.ndarray:
    """``span.vector``: mean ELMo vector of the span's non-space tokens."""
    return _mean_vector(span.doc, span.start, span.end)


def token_vector(token: Token) -> np.ndarray:
    """``token.vector``: the token's mixed ELMo vector (zeros for SPACE tokens)."""
    vectors = mixed(token.doc, token.i, token.i + 1)
    return np.zeros((0,), dtype=np.float32) if vectors is None else vectors[0]


def doc_has_vector(doc: Doc) -> bool:
    """True when the doc has ELMo layers and at least one non-space token."""
    return _has_content(doc, 0, len(doc))


def span_has_vector(span: Span) -> bool:
    """True when the span's doc has ELMo layers and the span has a non-space token."""
    return _has_content(span.doc, span.start, span.end)


def token_has_vector(token: Token) -> bool:
    """True for a non-space token of a doc with ELMo layers."""
    return _has_content(token.doc, token.i, token.i + 1)


def similarity(obj: Any, other: Any) -> float:
    """Cosine similarity of the two objects' ``.vector``; 0.0 when either has none (no tokens but whitespace, no ELMo
    layers), with an :class:`EmptyVectorWarning`."""
    a = np.asarray(obj.vector, dtype=np.float64)
    b = np.asarray(other.vector, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(
            f"cannot compare a {a.shape[0]}-d vector with a {b.shape[0]}-d one "
            f"(is the other object from a doc without ELMo vectors?)"
        )
    if not (a.any() and b.any()):
        warnings.warn(  # one message for every object, so that Python's default filter shows it once
            "spacy_elmo: .similarity with a doc, span or token that has no ELMo vector (empty, whitespace only, or "
            "without ELMo layers) is 0.0",
            EmptyVectorWarning,
            stacklevel=1,
        )
    return cosine(a, b)
