"""Layer selection and the paper's scalar mix: ``gamma * sum_j softmax(s)_j * h_j``, or every layer side by side.

The one check of each mix setting (:func:`check_layer_spec`, :func:`check_gamma`), for every front end and the
spaCy mix layers: kept here, beside the computation that reads them, rather than in ``validation.py``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any, Union

import numpy as np

from ...groundwork.excerpt import excerpt
from ..configuration.defaults import DEFAULT_GAMMA, DEFAULT_LAYERS
from ..configuration.validation import finite_in

LayerMix = Union[str, int, Sequence[float]]  # the ``layers`` setting: which layers, mixed how
ALL = "all"  # every layer's vectors side by side (simple_elmo's name): ``n_outputs * dim`` wide, no weights
_NAMED = ("average", "top", ALL)
_EXPECTED = "expected 'average', 'top', 'all', a layer index or a list of weights"
# an index as text: spaCy 3.7's config validation (pydantic 1's rules) hands ``layers = 0`` over as "0", since a str is
# the first type the setting takes
_INDEX_TEXT = re.compile(r"[+-]?[0-9]+")


def check_layer_spec(layers: Any) -> LayerMix:
    """``layers`` after every check that needs no model: ``"average"``, ``"top"``, ``"all"``, an int (or an int as
    text, ``"-1"``), or finite numbers.

    Returns the spec in plain Python types (an ``int``, a list of ``float``); ``ValueError`` or
    ``TypeError`` names a bad one. Whether an index or the number of weights fits a model is
    :func:`layer_weights`'s to check.
    """
    if isinstance(layers, str):
        if _INDEX_TEXT.fullmatch(layers):
            return int(layers)
        if layers not in _NAMED:
            raise ValueError(f"layers={layers!r}: {_EXPECTED}")
        return layers
    if isinstance(layers, (bool, np.bool_)):
        raise TypeError(f"layers={layers!r}: {_EXPECTED}")
    if isinstance(layers, (int, np.integer)):
        return int(layers)
    try:
        items = list(layers)
        values = [float(x) for x in items if not isinstance(x, (bool, np.bool_))]
    except (TypeError, ValueError, OverflowError) as err:  # an integer too large for a float: no weight
        raise TypeError(f"layers={excerpt(layers)}: {_EXPECTED}") from err
    if len(values) != len(items) or not all(np.isfinite(values)):
        raise ValueError(f"layers={items!r}: expected finite numbers, one per layer")
    return values


def check_gamma(gamma: Any) -> float:
    """``gamma`` (the mix's scale) as a ``float`` when it is a finite number (booleans not); else ``ValueError``
    (:func:`~..configuration.validation.finite_in`, the one check of a number)."""
    return finite_in(gamma, "gamma", -math.inf)


def layer_weights(layers: LayerMix, n_outputs: int) -> np.ndarray:
    """Normalised weights over the ``n_outputs`` ELMo layers (layer 0 = token layer).

    ``"average"``: equal weights; ``"top"``: the last layer; an int: that layer (negative counts
    from the top); a list of ``n_outputs`` numbers: the paper's unnormalised scalars ``s``,
    softmax-normalised. The spec is checked by :func:`check_layer_spec` first. ``"all"`` weighs nothing (the layers
    stay side by side): ``ValueError`` here, for a reader that must have one mixed layer (a scalar mix to train).
    """
    layers = check_layer_spec(layers)
    if layers == ALL:
        raise ValueError(
            f"layers={ALL!r} keeps every layer side by side and has no weights: a mix here needs 'average', 'top', "
            "a layer index or a list of weights"
        )
    if layers == "average":
        return np.full(n_outputs, 1.0 / n_outputs, dtype=np.float64)
    if layers == "top":
        return _one_hot(n_outputs - 1, n_outputs)
    if isinstance(layers, int):
        if not -n_outputs <= layers < n_outputs:
            raise ValueError(f"layers={layers}: this model has {n_outputs} layers (0..{n_outputs - 1})")
        return _one_hot(layers % n_outputs, n_outputs)
    scalars = np.asarray(layers, dtype=np.float64)
    if scalars.shape != (n_outputs,):
        raise ValueError(f"layers={list(layers)!r}: need exactly {n_outputs} weights, one per layer")
    exp = np.exp(scalars - scalars.max())
    return exp / exp.sum()


def _one_hot(index: int, n: int) -> np.ndarray:
    weights = np.zeros(n, dtype=np.float64)
    weights[index] = 1.0
    return weights


def mixed_width(layers: LayerMix, n_outputs: int, dim: int) -> int:
    """The width of :func:`mix_layers`'s rows for a model of ``n_outputs`` layers of ``dim``, ``layers`` checked against
    them (``ValueError`` naming a bad one): ``dim``, or ``n_outputs * dim`` for ``"all"``."""
    if check_layer_spec(layers) == ALL:
        return n_outputs * dim
    layer_weights(layers, n_outputs)
    return dim


def mix_layers(activations: np.ndarray, layers: LayerMix = DEFAULT_LAYERS, gamma: float = DEFAULT_GAMMA) -> np.ndarray:
    """Collapse ``(n_outputs, n_tokens, dim)`` activations to float32 ``(n_tokens, dim)``; ``layers="all"``: each
    token's layers side by side, layer 0 first, float32 ``(n_tokens, n_outputs * dim)`` (times ``gamma``)."""
    if check_layer_spec(layers) == ALL:
        n_outputs, n_tokens, dim = activations.shape
        side_by_side = np.moveaxis(np.asarray(activations, dtype=np.float32), 0, 1).reshape(n_tokens, n_outputs * dim)
        return side_by_side * np.float32(gamma) if float(gamma) != 1.0 else np.ascontiguousarray(side_by_side)
    weights = layer_weights(layers, activations.shape[0]) * float(gamma)
    return np.tensordot(weights.astype(np.float32), activations, axes=(0, 0)).astype(np.float32, copy=False)
