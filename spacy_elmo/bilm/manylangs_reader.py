"""Read an ELMoForManyLangs model directory, checked like an ELMo HDF5 model, without running its pickles.

The directory, as its trainer writes it::

    config.json          the training options; "config_path" names the architecture file
    <architecture>.json  "encoder" (LSTM) and "token_embedder" (char CNN, word embedding) sections
    char.dic, word.dic   "token<TAB>id" per line (a line with an id alone is the ideographic space; read by
                         .manylangs_tokens, torch-free)
    token_embedder.pkl   torch.save of the token embedder's state dict
    encoder.pkl          torch.save of the biLSTM's state dict

The architecture file is looked for as ELMoForManyLangs' ``Embedder`` does: ``config_path`` (relative
to the directory, or absolute), then its file name inside the directory, then the package's own
sample configs by name (published models name the authors' absolute paths; their architecture is
the sample one, repeated in :data:`SAMPLE_CONFIGS`).

The state files are read with ``torch.load(weights_only=True)``: tensors and plain containers only,
anything else (a pickle that would run code) is refused. Loading checks the architecture against
its schema, the dictionaries, and every tensor's name (both ways), shape, dtype and values against
the architecture before building the model; every problem is a :class:`~.weights.WeightFileError`
naming the file and the key or tensor.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, cast

import torch
from torch import nn

from ..groundwork.file_names import PathLike
from .lstm import ProjectedLSTMCell
from .manylangs import ManyLangsBiLM, ManyLangsConfig, ManyLangsHighway, ManyLangsTokenEncoder
from .manylangs_files import (  # noqa: F401 (the file names and is_model_dir re-exported)
    CHAR_DIC,
    CONFIG,
    ENCODER,
    STATE_FILES,
    TOKEN_EMBEDDER,
    WORD_DIC,
    is_model_dir,
)
from .manylangs_tokens import CHAR_ENTRIES, MAX_CHARACTERS_PER_TOKEN, WORD_ENTRIES, read_lexicon
from .weights import (
    _ACTIVATION,
    _CLIP,
    HIGHWAY_LAYERS,
    LSTM_LAYERS,
    MAX_FILTERS,
    MAX_PARAMETERS,
    MAX_WIDTH,
    WIDTH,
    WeightFileError,
    _int_between,
    _is_int,
    _json,
    _Option,
    _option_value,
    _refuse_non_finite,
    _Rule,
    parameter_count,
)

_SAMPLE = {
    "encoder": {"name": "elmo", "projection_dim": 512, "cell_clip": 3, "proj_clip": 3, "dim": 4096, "n_layers": 2},
    "token_embedder": {
        "name": "cnn",
        "activation": "relu",
        "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
        "n_highway": 2,
        "word_dim": 100,
        "char_dim": 50,
        "max_characters_per_token": 50,
    },
}
# the architecture files shipped inside the elmoformanylangs package (both hold the same values)
SAMPLE_CONFIGS: dict[str, dict[str, Any]] = {
    "cnn_50_100_512_4096_sample.json": _SAMPLE,
    "cnn_0_100_512_4096_sample.json": _SAMPLE,
}


# -- the architecture ------------------------------------------------------------------------


def architecture_file(directory: Path) -> Optional[Path]:
    """The architecture file ``config.json`` names (None: one of :data:`SAMPLE_CONFIGS`, by name)."""
    raw = _read_json(directory / CONFIG)
    named = raw.get("config_path") if isinstance(raw, dict) else None
    if not isinstance(named, str) or not named:
        raise WeightFileError(
            f'{directory / CONFIG}: expected an object with "config_path" (the architecture file), not {_json(raw)}'
        )
    tried = [directory / named, directory / Path(named).name]
    for candidate in tried:
        if candidate.is_file():
            return candidate
    if Path(named).name in SAMPLE_CONFIGS:
        return None
    raise WeightFileError(
        f"{directory / CONFIG}: config_path {named!r} not found (tried {', '.join(str(p) for p in tried)}); "
        "put the architecture file in the model directory"
    )


def read_config(directory: Path) -> ManyLangsConfig:
    """The model's architecture, each value checked by :data:`_KINDS` and :data:`_SCHEMA`."""
    path = architecture_file(directory)
    if path is None:
        named = Path(_read_json(directory / CONFIG)["config_path"]).name
        return config_from_dict(SAMPLE_CONFIGS[named], source=f"{directory / CONFIG} (sample config {named})")
    return config_from_dict(_read_json(path), source=str(path))


def _is_filter(value: Any) -> bool:
    """A ``[width, count]`` pair of positive ints, at most :data:`.weights.MAX_WIDTH` filters (the width is checked
    against the token length once that is read)."""
    return (
        isinstance(value, list)
        and len(value) == 2
        and all(_is_int(x) and x >= 1 for x in value)
        and value[1] <= MAX_WIDTH
    )


# the sizes bounded as options.json's are (.weights: MAX_WIDTH, MAX_FILTERS, MAX_PARAMETERS), before anything is built
_FILTERS = _Rule(
    lambda value: isinstance(value, list) and 0 < len(value) <= MAX_FILTERS and all(_is_filter(f) for f in value),
    f"a list of 1 to {MAX_FILTERS} [width, count] pairs of ints >= 1 (count <= {MAX_WIDTH})",
)


def _named(name: str) -> _Rule:
    return _Rule(lambda value: value == name, f'"{name}" (the only kind spacy-elmo runs)')


_CNN = _Rule(
    lambda value: isinstance(value, str) and value.lower() == "cnn", '"cnn" (the only token embedder spacy-elmo runs)'
)
_KINDS = (_Option("encoder.name", "encoder", _named("elmo")), _Option("token_embedder.name", "token_embedder", _CNN))
_SCHEMA: tuple[_Option, ...] = (
    _Option("token_embedder.filters", "filters", _FILTERS),
    _Option(
        "token_embedder.char_dim",
        "char_dim",
        _Rule(
            lambda v: _is_int(v) and 1 <= v <= MAX_WIDTH,
            f"an int from 1 to {MAX_WIDTH} (word-only models are not supported)",
        ),
    ),
    _Option("token_embedder.word_dim", "word_dim", _int_between(0, MAX_WIDTH)),
    _Option("token_embedder.n_highway", "n_highway", HIGHWAY_LAYERS),
    _Option("token_embedder.activation", "activation", _ACTIVATION),
    _Option("token_embedder.max_characters_per_token", "max_chars", _int_between(3, MAX_CHARACTERS_PER_TOKEN)),
    _Option("encoder.projection_dim", "projection_dim", WIDTH),
    _Option("encoder.dim", "cell_dim", WIDTH),
    _Option("encoder.n_layers", "n_layers", LSTM_LAYERS),
    _Option("encoder.cell_clip", "cell_clip", _CLIP),
    _Option("encoder.proj_clip", "proj_clip", _CLIP),
)


def config_from_dict(raw: Any, source: str = "config") -> ManyLangsConfig:
    """Build :class:`ManyLangsConfig` from an architecture dictionary; unknown keys (training settings) are ignored."""
    if (
        not isinstance(raw, dict)
        or not isinstance(raw.get("encoder"), dict)
        or not isinstance(raw.get("token_embedder"), dict)
    ):
        raise WeightFileError(f"{source}: expected an object with 'encoder' and 'token_embedder' sections")
    for kind in _KINDS:  # the encoder and token embedder kinds spacy-elmo runs
        _option_value(raw, kind, source)
    values = {option.field: _option_value(raw, option, source) for option in _SCHEMA}
    values["filters"] = tuple((width, count) for width, count in values["filters"])
    widest = max(width for width, _ in values["filters"])
    if widest > values["max_chars"]:
        raise WeightFileError(
            f"{source}: a filter of width {widest} is wider than token_embedder.max_characters_per_token "
            f"({values['max_chars']})"
        )
    for clip in ("cell_clip", "proj_clip"):
        values[clip] = None if values[clip] is None else float(values[clip])
    config = ManyLangsConfig(**values)
    # the biLM's parameters less the dictionaries' rows (their files bound those), the word vectors' projection added
    parameters = parameter_count(config.bilm_options(n_chars=1)) + config.word_dim * config.projection_dim
    if parameters > MAX_PARAMETERS:
        raise WeightFileError(
            f"{source}: the architecture has {parameters:,} parameters, more than the {MAX_PARAMETERS:,} a biLM may "
            "have here: make encoder.dim, encoder.projection_dim or token_embedder.filters smaller"
        )
    return config


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise WeightFileError(f"file not found: {path}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise WeightFileError(f"{path} is not valid JSON: {err}") from err


# -- the state files -------------------------------------------------------------------------

Expected = dict[str, tuple[tuple[int, ...], str]]  # tensor name -> (shape, what the shape comes from)


def read_state(path: Path) -> dict[str, torch.Tensor]:
    """A torch-saved state dict, unpickled with ``weights_only=True`` (tensors only: nothing runs)."""
    if not path.is_file():
        raise WeightFileError(f"state file not found: {path}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises UnpicklingError, RuntimeError, EOFError, ... for bad files
        if type(err).__name__ == "UnpicklingError":
            raise WeightFileError(
                f"state file {path} holds more than tensors and was refused: spacy-elmo reads torch files with "
                f"weights_only=True and never runs their code ({str(err).splitlines()[-1][:200]})"
            ) from err
        raise WeightFileError(
            f"state file {path} is not a readable torch.save file (truncated or corrupt?): {err}"
        ) from err
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise WeightFileError(
            f"state file {path}: expected a state dict (tensor names -> tensors), not {type(state).__name__}"
        )
    return state


def token_embedder_layout(config: ManyLangsConfig, n_words: int, n_chars: int) -> Expected:
    """Every tensor of ``token_embedder.pkl`` with its shape (torch layouts: ``Linear`` weights are ``(out, in)``)."""
    f, te = config.n_filters, "token_embedder"
    layout: Expected = {}
    if config.word_dim:
        layout["word_emb_layer.embedding.weight"] = ((n_words, config.word_dim), f"{WORD_DIC}, {te}.word_dim")
    layout["char_emb_layer.embedding.weight"] = ((n_chars, config.char_dim), f"{CHAR_DIC}, {te}.char_dim")
    for i, (width, count) in enumerate(config.filters):
        layout[f"convolutions.{i}.weight"] = ((count, config.char_dim, width), f"{te}.filters, {te}.char_dim")
        layout[f"convolutions.{i}.bias"] = ((count,), f"{te}.filters")
    for k in range(config.n_highway):
        layout[f"highways._layers.{k}.weight"] = ((2 * f, f), f"{te}.filters")
        layout[f"highways._layers.{k}.bias"] = ((2 * f,), f"{te}.filters")
    layout["projection.weight"] = (
        (config.projection_dim, config.word_dim + f),
        f"encoder.projection_dim, {te}.word_dim, {te}.filters",
    )
    layout["projection.bias"] = ((config.projection_dim,), "encoder.projection_dim")
    return layout


def encoder_layout(config: ManyLangsConfig) -> Expected:
    """Every tensor of ``encoder.pkl`` (AllenNLP's ``LstmCellWithProjection`` per layer and direction)."""
    p, c, sizes = config.projection_dim, config.cell_dim, "encoder.projection_dim, encoder.dim"
    layout: Expected = {}
    for layer in range(config.n_layers):
        for direction in ("forward", "backward"):
            prefix = f"{direction}_layer_{layer}"
            layout[f"{prefix}.input_linearity.weight"] = ((4 * c, p), sizes)
            layout[f"{prefix}.state_linearity.weight"] = ((4 * c, p), sizes)
            layout[f"{prefix}.state_linearity.bias"] = ((4 * c,), "encoder.dim")
            layout[f"{prefix}.state_projection.weight"] = ((p, c), sizes)
    return layout


def check_state(state: dict[str, torch.Tensor], expected: Expected, path: Path) -> None:
    """Names (both ways), shapes, float dtype and finite values of a state dict against its layout."""
    for name, (shape, shaped_by) in expected.items():
        if name not in state:
            raise WeightFileError(f"state file {path}: missing tensor {name!r} (expected shape {shape})")
        tensor = state[name]
        if tensor.layout != torch.strided or tensor.is_nested:  # sparse, nested: no shape or values to check
            kind = "nested" if tensor.is_nested else str(tensor.layout).replace("torch.", "")
            raise WeightFileError(
                f"state file {path}: tensor {name!r} is a {kind} tensor, expected a dense one (torch.strided)"
            )
        if not tensor.is_floating_point():
            raise WeightFileError(
                f"state file {path}: tensor {name!r} holds {tensor.dtype}, expected floating-point numbers"
            )
        if tuple(tensor.shape) != shape:
            raise WeightFileError(
                f"state file {path}: tensor {name!r} has shape {tuple(tensor.shape)}, expected {shape} from the "
                f"config ({shaped_by})"
            )
        _refuse_non_finite(tensor.detach().float().numpy(), f"state file {path}: tensor {name!r}")
    extra = sorted(set(state) - set(expected))
    if extra:
        more = f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""
        raise WeightFileError(
            f"state file {path}: unexpected tensor {extra[0]!r}{more}: not part of the model the config describes"
        )


# -- the model -------------------------------------------------------------------------------


def model_files(directory: PathLike) -> dict[str, Path]:
    """The files that make up the model in ``directory``, by the name each has there (a copy needs them all)."""
    directory = Path(directory)
    files = {
        name: directory / name for name in (CONFIG, CHAR_DIC, WORD_DIC, *STATE_FILES) if (directory / name).is_file()
    }
    architecture = architecture_file(directory)
    if architecture is not None:
        files[architecture.name] = architecture
    return files


@dataclass(frozen=True)
class CheckedFiles:
    """An ELMoForManyLangs model directory's contents, every check of :func:`load_model` passed."""

    config: ManyLangsConfig
    chars: dict[str, int]
    words: Optional[dict[str, int]]
    embedder: dict[str, torch.Tensor]
    encoder: dict[str, torch.Tensor]


def check_model_files(directory: PathLike) -> CheckedFiles:
    """Read and check the architecture, the dictionaries and both state files (nothing built); what loading checks."""
    directory = Path(directory)
    config = read_config(directory)
    chars = read_lexicon(directory / CHAR_DIC, CHAR_ENTRIES)
    words = read_lexicon(directory / WORD_DIC, WORD_ENTRIES) if config.word_dim else None
    embedder = read_state(directory / TOKEN_EMBEDDER)
    check_state(embedder, token_embedder_layout(config, len(words or ()), len(chars)), directory / TOKEN_EMBEDDER)
    encoder = read_state(directory / ENCODER)
    check_state(encoder, encoder_layout(config), directory / ENCODER)
    return CheckedFiles(config, chars, words, embedder, encoder)


def load_model(directory: PathLike) -> ManyLangsBiLM:
    """Build a :class:`ManyLangsBiLM` from an ELMoForManyLangs model directory, in eval mode.

    The architecture, dictionaries and both state files are checked before anything is built
    (:func:`check_model_files`).
    """
    checked = check_model_files(directory)
    embedder, encoder = checked.embedder, checked.encoder
    model = ManyLangsBiLM(checked.config, checked.words, checked.chars)
    with torch.no_grad():
        _fill_token_encoder(model, embedder)
        _fill_lstm(model, encoder)
    return model.eval()


def _fill_token_encoder(model: ManyLangsBiLM, state: dict[str, torch.Tensor]) -> None:
    encoder, f = cast(ManyLangsTokenEncoder, model.token_encoder), model.config.n_filters
    if encoder.word_embed is not None:
        encoder.word_embed.weight.copy_(state["word_emb_layer.embedding.weight"])
    encoder.char_embed.weight.copy_(state["char_emb_layer.embedding.weight"])  # the padding char's row too
    for i, conv in enumerate(cast(Sequence[nn.Conv1d], encoder.convs)):
        conv.weight.copy_(state[f"convolutions.{i}.weight"])
        cast(torch.Tensor, conv.bias).copy_(state[f"convolutions.{i}.bias"])
    for k, highway in enumerate(cast(Sequence[ManyLangsHighway], encoder.highways)):
        weight, bias = state[f"highways._layers.{k}.weight"], state[f"highways._layers.{k}.bias"]
        highway.transform.weight.copy_(weight[:f])  # the first half is the transform, the second the gate
        highway.transform.bias.copy_(bias[:f])
        highway.carry.weight.copy_(weight[f:])
        highway.carry.bias.copy_(bias[f:])
    encoder.projection.weight.copy_(state["projection.weight"])
    encoder.projection.bias.copy_(state["projection.bias"])


def _fill_lstm(model: ManyLangsBiLM, state: dict[str, torch.Tensor]) -> None:
    """AllenNLP's cells into :class:`~.lstm.ProjectedLSTMCell`: gates (i, f, j, o) -> (i, j, f, o), weights
    transposed."""
    c = model.config.cell_dim
    blocks = [torch.arange(k * c, (k + 1) * c) for k in (0, 2, 1, 3)]
    order = torch.cat(blocks)
    for layer in range(model.n_layers):
        for direction, cells in (("forward", model.lstm.forward_layers), ("backward", model.lstm.backward_layers)):
            prefix, cell = f"{direction}_layer_{layer}", cast(Sequence[ProjectedLSTMCell], cells)[layer]
            cell.input_weight.copy_(state[f"{prefix}.input_linearity.weight"][order].t())
            cell.state_weight.copy_(state[f"{prefix}.state_linearity.weight"][order].t())
            cell.bias.copy_(state[f"{prefix}.state_linearity.bias"][order])
            cell.projection.copy_(state[f"{prefix}.state_projection.weight"].t())


def source_files(directory: PathLike) -> list[Path]:
    """The model's files in a fixed order (for fingerprints and cache keys)."""
    return [path for _, path in sorted(model_files(directory).items())]
