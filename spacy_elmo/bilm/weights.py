"""Read and write ELMo models in the bilm-tf / AllenNLP format: ``options.json`` + HDF5 weights.

The HDF5 layout (all float32)::

    char_embed                                  (n_characters - 1, char_dim)  no row for char id 0
    CNN/W_cnn_{i}, CNN/b_cnn_{i}                (1, width, char_dim, n), (n,)
    CNN_high_{k}/W_transform|W_carry|b_...      (F, F), (F,)
    CNN_proj/W_proj, CNN_proj/b_proj            (F, proj), (proj,)
    RNN_{d}/RNN/MultiRNNCell/Cell{l}/LSTMCell/  W_0 (proj + proj, 4 * cell), B (4 * cell,), W_P_0 (cell, proj)

``d`` = 0 is the forward and 1 the backward direction; gate columns are in TF order (i, j, f, o).
``char_embed`` has 261 rows for ``n_characters`` 261 or 262 (see ``BiLMOptions.char_embedding_rows``).

Two tables drive this module: :data:`_SCHEMA` (what ``options.json`` may hold) and :data:`_LAYOUT`
(every dataset: its name, its shape from the options, the parameter it fills). Loading checks the
options against the schema, then the weight file's links, dataset names (both ways), shapes,
dtypes and storage against the options (metadata only), and only then builds the model and reads
the data, refusing NaN/Inf. Every problem is a :class:`WeightFileError` naming the file and the
option or dataset.

The schema bounds every size (:data:`MAX_WIDTH`, :data:`MAX_PARAMETERS`: an absurd architecture is refused before
anything is allocated), and torch is imported only where a model is built, read or written: reading and checking
options needs none, so ``spacy-elmo train --arch FILE`` checks its architecture before torch is imported.
"""

from __future__ import annotations

import io
import json
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

import numpy as np

from ..groundwork.atomic_write import atomic_paths, reported_as, write_json_atomically
from ..groundwork.file_names import OPTIONS, WEIGHTS, PathLike
from ..groundwork.schema_check import read_json_file
from .chars import MAX_CHARS_PER_TOKEN, PADDING_CHAR
from .options import BiLMOptions

if TYPE_CHECKING:  # pragma: no cover
    from .model import BiLM


class WeightFileError(ValueError):
    """An options or weight file that is missing, unreadable or does not match the architecture."""


def read_options(path: PathLike) -> BiLMOptions:
    """Parse ``options.json``; extra training keys in released files are ignored."""
    path = Path(path)
    if not path.is_file():
        raise WeightFileError(f"options file not found: {path}")
    advice = "correct it, or fetch the model again"
    return options_from_dict(read_json_file(path, None, advice, WeightFileError), source=str(path))


def options_from_dict(raw: dict[str, Any], source: str = "options") -> BiLMOptions:
    """Build :class:`BiLMOptions` from an ``options.json``-style dictionary, each value checked by :data:`_SCHEMA`."""
    if not isinstance(raw, dict) or not isinstance(raw.get("lstm"), dict) or not isinstance(raw.get("char_cnn"), dict):
        raise WeightFileError(f"{source}: expected an object with 'lstm' and 'char_cnn' sections")
    values = {option.field: _option_value(raw, option, source) for option in _SCHEMA}
    values["filters"] = tuple((width, count) for width, count in values["filters"])
    for clip in ("cell_clip", "proj_clip"):
        values[clip] = None if values[clip] is None else float(values[clip])
    options = BiLMOptions(**values)
    parameters = parameter_count(options)
    if parameters > MAX_PARAMETERS:
        raise WeightFileError(
            f"{source}: the architecture has {parameters:,} parameters, more than the {MAX_PARAMETERS:,} a biLM may "
            "have here (about ten times the published 'original' ELMo): make lstm.dim, lstm.projection_dim or "
            "char_cnn.filters smaller"
        )
    return options


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


def _int_between(minimum: int, maximum: int) -> _Rule:
    """An int from ``minimum`` to ``maximum``."""
    return _Rule(lambda value: _is_int(value) and minimum <= value <= maximum, f"an int from {minimum} to {maximum}")


# The most layers an architecture may ask for (options.json and ELMoForManyLangs' files alike), far above any
# published ELMo (2 or 3 LSTM layers, 1 or 2 highway layers). Checked with the options, before the layout is
# listed or anything built: a value such as 10**9 would otherwise cost minutes and gigabytes before failing.
MAX_LSTM_LAYERS = 64
MAX_HIGHWAY_LAYERS = 64
LSTM_LAYERS = _int_between(1, MAX_LSTM_LAYERS)
HIGHWAY_LAYERS = _int_between(0, MAX_HIGHWAY_LAYERS)
# The widest dimension (lstm.dim, lstm.projection_dim, the char embedding's width and rows, a filter's count), the
# most char CNN filters and the most parameters an architecture may ask for: far above any published ELMo (the
# "original": widths up to 4096, 7 filters, 93.6M parameters; 1e9 float32 parameters are 4 GB, 16 GB with Adam's
# state in training). Checked with the options, before anything is built: lstm.dim 10**9 would otherwise end in
# an allocator's traceback (or a machine swapping) after the model began to be built.
MAX_WIDTH = 65536
MAX_FILTERS = 64
MAX_PARAMETERS = 1_000_000_000
WIDTH = _int_between(1, MAX_WIDTH)


def _is_filter(value: Any) -> bool:
    """A ``[width, count]`` pair of positive ints: a width that fits in a token's characters, at most
    :data:`MAX_WIDTH` filters."""
    return (
        isinstance(value, list)
        and len(value) == 2
        and all(_is_int(x) and x >= 1 for x in value)
        and value[0] <= MAX_CHARS_PER_TOKEN
        and value[1] <= MAX_WIDTH
    )


def _is_clip(value: Any) -> bool:
    """``null`` (no clipping) or a finite number >= 0 (0 also means no clipping, as before)."""
    if value is None:
        return True
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


_FILTERS = _Rule(
    lambda value: isinstance(value, list) and 0 < len(value) <= MAX_FILTERS and all(_is_filter(f) for f in value),
    f"a list of 1 to {MAX_FILTERS} [width, count] pairs of ints >= 1 (width <= {MAX_CHARS_PER_TOKEN}, "
    f"count <= {MAX_WIDTH})",
)
_CLIP = _Rule(_is_clip, "a finite number >= 0, or null")
_BOOLEAN = _Rule(lambda value: isinstance(value, bool), "true or false (a JSON boolean)")
_ACTIVATION = _Rule(lambda value: value in ("relu", "tanh"), '"relu" or "tanh"')
_MAX_CHARS = _Rule(lambda value: _is_int(value) and value == MAX_CHARS_PER_TOKEN, str(MAX_CHARS_PER_TOKEN))

_SCHEMA: tuple[_Option, ...] = (
    _Option("char_cnn.filters", "filters", _FILTERS),
    _Option("char_cnn.embedding.dim", "char_embed_dim", WIDTH),
    # char ids go up to 261: more rows are never read
    _Option("char_cnn.n_characters", "n_characters", _int_between(PADDING_CHAR, MAX_WIDTH), 262),
    _Option("char_cnn.max_characters_per_token", "max_chars", _MAX_CHARS, MAX_CHARS_PER_TOKEN),
    _Option("char_cnn.n_highway", "n_highway", HIGHWAY_LAYERS, 0),
    _Option("char_cnn.activation", "activation", _ACTIVATION, "relu"),
    _Option("lstm.dim", "cell_dim", WIDTH),
    _Option("lstm.projection_dim", "projection_dim", WIDTH),
    _Option("lstm.n_layers", "n_layers", LSTM_LAYERS),
    _Option("lstm.cell_clip", "cell_clip", _CLIP, None),
    _Option("lstm.proj_clip", "proj_clip", _CLIP, None),
    _Option("lstm.use_skip_connections", "use_skip_connections", _BOOLEAN, False),
)


def _option_value(raw: dict[str, Any], option: _Option, source: str) -> Any:
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


# -- the weight file's layout ---------------------------------------------------------------
# One table, :data:`_LAYOUT`, says which datasets the options call for, their shapes in the file
# and the BiLM parameter each one fills; reading, checking and writing all go through it.

Shape = tuple[int, ...]


@dataclass(frozen=True)
class _Entry:
    """One dataset: its name (``{i}`` = the copy), its shape in the file, and the :class:`BiLM` parameter it fills.

    ``kind`` says how the file stores the parameter: plain, T (transposed), conv (TF layout),
    char (no row for char id 0) or lstm_W (input and state weights stacked).
    """

    pattern: str
    kind: str
    shape: Callable[[BiLMOptions, int], Shape]
    target: Callable[[BiLM, int], Any]
    shaped_by: str  # the options the shape comes from, for error messages

    def matcher(self) -> re.Pattern[str]:
        """A regex for this entry's names; group 1 is the copy number (canonical decimal only)."""
        return re.compile(re.escape(self.pattern).replace(re.escape("{i}"), r"(0|[1-9][0-9]*)") + r"\Z")


@dataclass(frozen=True)
class _Block:
    """Entries that come once, or once per filter / highway layer / LSTM layer (``repeat`` names the option)."""

    repeat: Optional[str]
    entries: tuple[_Entry, ...]


# repeat option -> (how many copies the options ask for, what a copy is called)
_REPEATS: dict[str, tuple[Callable[[BiLMOptions], int], str]] = {
    "len(char_cnn.filters)": (lambda o: len(o.filters), "CNN filters"),
    "char_cnn.n_highway": (lambda o: o.n_highway, "highway layers"),
    "lstm.n_layers": (lambda o: o.n_layers, "LSTM layers"),
}


def _highway_entries(layer: str) -> tuple[_Entry, _Entry]:
    """``CNN_high_{i}/W_{layer}`` and ``b_{layer}`` for ``layer`` "transform" or "carry" (each a linear map)."""

    def linear(m: BiLM, i: int) -> Any:
        return getattr(m.token_encoder.highways[i], layer)

    return (
        _Entry(
            f"CNN_high_{{i}}/W_{layer}",
            "T",
            lambda o, i: (o.n_filters, o.n_filters),
            lambda m, i: linear(m, i).weight,
            "char_cnn.filters",
        ),
        _Entry(
            f"CNN_high_{{i}}/b_{layer}",
            "plain",
            lambda o, i: (o.n_filters,),
            lambda m, i: linear(m, i).bias,
            "char_cnn.filters",
        ),
    )


def _lstm_block(direction: int) -> _Block:
    """The three datasets of each LSTM layer of one direction (0 forward, 1 backward)."""
    prefix = f"RNN_{direction}/RNN/MultiRNNCell/Cell{{i}}/LSTMCell"

    def cell(m: BiLM, i: int) -> Any:
        return (m.lstm.forward_layers, m.lstm.backward_layers)[direction][i]

    return _Block(
        "lstm.n_layers",
        (
            _Entry(
                f"{prefix}/W_0",
                "lstm_W",
                lambda o, i: (2 * o.projection_dim, 4 * o.cell_dim),
                cell,
                "lstm.projection_dim, lstm.dim",
            ),
            _Entry(f"{prefix}/B", "plain", lambda o, i: (4 * o.cell_dim,), lambda m, i: cell(m, i).bias, "lstm.dim"),
            _Entry(
                f"{prefix}/W_P_0",
                "plain",
                lambda o, i: (o.cell_dim, o.projection_dim),
                lambda m, i: cell(m, i).projection,
                "lstm.dim, lstm.projection_dim",
            ),
        ),
    )


_LAYOUT: tuple[_Block, ...] = (
    _Block(
        None,
        (
            _Entry(
                "char_embed",
                "char",
                lambda o, i: (o.char_embedding_rows - 1, o.char_embed_dim),
                lambda m, i: m.token_encoder.char_embed.weight,
                "char_cnn.n_characters, char_cnn.embedding.dim",
            ),
        ),
    ),
    _Block(
        "len(char_cnn.filters)",
        (
            _Entry(
                "CNN/W_cnn_{i}",
                "conv",
                lambda o, i: (1, o.filters[i][0], o.char_embed_dim, o.filters[i][1]),
                lambda m, i: m.token_encoder.convs[i].weight,
                "char_cnn.filters, char_cnn.embedding.dim",
            ),
            _Entry(
                "CNN/b_cnn_{i}",
                "plain",
                lambda o, i: (o.filters[i][1],),
                lambda m, i: m.token_encoder.convs[i].bias,
                "char_cnn.filters",
            ),
        ),
    ),
    _Block("char_cnn.n_highway", (*_highway_entries("transform"), *_highway_entries("carry"))),
    _Block(
        None,
        (
            _Entry(
                "CNN_proj/W_proj",
                "T",
                lambda o, i: (o.n_filters, o.projection_dim),
                lambda m, i: m.token_encoder.projection.weight,
                "char_cnn.filters, lstm.projection_dim",
            ),
            _Entry(
                "CNN_proj/b_proj",
                "plain",
                lambda o, i: (o.projection_dim,),
                lambda m, i: m.token_encoder.projection.bias,
                "lstm.projection_dim",
            ),
        ),
    ),
    _lstm_block(0),
    _lstm_block(1),
)


def _copies(options: BiLMOptions, block: _Block) -> int:
    """How many copies of ``block`` the options ask for."""
    return 1 if block.repeat is None else _REPEATS[block.repeat][0](options)


def _expected(options: BiLMOptions) -> Iterator[tuple[str, _Entry, int]]:
    """(dataset name, entry, copy number) for every dataset the options call for, in writing order (lazily)."""
    for block in _LAYOUT:
        for i in range(_copies(options, block)):
            for entry in block.entries:
                yield entry.pattern.format(i=i), entry, i


def parameter_count(options: BiLMOptions) -> int:
    """Numbers in the weight file these options call for (the biLM's parameters, without char id 0's zero row).

    Computed from the layout alone: nothing is allocated, so absurd options cost nothing.
    """
    return sum(int(np.prod(entry.shape(options, i), dtype=np.int64)) for _, entry, i in _expected(options))


# -- checking a weight file (metadata only: nothing is read or allocated) ----------------------


def _check_file(handle: Any, options: BiLMOptions, path: Path) -> dict[str, Any]:
    """Check the file's links, dataset names, shapes, dtypes and storage against the options; returns its datasets.

    Runs before the model is built, so a file that disagrees with its options fails in
    milliseconds whatever sizes the options ask for.
    """
    datasets, groups = _contents(handle, path)
    _check_copies(options, datasets, path)
    wanted: set[str] = set()
    for name, entry, i in _expected(options):  # stops at the first missing dataset: never longer than the file
        with _damage_reported(path, name):
            _check_dataset(datasets, groups, name, entry.shape(options, i), entry.shaped_by, path)
        wanted.add(name)
    extra = sorted(set(datasets) - wanted)
    if extra:
        more = f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""
        raise WeightFileError(
            f"weight file {path}: unexpected dataset {extra[0]!r}{more}: not part of the model the options describe"
        )
    return datasets


def _contents(handle: Any, path: Path) -> tuple[dict[str, Any], set[str]]:
    """Every dataset (by name) and group name in the file; soft and external links are refused."""
    import h5py

    datasets: dict[str, Any] = {}
    groups: set[str] = set()
    visited = {handle["/"].id}
    stack = [("", handle)]
    while stack:
        prefix, group = stack.pop()
        for key in group:
            name = prefix + key
            with _damage_reported(path, name):
                _refuse_link(group.get(key, getlink=True), name, path)
                item = group[key]
            if isinstance(item, h5py.Dataset):
                datasets[name] = item
            elif isinstance(item, h5py.Group) and item.id not in visited:
                visited.add(item.id)
                groups.add(name)
                stack.append((name + "/", item))
            elif isinstance(item, h5py.Group):
                raise WeightFileError(f"weight file {path}: group {name!r} is a second link to a group seen before")
            else:
                kind = type(item).__name__
                raise WeightFileError(f"weight file {path}: {name!r} is a {kind}, not a dataset or group")
    return datasets, groups


def _refuse_link(link: Any, name: str, path: Path) -> None:
    """Refuse soft and external links (bilm-tf files have none): external ones read outside the fingerprinted file."""
    import h5py

    if isinstance(link, h5py.HardLink):
        return
    if isinstance(link, h5py.ExternalLink):
        target = f"an external link to {link.filename}:{link.path}"
    elif isinstance(link, h5py.SoftLink):
        target = f"a soft link to {link.path}"
    else:
        target = f"a {type(link).__name__}"
    raise WeightFileError(
        f"weight file {path}: {name!r} is {target}; links are refused, a weight file must hold its datasets itself"
    )


def _check_copies(options: BiLMOptions, datasets: dict[str, Any], path: Path) -> None:
    """The file has as many CNN filters, highway layers and LSTM layers as the options say (errors name the option)."""
    for block in _LAYOUT:
        if block.repeat is None:
            continue
        copies = _copies(options, block)
        found = _copies_in_file(block, datasets)
        if found == copies:
            continue
        if found > copies:
            name, problem = _first_copy_from(block, datasets, copies), "unexpected"
        else:
            name, problem = block.entries[0].pattern.format(i=found), "missing"
        raise WeightFileError(
            f"weight file {path}: {problem} dataset {name!r}: {block.repeat} is {copies} in the options, "
            f"but the file has {found} {_REPEATS[block.repeat][1]}"
        )


def _copy_numbers(block: _Block, datasets: dict[str, Any]) -> Iterator[tuple[int, int, str]]:
    """(copy number, entry position, name) of each dataset in the file that belongs to ``block``."""
    for position, entry in enumerate(block.entries):
        matcher = entry.matcher()
        for name in datasets:
            match = matcher.match(name)
            if match:
                yield int(match.group(1)), position, name


def _copies_in_file(block: _Block, datasets: dict[str, Any]) -> int:
    """How many copies of ``block`` the file has: its highest copy number + 1."""
    return max((number + 1 for number, _, _ in _copy_numbers(block, datasets)), default=0)


def _first_copy_from(block: _Block, datasets: dict[str, Any], first: int) -> str:
    """The name of the file's first dataset of ``block`` with a copy number >= ``first``."""
    return min(item for item in _copy_numbers(block, datasets) if item[0] >= first)[2]


def _check_dataset(
    datasets: dict[str, Any], groups: set[str], name: str, shape: Shape, shaped_by: str, path: Path
) -> None:
    """One expected dataset is there, has the options' shape, holds floats and keeps its data in the file."""
    if name in groups:
        raise WeightFileError(f"weight file {path}: {name!r} is a group, expected a dataset of shape {shape}")
    if name not in datasets:
        raise WeightFileError(f"weight file {path}: missing dataset {name!r} (expected shape {shape})")
    dataset = datasets[name]
    if dataset.dtype.kind != "f":
        raise WeightFileError(
            f"weight file {path}: dataset {name!r} holds {_dtype_words(dataset.dtype)}, "
            "expected floating-point numbers (float32)"
        )
    if dataset.shape != shape:
        raise WeightFileError(
            f"weight file {path}: dataset {name!r} has shape {dataset.shape}, expected {shape} "
            f"from the options ({shaped_by})"
        )
    if dataset.is_virtual or dataset.external:
        raise WeightFileError(
            f"weight file {path}: dataset {name!r} keeps its data outside the file "
            "(virtual or external storage); refused"
        )


def _dtype_words(dtype: np.dtype) -> str:
    """A dataset's dtype for an error message ("strings (dtype object)", "dtype int32")."""
    import h5py

    return f"strings (dtype {dtype})" if h5py.check_string_dtype(dtype) is not None else f"values of dtype {dtype}"


# -- reading and writing ----------------------------------------------------------------------


@contextmanager
def _checked_file(path: Path, options: BiLMOptions) -> Iterator[dict[str, Any]]:
    """Open the weight file and check it against ``options`` (see :func:`_check_file`); yields its datasets."""
    import h5py

    if not path.is_file():
        raise WeightFileError(f"weight file not found: {path}")
    try:
        handle = h5py.File(path, "r")
    except Exception as err:  # OSError mostly; damaged superblocks also give ValueError or RuntimeError
        raise WeightFileError(f"weight file {path} is not a readable HDF5 file (truncated or corrupt?): {err}") from err
    with handle:
        with _damage_reported(path):
            datasets = _check_file(handle, options, path)
        yield datasets


@contextmanager
def _damage_reported(path: Path, dataset: Optional[str] = None) -> Iterator[None]:
    """Any error h5py raises while reading the file's metadata or data becomes a :class:`WeightFileError`.

    A damaged file (a flipped byte in an object header, a B-tree or a heap) makes h5py raise
    ``KeyError``, ``RuntimeError``, ``ValueError``, ``OSError`` or ``TypeError`` from deep inside its
    C library; callers and the CLI need one error that names the file (and the dataset, where known).
    """
    try:
        yield
    except WeightFileError:
        raise
    except Exception as err:
        where = f" dataset {dataset!r}" if dataset is not None else ""
        raise WeightFileError(
            f"weight file {path}:{where} cannot be read, the file is damaged or not a complete ELMo HDF5 file "
            f"({type(err).__name__}: {first_line(err)})"
        ) from err


def first_line(err: BaseException, limit: int = 200) -> str:
    """The first line of an error's text (h5py's can span many), cut to ``limit`` characters, for a one-line message."""
    text = (str(err).strip().splitlines() or [type(err).__name__])[0]
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _read_into(model: BiLM, datasets: dict[str, Any], path: Path) -> None:
    """Read each checked dataset and copy it into its parameter."""
    import torch

    with torch.no_grad():
        for name, entry, i in _expected(model.options):
            _assign(entry.target(model, i), entry.kind, _read_finite(datasets[name], name, path))


def _read_finite(dataset: Any, name: str, path: Path) -> np.ndarray:
    """The dataset as float32; NaN/Inf are refused (one of them makes every vector NaN)."""
    with _damage_reported(path, name):
        raw = dataset[...]
    with np.errstate(over="ignore", invalid="ignore"):
        array = np.asarray(raw, dtype=np.float32)  # a float64 beyond float32's range becomes inf: refused below
    _refuse_non_finite(array, f"weight file {path}: dataset {name!r}")
    return array


def _refuse_non_finite(array: np.ndarray, what: str) -> None:
    """Raise :class:`WeightFileError` naming ``what`` if ``array`` holds NaN or Inf."""
    bad = ~np.isfinite(array)
    if bad.any():
        first = tuple(int(x) for x in np.argwhere(bad)[0])
        raise WeightFileError(
            f"{what} holds {int(bad.sum())} non-finite value(s) (NaN, Inf, or beyond float32's range), "
            f"the first at index {first}; expected finite float32 numbers"
        )


def _assign(target: Any, kind: str, array: np.ndarray) -> None:
    """Copy a file array into its parameter, undoing the file's layout (see :class:`_Entry`)."""
    import torch

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
    """A parameter in the file's layout (the inverse of :func:`_assign`)."""
    if kind == "lstm_W":
        import torch

        return torch.cat([target.input_weight, target.state_weight]).detach().cpu().numpy()
    array = target.detach().cpu().numpy()
    if kind == "T":
        return array.T
    if kind == "conv":
        return array.transpose(2, 1, 0)[None]
    if kind == "char":
        return array[1:]
    return array


def _exported(model: BiLM, name: str, entry: _Entry, i: int, path: Path) -> np.ndarray:
    """One dataset to write, checked like a loaded one: the options' shape, finite float32 values."""
    array = np.ascontiguousarray(_export(entry.target(model, i), entry.kind), dtype=np.float32)
    shape = entry.shape(model.options, i)
    if array.shape != shape:
        raise WeightFileError(
            f"cannot write {path}: dataset {name!r} would have shape {array.shape}, the options say {shape}"
        )
    _refuse_non_finite(array, f"cannot write {path}: dataset {name!r}")
    return array


def write_weights_file(model: BiLM, target: PathLike, shown_as: PathLike) -> None:
    """Write ``model``'s weight file at ``target`` (a temporary path; ``shown_as`` is the file it becomes).

    HDF5 builds the file in memory and Python writes its bytes: HDF5 never meets a failed write, which it
    reports only from object destructors ("Exception ignored", then a crash); a full disk is one
    :class:`~.files.WriteFailedError` naming ``shown_as``.
    """
    import h5py

    image = io.BytesIO()
    with h5py.File(image, "w") as handle:
        for name, entry, i in _expected(model.options):
            handle.create_dataset(name, data=_exported(model, name, entry, i, Path(shown_as)))
    with reported_as(shown_as):
        Path(target).write_bytes(image.getbuffer())


def save_options(options: BiLMOptions, path: PathLike) -> None:
    """Write ``options`` as ``options.json`` (atomically)."""
    write_json_atomically(path, options.to_json())


def options_text(options: BiLMOptions) -> str:
    """``options.json``'s text, as :func:`save_options` writes it."""
    return json.dumps(options.to_json(), indent=2) + "\n"


def load_model(options_path: PathLike, weights_path: PathLike) -> BiLM:
    """Build a :class:`BiLM` from ``options.json`` + HDF5 weights, in eval mode.

    The options are checked against the schema and the weight file against the options before
    anything is built, so a bad pair fails fast with :class:`WeightFileError`.
    """
    from .model import BiLM

    options = read_options(options_path)
    path = Path(weights_path)
    with _checked_file(path, options) as datasets:
        model = BiLM(options)
        _read_into(model, datasets, path)
    return model.eval()


def check_model_files(options_path: PathLike, weights_path: PathLike) -> BiLMOptions:
    """Every check :func:`load_model` makes (the schema, the file against the options, finite values), nothing built.

    Reads one dataset at a time (memory: the largest one); raises :class:`WeightFileError` as loading would.
    """
    options = read_options(options_path)
    path = Path(weights_path)
    with _checked_file(path, options) as datasets:
        for name, _, _ in _expected(options):
            _read_finite(datasets[name], name, path)
    return options


def save_model(model: BiLM, directory: PathLike, weights_name: str = WEIGHTS) -> Path:
    """Write ``options.json`` and the HDF5 weights into ``directory`` as one set (:func:`~.files.atomic_paths`: a
    failure leaves the folder's previous pair whole); returns the directory."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    with atomic_paths(directory / weights_name, directory / OPTIONS) as (weights, options):
        write_model_files(model, options, weights, directory / weights_name)
    return directory


def write_model_files(model: BiLM, options_tmp: Path, weights_tmp: Path, weights_path: Path) -> None:
    """The weight file and options.json of ``model`` at two temporary paths (of :func:`~.files.atomic_paths`)."""
    write_weights_file(model, weights_tmp, shown_as=weights_path)
    with reported_as(weights_path.with_name(OPTIONS)):
        options_tmp.write_text(options_text(model.options), encoding="utf-8")
