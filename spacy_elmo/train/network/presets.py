"""Named architectures in the ``options.json`` vocabulary (``lstm`` + ``char_cnn`` sections)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Union

from ...bilm.options import BiLMOptions
from ...bilm.weights import WeightFileError, options_from_dict
from ...groundwork.excerpt import excerpt
from ...groundwork.schema_check import read_json_file

PRESETS: dict[str, dict[str, Any]] = {
    # a few thousand parameters: trains on a few hundred lines in seconds (tests, smoke runs)
    "tiny": {
        "lstm": {
            "dim": 64,
            "projection_dim": 32,
            "n_layers": 2,
            "use_skip_connections": True,
            "cell_clip": None,
            "proj_clip": None,
        },
        "char_cnn": {
            "embedding": {"dim": 8},
            "filters": [[1, 16], [2, 16], [3, 32], [4, 32]],
            "n_highway": 1,
            "n_characters": 262,
            "max_characters_per_token": 50,
            "activation": "relu",
        },
    },
    # the bundled default models, v1 and v2 (3.0M parameters; how they were trained: models/default*/README.md)
    "small": {
        "lstm": {
            "dim": 512,
            "projection_dim": 128,
            "n_layers": 2,
            "use_skip_connections": True,
            "cell_clip": None,
            "proj_clip": None,
        },
        "char_cnn": {
            "embedding": {"dim": 16},
            "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 128], [6, 128]],
            "n_highway": 1,
            "n_characters": 262,
            "max_characters_per_token": 50,
            "activation": "relu",
        },
    },
    # the published "original" ELMo architecture (93.6M parameters), for machines with a GPU
    "original": {
        "lstm": {
            "dim": 4096,
            "projection_dim": 512,
            "n_layers": 2,
            "use_skip_connections": True,
            "cell_clip": 3,
            "proj_clip": 3,
        },
        "char_cnn": {
            "embedding": {"dim": 16},
            "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
            "n_highway": 2,
            "n_characters": 262,
            "max_characters_per_token": 50,
            "activation": "relu",
        },
    },
}


def architecture(name_or_path: Union[str, Path]) -> dict[str, Any]:
    """The options dictionary of a preset name, or of a JSON file in the ``options.json`` vocabulary."""
    if str(name_or_path) in PRESETS:
        return copy.deepcopy(PRESETS[str(name_or_path)])
    path = Path(name_or_path)
    try:
        is_file = path.is_file()
    except OSError:  # a name this system cannot hold as a path (too long)
        is_file = False
    if not is_file:
        raise ValueError(
            f"unknown architecture {excerpt(str(name_or_path))}: expected one of {sorted(PRESETS)} or a JSON file"
        )
    raw = read_json_file(path, None, "correct the architecture file", WeightFileError)  # its schema: weights.py's
    options_from_dict(raw, source=str(path))  # validate now, with the file's name in the error
    return raw


def build_options(name_or_path: Union[str, Path]) -> BiLMOptions:
    """Validated :class:`BiLMOptions` for a preset name or an options JSON file."""
    return options_from_dict(architecture(name_or_path), source=str(name_or_path))
