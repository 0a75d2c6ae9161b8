"""Layers a spaCy ``Doc`` carries (``doc._.elmo_layers``) and the one reader of them, for every front end.

The ``elmo`` component stores each doc's raw layers, the fingerprint of the model that made them and its mix; the
``._.elmo`` getters, the ``.vector`` hooks, the spaCy mix layers and ``ElmoVectorizer`` read them back here
(:func:`stored_layers`), so the rule for layers that no longer fit the doc or the reader's model is one rule.
The extensions themselves are registered by ``spacy/extensions.py``.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Optional

import numpy as np

if TYPE_CHECKING:
    from spacy.tokens import Doc

# Plain values (stored in ``doc.user_data``, so DocBin, Doc.to_bytes and n_process keep them).
LAYERS = "elmo_layers"  # float32 (n_layers + 1, n_tokens, dim): the backend's raw layers, zeros for SPACE tokens
MODEL = "elmo_model"  # the backend's fingerprint string
MIX = "elmo_mix"  # {"layers": ..., "gamma": ...}: how the getters mix the layers


def is_doc(sample: object) -> bool:
    """Whether ``sample`` is a spaCy ``Doc``, without importing spaCy (a Doc exists only once ``spacy.tokens`` is
    imported), so that ``ElmoVectorizer`` on strings or token lists never pays spaCy's import."""
    tokens = sys.modules.get("spacy.tokens")
    return tokens is not None and isinstance(sample, tokens.Doc)


class StaleLayersError(ValueError):
    """``doc._.elmo_layers`` that must not be used: the doc was retokenized since, or another model made them."""


def stored_layers(
    doc: Doc, fingerprint: Optional[str] = None, shape: Optional[tuple[int, int]] = None
) -> Optional[np.ndarray]:
    """The one reader of the layers the ``elmo`` component stored on ``doc``: float32, or None when there are none.

    The policy, for every reader: stored layers are used only when they still fit. They must
    line up with the doc's tokens (``(n_layers + 1, len(doc), dim)``); given ``fingerprint`` (the
    reader's model, ``ElmoBackend.fingerprint``), they must carry it in ``doc._.elmo_model``
    (layers with no fingerprint cannot be vouched for); given ``shape`` ``(n_layers + 1, dim)``,
    they must have it. Otherwise :class:`StaleLayersError` (a ``ValueError``) says why. A reader
    that holds a model (``ElmoVectorizer``, an ``ElmoScalarMix`` linked to a component) then
    recomputes the doc from its current tokens; one that does not (the ``._.elmo`` getters, the
    ``.vector`` hooks) lets the error through. Layers are never read from the wrong model or
    onto the wrong tokens, and never silently dropped: a demanding user gets either vectors of
    the doc as it is now or an error naming what to fix.
    """
    if not doc.has_extension(LAYERS):
        return None
    layers = doc._.get(LAYERS)
    if layers is None:
        return None
    layers = np.asarray(layers, dtype=np.float32)
    if layers.ndim != 3 or layers.shape[1] != len(doc):
        raise StaleLayersError(
            f"doc._.{LAYERS} has shape {layers.shape} but the doc has {len(doc)} tokens: the doc was "
            f"retokenized after the 'elmo' component ran (put 'elmo' after merge_entities & co, or re-run it)"
        )
    if fingerprint is not None:
        stored_by = doc._.get(MODEL) if doc.has_extension(MODEL) else None
        if stored_by != fingerprint:
            raise StaleLayersError(
                f"doc._.{LAYERS} came from the model with fingerprint {stored_by}, not this one ({fingerprint}): "
                f"re-run this model's 'elmo' component on the doc"
            )
    if shape is not None and (layers.shape[0], layers.shape[2]) != tuple(shape):
        raise StaleLayersError(
            f"doc._.{LAYERS} has shape {layers.shape}, but this model gives {shape[0]} layers of width {shape[1]}"
        )
    return layers


def fresh_layers(doc: Doc, fingerprint: str, shape: Optional[tuple[int, int]] = None) -> Optional[np.ndarray]:
    """:func:`stored_layers` for a reader that holds the model: None (recompute) when absent or stale."""
    try:
        return stored_layers(doc, fingerprint, shape)
    except StaleLayersError:
        return None
