"""Layer selection and the paper's scalar mix: ``gamma * sum_j softmax(s)_j * h_j``."""
from __future__ import annotations

from typing import Sequence, Union

import numpy as np

LayerSpec = Union[str, int, Sequence[float]]


def layer_weights(layers: LayerSpec, n_outputs: int) -> np.ndarray:
    """Normalised weights over the ``n_outputs`` ELMo layers (layer 0 = token layer).

    ``"average"``: equal weights; ``"top"``: the last layer; an int: that layer (negative counts
    from the top); a list of ``n_outputs`` numbers: the paper's unnormalised scalars ``s``,
    softmax-normalised.
    """
    if isinstance(layers, str):
        if layers == "average":
            return np.full(n_outputs, 1.0 / n_outputs, dtype=np.float64)
        if layers == "top":
            return _one_hot(n_outputs - 1, n_outputs)
        raise ValueError(f"layers={layers!r}: expected 'average', 'top', a layer index or a list of {n_outputs} weights")
    if isinstance(layers, (bool, np.bool_)):
        raise TypeError(f"layers={layers!r}: expected 'average', 'top', an int or a list of numbers")
    if isinstance(layers, (int, np.integer)):
        index = int(layers)
        if not -n_outputs <= index < n_outputs:
            raise ValueError(f"layers={index}: this model has {n_outputs} layers (0..{n_outputs - 1})")
        return _one_hot(index % n_outputs, n_outputs)
    try:
        scalars = np.asarray(list(layers), dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise TypeError(f"layers={layers!r}: expected 'average', 'top', an int or a list of numbers") from err
    if scalars.shape != (n_outputs,):
        raise ValueError(f"layers={list(layers)!r}: need exactly {n_outputs} weights, one per layer")
    if not np.all(np.isfinite(scalars)):
        raise ValueError(f"layers={list(layers)!r}: weights must be finite numbers")
    exp = np.exp(scalars - scalars.max())
    return exp / exp.sum()


def _one_hot(index: int, n: int) -> np.ndarray:
    weights = np.zeros(n, dtype=np.float64)
    weights[index] = 1.0
    return weights


def mix_layers(activations: np.ndarray, layers: LayerSpec = "average", gamma: float = 1.0) -> np.ndarray:
    """Collapse ``(n_outputs, n_tokens, dim)`` activations to float32 ``(n_tokens, dim)``."""
    weights = layer_weights(layers, activations.shape[0]) * float(gamma)
    return np.tensordot(weights.astype(np.float32), activations, axes=(0, 0)).astype(np.float32, copy=False)
