"""A trainable Thinc layer over ``doc._.elmo_layers``: the paper's task-specific scalar mix for ``spacy train``.

``spacy_elmo.ElmoScalarMix.v1`` maps docs to ``(n_tokens, width)`` arrays
``gamma * sum_j softmax(s)_j h_j`` with learnable ``s`` (one per layer) and ``gamma``; the biLM
itself stays frozen. Use it as the ``tok2vec`` of textcat, ner, tagger, ...; the ``elmo``
component must come earlier in the pipeline and be listed in ``[training] annotating_components``
so training docs carry their layers.
"""
from __future__ import annotations

from typing import Callable, List, Optional, Tuple

import numpy as np
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model
from thinc.types import Floats2d

from .extensions import LAYERS, doc_layers


@registry.architectures("spacy_elmo.ElmoScalarMix.v1")
def elmo_scalar_mix_v1(width: int, n_layers: int, gamma: float = 1.0) -> Model[List[Doc], List[Floats2d]]:
    """Learnable ELMo scalar mix: ``width`` = the model's output width (2 x projection_dim), ``n_layers`` = biLSTM layers.

    The mix starts at equal weights (``s = 0``) and the given ``gamma``.
    """
    if width < 1 or n_layers < 0:
        raise ValueError(f"width={width}, n_layers={n_layers}: expected width >= 1 and n_layers >= 0")
    return Model(
        "elmo_scalar_mix",
        _forward,
        init=_init,
        dims={"nO": width},
        params={"s": None, "gamma": None},
        attrs={"n_outputs": n_layers + 1, "initial_gamma": float(gamma)},
    )


def _init(model: Model, X: Optional[List[Doc]] = None, Y: Optional[List[Floats2d]] = None) -> Model:
    model.set_param("s", model.ops.alloc1f(model.attrs["n_outputs"]))
    model.set_param("gamma", model.ops.asarray1f([model.attrs["initial_gamma"]]))
    return model


def _softmax(s: np.ndarray, xp) -> np.ndarray:
    e = xp.exp(s - s.max())
    return e / e.sum()


def _doc_input(model: Model, doc: Doc, is_train: bool):
    layers = doc_layers(doc)
    n_outputs, width = model.attrs["n_outputs"], model.get_dim("nO")
    if layers is None:
        if is_train:
            raise ValueError(
                f"doc._.{LAYERS} is missing on a training doc: put the 'elmo' component before this one and "
                f"list it in [training] annotating_components"
            )
        return None  # e.g. shape inference in nlp.initialize(), which runs before any elmo annotation
    if layers.shape[0] != n_outputs or layers.shape[2] != width:
        raise ValueError(
            f"doc._.{LAYERS} has shape {layers.shape}, but ElmoScalarMix was built for {n_outputs} layers "
            f"of width {width} (set n_layers={layers.shape[0] - 1}, width={layers.shape[2]})"
        )
    return model.ops.asarray(layers, dtype="float32")


def _forward(model: Model, docs: List[Doc], is_train: bool) -> Tuple[List[Floats2d], Callable]:
    xp = model.ops.xp
    s, gamma = model.get_param("s"), model.get_param("gamma")
    weights = _softmax(s, xp)
    inputs = [_doc_input(model, doc, is_train) for doc in docs]
    mixes = [
        model.ops.alloc2f(len(doc), model.get_dim("nO")) if X is None else xp.tensordot(weights, X, axes=(0, 0))
        for doc, X in zip(docs, inputs)
    ]
    outputs = [gamma[0] * mix for mix in mixes]

    def backprop(dYs: List[Floats2d]) -> List[Doc]:
        d_weights = xp.zeros_like(weights)
        d_gamma = xp.zeros_like(gamma)
        for X, mix, dY in zip(inputs, mixes, dYs):
            if X is None:
                continue
            d_gamma[0] += (dY * mix).sum()
            d_weights += gamma[0] * xp.tensordot(X, dY, axes=([1, 2], [0, 1]))
        model.inc_grad("s", weights * (d_weights - (weights * d_weights).sum()))  # softmax Jacobian
        model.inc_grad("gamma", d_gamma)
        return []

    return outputs, backprop
