"""The ``._.elmo*`` extensions on Doc, Span and Token: stored layers plus getters that mix them on demand."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
from spacy.tokens import Doc, Span, Token

from ..runtime.mix import mix_layers

# Plain values (stored in ``doc.user_data``, so DocBin, Doc.to_bytes and n_process keep them).
LAYERS = "elmo_layers"  # float32 (n_layers + 1, n_tokens, dim): the backend's raw layers, zeros for SPACE tokens
MODEL = "elmo_model"  # the backend's fingerprint string
MIX = "elmo_mix"  # {"layers": ..., "gamma": ...}: how the getters mix the layers
# Getters.
MIXED = "elmo"  # Doc (n_tokens, dim), Span (span_len, dim), Token (dim,)

DEFAULT_MIX: dict[str, Any] = {"layers": "average", "gamma": 1.0}


def install_extensions() -> None:
    """Register the ``elmo*`` extensions once; safe to call any number of times (e.g. in worker processes)."""
    for name in (LAYERS, MODEL, MIX):
        if not Doc.has_extension(name):
            Doc.set_extension(name, default=None)
    if not Doc.has_extension(MIXED):
        Doc.set_extension(MIXED, getter=doc_elmo)
    if not Span.has_extension(MIXED):
        Span.set_extension(MIXED, getter=span_elmo)
    if not Token.has_extension(MIXED):
        Token.set_extension(MIXED, getter=token_elmo)


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
    if not Doc.has_extension(LAYERS):
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
        stored_by = doc._.get(MODEL) if Doc.has_extension(MODEL) else None
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


def doc_layers(doc: Doc) -> Optional[np.ndarray]:
    """``doc._.elmo_layers`` for the getters and hooks, which hold no model (:func:`stored_layers`: stale raises)."""
    return stored_layers(doc)


def doc_mix(doc: Doc) -> dict[str, Any]:
    """The layer mix stored on the doc by the component that embedded it (the default when absent)."""
    stored = doc._.get(MIX)
    return dict(DEFAULT_MIX) if stored is None else {"layers": stored["layers"], "gamma": stored["gamma"]}


def mixed(doc: Doc, start: int, end: int) -> Optional[np.ndarray]:
    """Mixed float32 ``(end - start, dim)`` vectors for tokens ``start:end`` (None when the doc has no layers)."""
    layers = doc_layers(doc)
    if layers is None:
        return None
    return mix_layers(layers[:, start:end], **_mix_args(doc_mix(doc)))


def _mix_args(mix: dict[str, Any]) -> dict[str, Any]:
    layers = mix["layers"]
    if isinstance(layers, (list, tuple)):  # msgpack may hand lists back as tuples
        layers = [float(x) for x in layers]
    return {"layers": layers, "gamma": float(mix["gamma"])}


def doc_elmo(doc: Doc) -> Optional[np.ndarray]:
    """``Doc._.elmo``: the mixed vectors of all tokens, float32 ``(n_tokens, dim)``."""
    return mixed(doc, 0, len(doc))


def span_elmo(span: Span) -> Optional[np.ndarray]:
    """``Span._.elmo``: the mixed vectors of the span's tokens, float32 ``(len(span), dim)``."""
    return mixed(span.doc, span.start, span.end)


def token_elmo(token: Token) -> Optional[np.ndarray]:
    """``Token._.elmo``: the token's mixed vector, float32 ``(dim,)`` (zeros for whitespace tokens)."""
    vectors = mixed(token.doc, token.i, token.i + 1)
    return None if vectors is None else vectors[0]
