"""The paper's task-specific scalar mix as a Thinc layer for ``spacy train`` (registered in architectures.py).

The layer maps docs to float32 ``(n_tokens, width)`` arrays ``gamma * sum_j w_j h_j`` over the ELMo
layers ``h_j`` of each token (Peters et al. 2018, eq. 1), with ``w = softmax(s)`` learned, or a
fixed choice of layers; the biLM stays frozen. spaCy links the layer to the ``elmo`` component
before it in the pipeline (``ElmoComponent.find_listeners``, as for tok2vec listeners), so:

- its width and number of layers come from that component's model at initialize;
- docs the component has not annotated (it need not be in ``[training] annotating_components``)
  get their layers from the component on the fly, through the backend's embedding cache.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, NamedTuple, Optional, Union, cast

import numpy as np
from spacy.tokens import Doc
from thinc.api import Model
from thinc.types import Floats1d, Floats2d, Floats3d

from ..runtime.features.mix import check_gamma, layer_weights
from ..runtime.features.tokenize import is_whitespace
from .extensions import LAYERS, fresh_layers, stored_layers

MIX_NAME = "elmo_scalar_mix"  # Thinc node name: how the elmo component finds its listeners
LEARNED = "mix"  # the ``layers`` value for the paper's learned softmax weights
LINK = "elmo_component"  # attr holding the linked component (a _Link, which Thinc cannot serialize and skips)
OWN_BILM = "own_bilm"  # attr: True for the mix inside ElmoFineTune, whose layers come from its own biLM
ENCODER = "elmo_encoder"  # attr holding the encoder the mix feeds directly (an _Encoder, which Thinc skips)
LayerChoice = Union[str, int]


class _Link:
    """The ``elmo`` component a mix layer reads from: skipped by Thinc's serialization, shared (not copied) by
    deepcopy."""

    __slots__ = ("component",)

    def __init__(self, component: Any) -> None:
        self.component = component

    def __deepcopy__(self, memo: dict) -> _Link:
        return self


def build_scalar_mix(
    *,
    layers: LayerChoice,
    gamma: float,
    dropout: float,
    l2_coef: float,
    do_layer_norm: bool,
    anchor_gamma: bool,
    upstream: str,
    width: Optional[int] = None,
    n_outputs: Optional[int] = None,
) -> Model[list[Doc], list[Floats2d]]:
    """The scalar-mix layer; ``width``/``n_outputs`` are inferred at initialize when None (see the architectures)."""
    _check_options(layers, gamma, dropout, l2_coef, upstream)
    return Model(
        MIX_NAME,
        _forward,
        init=_init,
        dims={"nO": width},
        params={"s": None, "gamma": None},
        attrs={
            "n_outputs": n_outputs,
            "initial_gamma": float(gamma),
            # The "gamma" param holds gamma - gamma_anchor: an optimizer's L2 pulls the param toward 0,
            # so gamma toward its initial value (anchor) rather than toward 0 (anchor 0, as in v1).
            "gamma_anchor": float(gamma) if anchor_gamma else 0.0,
            "layers": layers,
            "dropout": float(dropout),
            "l2_coef": float(l2_coef),
            "do_layer_norm": bool(do_layer_norm),
            "upstream": upstream,
        },
    )


def _check_options(layers: Any, gamma: Any, dropout: Any, l2_coef: Any, upstream: Any) -> None:
    if isinstance(layers, bool) or not (layers in (LEARNED, "average", "top") or isinstance(layers, int)):
        raise ValueError(f"layers={layers!r}: expected 'mix' (learned), 'average', 'top' or a layer index")
    check_gamma(gamma)
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout={dropout!r}: expected 0 <= dropout < 1")
    if not (np.isfinite(l2_coef) and l2_coef >= 0.0):
        raise ValueError(f"l2_coef={l2_coef!r}: expected a number >= 0")
    if not isinstance(upstream, str) or not upstream:
        raise ValueError(f"upstream={upstream!r}: expected the elmo component's name or '*'")


class _Encoder:
    """The width the encoder a mix feeds takes, and its component's name: skipped by Thinc's serialization."""

    __slots__ = ("component", "width")

    def __init__(self, component: str, width: int) -> None:
        self.component = component
        self.width = width

    def __deepcopy__(self, memo: dict) -> _Encoder:
        return self


# -- linking to the elmo component ---------------------------------------------------------------


def listening_mixes(component: Any, upstream_name: str) -> list[Model]:
    """The mix layers in ``component``'s model that read from the component named ``upstream_name``.

    A mix that is a ``spacy.Tok2Vec``'s whole ``embed`` (no projection after it) notes the width that Tok2Vec's
    ``encode`` takes, so initialize can say what is missing rather than leave Thinc's dimension error.
    """
    model = getattr(component, "model", None)
    if not isinstance(model, Model):
        return []
    mixes = [n for n in model.walk() if n.name == MIX_NAME and n.attrs.get("upstream") in ("*", upstream_name)]
    for node in model.walk():
        if node.has_ref("embed") and node.has_ref("encode"):  # spacy.Tok2Vec.v1/v2: chain(embed, encode)
            embed, width = node.get_ref("embed"), _input_width(node.get_ref("encode"))
            for mix in mixes:
                fine_tune = mix.attrs.get(OWN_BILM) and len(embed.layers) == 1 and embed.layers[0] is mix
                if width is not None and (embed is mix or fine_tune):
                    mix.attrs[ENCODER] = _Encoder(str(getattr(component, "name", "?")), width)
    return mixes


def _input_width(encoder: Model) -> Optional[int]:
    """The width ``encoder`` takes: its ``nI``, else its ``nO`` (spaCy's encoders keep their width); None unknown."""
    for dim in ("nI", "nO"):
        if encoder.has_dim(dim) is True:
            return int(encoder.get_dim(dim))
    return None


def link(model: Model, component: Any) -> None:
    """Make the mix layer ``model`` read from ``component``; a layer already sized must fit the component's model."""
    model.attrs[LINK] = _Link(component)
    if model.attrs["n_outputs"] is not None and model.has_dim("nO") is True:
        _check_shape(model, *_component_shape(component), f"the ELMo model of component {component.name!r}")


def is_cached_reader(model: Model) -> bool:
    """Whether the mix layer ``model`` reads the component's (cached) layers; False inside ElmoFineTune."""
    return not model.attrs.get(OWN_BILM, False)


def unlink(model: Model) -> None:
    """Forget the linked component."""
    model.attrs.pop(LINK, None)


def linked(model: Model) -> Optional[Any]:
    """The ``elmo`` component the mix layer ``model`` reads from, or None when it is not linked."""
    held = model.attrs.get(LINK)
    return None if held is None else held.component


def _component_shape(component: Any) -> tuple[int, int]:
    backend = component.backend
    return backend.n_layers + 1, backend.dim


def _check_shape(model: Model, n_outputs: int, width: int, source: str) -> None:
    """A clear error when ``source`` gives layers other than those the mix was built or trained for."""
    expected = (model.attrs["n_outputs"], model.get_dim("nO"))
    if (n_outputs, width) != expected:
        raise ValueError(
            f"{source} gives {n_outputs} layers of width {width}, but this ElmoScalarMix was built (or trained) "
            f"for {expected[0]} layers of width {expected[1]}: use the ELMo model it was trained with "
            f"(spacy_elmo.ElmoScalarMix.v2 takes both from the model at initialize; v1 states them in the config)"
        )


# -- initialize, forward, backprop ----------------------------------------------------------------


def _init(model: Model, X: Optional[list[Doc]] = None, Y: Optional[list[Floats2d]] = None) -> Model:
    n_outputs, width = _source_shape(model, X)
    if model.attrs["n_outputs"] is not None and model.has_dim("nO") is True:
        _check_shape(model, n_outputs, width, "the ELMo model")
    model.attrs["n_outputs"] = n_outputs
    _check_encoder(model, width)
    model.set_dim("nO", width)
    if model.attrs["layers"] != LEARNED:
        layer_weights(model.attrs["layers"], n_outputs)  # an index beyond the model's layers fails here
    model.set_param("s", model.ops.alloc1f(n_outputs))
    model.set_param("gamma", model.ops.asarray1f([model.attrs["initial_gamma"] - model.attrs["gamma_anchor"]]))
    return model


def _check_encoder(model: Model, width: int) -> None:
    """The error for a mix of ``width`` that is a Tok2Vec's ``embed`` whose ``encode`` takes another width."""
    encoder = model.attrs.get(ENCODER)
    if encoder is None or encoder.width == width:
        return
    layer = "ElmoFineTune" if model.attrs.get(OWN_BILM) else "ElmoScalarMix"
    raise ValueError(
        f"{layer} gives vectors as wide as the ELMo model's layers ({width}: 2 x its projection_dim), but it is the "
        f"whole embed of a spacy.Tok2Vec in component {encoder.component!r} whose encode takes width "
        f"{encoder.width}: project the mix to that width, embed = chain({layer}, with_array(Maxout.v1 with "
        f"nO = {encoder.width})) as in docs/training.md, or make the encoder {width} wide"
    )


def _source_shape(model: Model, X: Optional[list[Doc]]) -> tuple[int, int]:
    """``(n_outputs, width)`` from the linked component, else from docs that carry layers, else as built (v1)."""
    component = linked(model)
    if component is not None:
        return _component_shape(component)
    for doc in X or ():
        layers = stored_layers(doc)
        if layers is not None:
            return layers.shape[0], layers.shape[2]
    if model.attrs["n_outputs"] is not None and model.has_dim("nO") is True:
        return model.attrs["n_outputs"], model.get_dim("nO")
    raise ValueError(
        f"ElmoScalarMix (upstream={model.attrs['upstream']!r}) cannot tell the ELMo model's width and number of "
        f"layers: put an 'elmo' component before this one in the pipeline, or initialize it with docs that carry "
        f"doc._.{LAYERS}"
    )


def _forward(model: Model, docs: list[Doc], is_train: bool) -> tuple[list[Floats2d], Callable]:
    outputs, backprop_mix = mix_forward(model, _inputs(model, docs), is_train, input_grads=False)

    def backprop(dYs: list[Floats2d]) -> list[Doc]:
        backprop_mix(dYs)
        return []

    return outputs, backprop


def mix_forward(
    model: Model, inputs: list[Floats3d], is_train: bool, *, input_grads: bool
) -> tuple[list[Floats2d], Callable[[list[Floats2d]], list[Floats3d]]]:
    """The mix of each doc's ``(n_outputs, n_tokens, width)`` layers, and its backprop.

    The backprop adds the gradients of ``s`` and ``gamma`` and returns the gradient of each input
    when ``input_grads`` (a layer whose biLM trains, spacy_elmo.ElmoFineTune.v1); else empty arrays.
    """
    xp = model.ops.xp
    learned = model.attrs["layers"] == LEARNED
    s = cast(Floats1d, model.get_param("s"))
    if learned:
        weights = _softmax(s, xp)
    else:
        weights = model.ops.asarray1f(cast(Floats1d, layer_weights(model.attrs["layers"], len(s))))
    gamma = model.get_param("gamma")[0] + model.attrs["gamma_anchor"]
    mixes = [xp.tensordot(weights, X, axes=(0, 0)) for X in inputs]
    rate = model.attrs["dropout"] if is_train else 0.0
    masks = [model.ops.get_dropout_mask(mix.shape, rate) if rate > 0 else None for mix in mixes]
    outputs = [gamma * mix if mask is None else gamma * mix * mask for mix, mask in zip(mixes, masks)]

    def backprop(dYs: list[Floats2d]) -> list[Floats3d]:
        d_gamma = model.ops.alloc1f(1)
        d_weights = xp.zeros_like(weights)
        d_inputs: list[Floats3d] = []
        for X, mix, mask, dY in zip(inputs, mixes, masks, dYs):
            if mask is not None:
                dY = dY * mask
            d_gamma[0] += (dY * mix).sum()
            if learned:
                d_weights += gamma * xp.tensordot(X, dY, axes=([1, 2], [0, 1]))
            if input_grads:
                scale = cast(Any, gamma * weights).astype("float32")  # d output / d layer j: gamma * w_j
                d_inputs.append(scale[:, None, None] * cast(Any, dY)[None])
        if learned:  # softmax Jacobian, plus the paper's regulariser l2_coef * ||s||^2 (bilm-tf puts it on s)
            model.inc_grad("s", weights * (d_weights - (weights * d_weights).sum()) + 2 * model.attrs["l2_coef"] * s)
        model.inc_grad("gamma", d_gamma)
        return d_inputs

    return outputs, backprop


def _softmax(s: Floats1d, xp) -> Floats1d:
    e = xp.exp(s - s.max())
    return e / e.sum()


def _inputs(model: Model, docs: list[Doc]) -> list[Floats3d]:
    """Each doc's float32 ``(n_outputs, n_tokens, width)`` layers: stored on the doc, else from the linked component."""
    component = linked(model)
    fingerprint = component.backend.fingerprint if component is not None else None
    arrays = [_stored_layers(doc, fingerprint) for doc in docs]
    missing = [i for i, layers in enumerate(arrays) if layers is None]
    if missing:
        if component is None:
            raise ValueError(
                f"doc._.{LAYERS} is missing and no 'elmo' component is linked to this ElmoScalarMix: put the "
                f"'elmo' component before this one in the pipeline"
            )
        for i, layers in zip(missing, component.predict([docs[i] for i in missing])):
            arrays[i] = layers
    complete = cast(list[np.ndarray], arrays)  # every missing one was filled above
    for layers in complete:
        if (layers.shape[0], layers.shape[2]) != (model.attrs["n_outputs"], model.get_dim("nO")):
            _check_shape(model, layers.shape[0], layers.shape[2], f"doc._.{LAYERS} (shape {layers.shape})")
    inputs = [model.ops.asarray3f(cast(Floats3d, layers), dtype="float32") for layers in complete]
    if model.attrs["do_layer_norm"]:
        inputs = [_layer_norm(X, doc, model.ops.xp) for X, doc in zip(inputs, docs)]
    return inputs


def _stored_layers(doc: Doc, fingerprint: Optional[str]) -> Optional[np.ndarray]:
    """The doc's stored layers (``extensions.stored_layers``): with a linked component, None when stale (recomputed)."""
    if fingerprint is None:
        return stored_layers(doc)  # no model to recompute with: stale layers raise
    return fresh_layers(doc, fingerprint)


def _layer_norm(X: Floats3d, doc: Doc, xp) -> Floats3d:
    """Each layer scaled to mean 0, variance 1 over the doc's non-space tokens (AllenNLP's ScalarMix, per doc).

    AllenNLP normalises over the whole padded batch; per doc, a doc's output does not depend on its
    batch-mates. Whitespace tokens keep their zero rows.
    """
    keep = xp.asarray([not is_whitespace(token.text) for token in doc], dtype=bool)
    if not keep.any():
        return X
    kept = X[:, keep]
    mean = kept.mean(axis=(1, 2), keepdims=True)
    var = kept.var(axis=(1, 2), keepdims=True)
    out = xp.zeros_like(X)
    out[:, keep] = (kept - mean) / xp.sqrt(var + 1e-12)
    return out


# -- reading a trained mix --------------------------------------------------------------------------


class LearnedMix(NamedTuple):
    """A trained mix: the normalised layer weights (layer 0 = token layer) and gamma."""

    weights: list[float]
    gamma: float


def learned_mix(obj: Any) -> LearnedMix:
    """The layer weights (softmax(s), or the fixed choice) and gamma of the ElmoScalarMix in a pipe or Thinc model."""
    model = getattr(obj, "model", obj)
    if not isinstance(model, Model):
        raise TypeError(f"expected a pipeline component or a Thinc model, not {type(obj).__name__}")
    mixes = [node for node in model.walk() if node.name == MIX_NAME]
    if len(mixes) != 1:
        raise ValueError(f"expected one ElmoScalarMix layer in {model.name!r}, found {len(mixes)}")
    mix = mixes[0]
    if mix.has_param("s") is not True:
        raise ValueError(
            "the ElmoScalarMix layer is not initialized yet (nlp.initialize() or spacy.load a trained pipeline)"
        )
    s = np.asarray(mix.ops.to_numpy(mix.get_param("s")), dtype=np.float64)
    choice = mix.attrs["layers"]
    weights = layer_weights(list(s) if choice == LEARNED else choice, len(s))
    gamma = float(mix.ops.to_numpy(mix.get_param("gamma"))[0]) + mix.attrs["gamma_anchor"]
    return LearnedMix([float(w) for w in weights], gamma)


def trained_mixes(pipeline: Path) -> dict[str, LearnedMix]:
    """The learned mix of each component of the trained pipeline saved in ``pipeline`` that has one, by component
    name (``spacy-elmo plot-mix``); a ``ValueError`` when ``pipeline`` holds no spaCy pipeline, or none of its
    components has a trained ElmoScalarMix layer."""
    import spacy

    try:
        nlp = spacy.load(pipeline)
    except OSError as err:  # spaCy's "[E053] Could not read meta.json ...": no pipeline there
        raise ValueError(f"{pipeline}: not a spaCy pipeline ({err})") from err
    mixes = {}
    for name, pipe in nlp.pipeline:
        try:
            mixes[name] = learned_mix(pipe)
        except (TypeError, ValueError):
            continue  # no (or no initialized) ElmoScalarMix in this component
    if not mixes:
        raise ValueError(f"{pipeline}: no component has a trained ElmoScalarMix layer")
    return mixes
