"""The ``._.elmo*`` extensions on Doc, Span and Token: stored layers plus getters that mix them on demand."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
from spacy.tokens import Doc, Span, Token

from ..runtime.configuration.defaults import DEFAULT_GAMMA, DEFAULT_LAYERS
from ..runtime.features.mix import mix_layers
from ..runtime.features.stored_layers import LAYERS, MIX, MODEL, StaleLayersError, fresh_layers, stored_layers

__all__ = ["LAYERS", "MIX", "MIXED", "MODEL", "StaleLayersError", "fresh_layers", "install_extensions", "stored_layers"]

# Getters.
MIXED = "elmo"  # Doc (n_tokens, dim), Span (span_len, dim), Token (dim,)

DEFAULT_MIX: dict[str, Any] = {"layers": DEFAULT_LAYERS, "gamma": DEFAULT_GAMMA}  # a doc with layers but no mix


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
    """The stored mix as :func:`mix_layers`' arguments: the ``layers`` setting and gamma."""
    setting = mix["layers"]
    if isinstance(setting, (list, tuple)):  # msgpack may hand lists back as tuples
        setting = [float(x) for x in setting]
    return {"layers": setting, "gamma": float(mix["gamma"])}


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
