"""Read and write ELMo models in the bilm-tf / AllenNLP format: ``options.json`` + HDF5 weights.

The HDF5 layout (all float32)::

    char_embed                                  (n_characters - 1, char_dim)  no row for char id 0
    CNN/W_cnn_{i}, CNN/b_cnn_{i}                (1, width, char_dim, n), (n,)
    CNN_high_{k}/W_transform|W_carry|b_...      (F, F), (F,)
    CNN_proj/W_proj, CNN_proj/b_proj            (F, proj), (proj,)
    RNN_{d}/RNN/MultiRNNCell/Cell{l}/LSTMCell/  W_0 (proj + proj, 4 * cell), B (4 * cell,), W_P_0 (cell, proj)

``d`` = 0 is the forward and 1 the backward direction; gate columns are in TF order (i, j, f, o).
Options are checked against :data:`_SCHEMA` (JSON types and ranges) before anything is built.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, Tuple, Union

import numpy as np
import torch

from .chars import MAX_CHARS_PER_TOKEN, PADDING_CHAR
from .model import BiLM, BiLMOptions

PathLike = Union[str, os.PathLike]


class WeightFileError(ValueError):
    """An options or weight file that is missing, unreadable or does not match the architecture."""


def read_options(path: PathLike) -> BiLMOptions:
    """Parse ``options.json``; extra training keys in released files are ignored."""
    path = Path(path)
    if not path.is_file():
        raise WeightFileError(f"options file not found: {path}")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise WeightFileError(f"options file {path} is not valid JSON: {err}") from err
    return options_from_dict(raw, source=str(path))


def options_from_dict(raw: Dict[str, Any], source: str = "options") -> BiLMOptions:
    """Build :class:`BiLMOptions` from an ``options.json``-style dictionary, each value checked by :data:`_SCHEMA`."""
    if not isinstance(raw, dict) or not isinstance(raw.get("lstm"), dict) or not isinstance(raw.get("char_cnn"), dict):
        raise WeightFileError(f"{source}: expected an object with 'lstm' and 'char_cnn' sections")
    values = {option.field: _option_value(raw, option, source) for option in _SCHEMA}
    values["filters"] = tuple((width, count) for width, count in values["filters"])
    for clip in ("cell_clip", "proj_clip"):
        values[clip] = None if values[clip] is None else float(values[clip])
    return BiLMOptions(**values)


# -- the options.json schema ----------------------------------------------------------------
# Unknown keys are ignored (released files carry training settings); known ones must be exactly
# the JSON type asked for: 64.0 is not an int, "false" is not a boolean.


@dataclass(frozen=True)
class _Rule:
    """What an option's value must be: a test, and the words for it in error messages."""

    accepts: Callable[[Any], bool]
    description: str


_REQUIRED = object()


@dataclass(frozen=True)
class _Option:
    """One ``options.json`` entry: its dotted path, the :class:`BiLMOptions` field it sets, its rule and default."""

    path: str
    field: str
    rule: _Rule
    default: Any = _REQUIRED


def _is_int(value: Any) -> bool:
    """A JSON integer: ``true`` and ``4.0`` are not ints, although Python would take them as such."""
    return isinstance(value, int) and not isinstance(value, bool)


def _int_at_least(minimum: int) -> _Rule:
    """An int >= ``minimum``."""
    return _Rule(lambda value: _is_int(value) and value >= minimum, f"an int >= {minimum}")


def _is_filter(value: Any) -> bool:
    """A ``[width, count]`` pair of positive ints whose width fits in a token's characters."""
    return (
        isinstance(value, list)
        and len(value) == 2
        and all(_is_int(x) and x >= 1 for x in value)
        and value[0] <= MAX_CHARS_PER_TOKEN
    )


def _is_clip(value: Any) -> bool:
    """``null`` (no clipping) or a finite number >= 0 (0 also means no clipping, as before)."""
    if value is None:
        return True
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


_FILTERS = _Rule(
    lambda value: isinstance(value, list) and len(value) > 0 and all(_is_filter(f) for f in value),
    f"a non-empty list of [width, count] pairs of ints >= 1 (width <= {MAX_CHARS_PER_TOKEN})",
)
_CLIP = _Rule(_is_clip, "a finite number >= 0, or null")
_BOOLEAN = _Rule(lambda value: isinstance(value, bool), "true or false (a JSON boolean)")
_ACTIVATION = _Rule(lambda value: value in ("relu", "tanh"), '"relu" or "tanh"')
_MAX_CHARS = _Rule(lambda value: _is_int(value) and value == MAX_CHARS_PER_TOKEN, str(MAX_CHARS_PER_TOKEN))

_SCHEMA: Tuple[_Option, ...] = (
    _Option("char_cnn.filters", "filters", _FILTERS),
    _Option("char_cnn.embedding.dim", "char_embed_dim", _int_at_least(1)),
    _Option("char_cnn.n_characters", "n_characters", _int_at_least(PADDING_CHAR), 262),  # char ids go up to 261
    _Option("char_cnn.max_characters_per_token", "max_chars", _MAX_CHARS, MAX_CHARS_PER_TOKEN),
    _Option("char_cnn.n_highway", "n_highway", _int_at_least(0), 0),
    _Option("char_cnn.activation", "activation", _ACTIVATION, "relu"),
    _Option("lstm.dim", "cell_dim", _int_at_least(1)),
    _Option("lstm.projection_dim", "projection_dim", _int_at_least(1)),
    _Option("lstm.n_layers", "n_layers", _int_at_least(1)),
    _Option("lstm.cell_clip", "cell_clip", _CLIP, None),
    _Option("lstm.proj_clip", "proj_clip", _CLIP, None),
    _Option("lstm.use_skip_connections", "use_skip_connections", _BOOLEAN, False),
)


def _option_value(raw: Dict[str, Any], option: _Option, source: str) -> Any:
    """The value of one option, checked against its rule (its default when it is optional and absent)."""
    keys = option.path.split(".")
    value: Any = raw
    for depth, key in enumerate(keys):
        if not isinstance(value, dict):
            raise WeightFileError(f"{source}: {'.'.join(keys[:depth])} must be an object, not {_json(value)}")
        if key not in value:
            if option.default is _REQUIRED:
                raise WeightFileError(f"{source}: missing option {'.'.join(keys[: depth + 1])}")
            return option.default
        value = value[key]
    if not option.rule.accepts(value):
        raise WeightFileError(f"{source}: {option.path} must be {option.rule.description}, not {_json(value)}")
    return value


def _json(value: Any, limit: int = 80) -> str:
    """A value as options.json spells it (``true``, ``null``, ``"false"``), cut to ``limit`` characters."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _lstm_prefix(direction: int, layer: int) -> str:
    return f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"


def _datasets(model: BiLM) -> Iterator[Tuple[str, torch.Tensor, str]]:
    """(hdf5 name, tensor, how the file stores it) for every parameter; kinds: plain, T, conv, char."""
    enc = model.token_encoder
    yield "char_embed", enc.char_embed.weight, "char"
    for i, conv in enumerate(enc.convs):
        yield f"CNN/W_cnn_{i}", conv.weight, "conv"
        yield f"CNN/b_cnn_{i}", conv.bias, "plain"
    for k, highway in enumerate(enc.highways):
        yield f"CNN_high_{k}/W_transform", highway.transform.weight, "T"
        yield f"CNN_high_{k}/b_transform", highway.transform.bias, "plain"
        yield f"CNN_high_{k}/W_carry", highway.carry.weight, "T"
        yield f"CNN_high_{k}/b_carry", highway.carry.bias, "plain"
    yield "CNN_proj/W_proj", enc.projection.weight, "T"
    yield "CNN_proj/b_proj", enc.projection.bias, "plain"
    for direction, layers in enumerate((model.lstm.forward_layers, model.lstm.backward_layers)):
        for layer, cell in enumerate(layers):
            prefix = _lstm_prefix(direction, layer)
            yield f"{prefix}/W_0", cell, "lstm_W"
            yield f"{prefix}/B", cell.bias, "plain"
            yield f"{prefix}/W_P_0", cell.projection, "plain"


def _file_shape(tensor: Any, kind: str) -> Tuple[int, ...]:
    if kind == "lstm_W":
        return (tensor.input_dim + tensor.proj_dim, 4 * tensor.cell_dim)
    shape = tuple(tensor.shape)
    if kind == "T":
        return shape[::-1]
    if kind == "conv":  # torch (n, char_dim, width) <- tf (1, width, char_dim, n)
        return (1, shape[2], shape[1], shape[0])
    if kind == "char":
        return (shape[0] - 1, shape[1])
    return shape


def load_weights(model: BiLM, weights_path: PathLike) -> None:
    """Copy every dataset of an ELMo HDF5 file into ``model``, validating each shape."""
    import h5py

    path = Path(weights_path)
    if not path.is_file():
        raise WeightFileError(f"weight file not found: {path}")
    try:
        handle = h5py.File(path, "r")
    except OSError as err:
        raise WeightFileError(f"weight file {path} is not a readable HDF5 file (truncated or corrupt?): {err}") from err
    with handle, torch.no_grad():
        for name, target, kind in _datasets(model):
            if name not in handle:
                raise WeightFileError(f"weight file {path}: missing dataset {name!r}")
            expected = _file_shape(target, kind)
            dataset = handle[name]
            if tuple(dataset.shape) != expected:
                raise WeightFileError(
                    f"weight file {path}: dataset {name!r} has shape {tuple(dataset.shape)}, "
                    f"expected {expected} from the options"
                )
            try:
                array = np.asarray(dataset[...], dtype=np.float32)
            except OSError as err:
                raise WeightFileError(f"weight file {path}: cannot read dataset {name!r} (corrupt?): {err}") from err
            _assign(target, kind, array)


def _assign(target: Any, kind: str, array: np.ndarray) -> None:
    if kind == "lstm_W":
        target.input_weight.copy_(torch.from_numpy(array[: target.input_dim]))
        target.state_weight.copy_(torch.from_numpy(array[target.input_dim :]))
    elif kind == "T":
        target.copy_(torch.from_numpy(array.T.copy()))
    elif kind == "conv":
        target.copy_(torch.from_numpy(array[0].transpose(2, 1, 0).copy()))
    elif kind == "char":
        target.zero_()
        target[1:] = torch.from_numpy(array)
    else:
        target.copy_(torch.from_numpy(array))


def _export(target: Any, kind: str) -> np.ndarray:
    if kind == "lstm_W":
        return torch.cat([target.input_weight, target.state_weight]).detach().cpu().numpy()
    array = target.detach().cpu().numpy()
    if kind == "T":
        return array.T
    if kind == "conv":
        return array.transpose(2, 1, 0)[None]
    if kind == "char":
        return array[1:]
    return array


def save_weights(model: BiLM, weights_path: PathLike) -> None:
    """Write ``model``'s parameters as an ELMo HDF5 file (atomically: a temp file, then rename)."""
    import h5py

    path = Path(weights_path)
    tmp = path.with_name(path.name + ".tmp")
    with h5py.File(tmp, "w") as handle:
        for name, target, kind in _datasets(model):
            handle.create_dataset(name, data=np.ascontiguousarray(_export(target, kind), dtype=np.float32))
    os.replace(tmp, path)


def save_options(options: BiLMOptions, path: PathLike) -> None:
    Path(path).write_text(json.dumps(options.to_json(), indent=2) + "\n", encoding="utf-8")


def load_model(options_path: PathLike, weights_path: PathLike) -> BiLM:
    """Build a :class:`BiLM` from ``options.json`` + HDF5 weights, in eval mode."""
    model = BiLM(read_options(options_path))
    load_weights(model, weights_path)
    return model.eval()


def save_model(model: BiLM, directory: PathLike, weights_name: str = "weights.hdf5") -> Path:
    """Write ``options.json`` and the HDF5 weights into ``directory``; returns the directory."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    save_options(model.options, directory / "options.json")
    save_weights(model, directory / weights_name)
    return directory
