"""What a training run writes into its output directory, each file whole or not at all.

The exported model (``options.json``, ``weights.hdf5``, ``softmax.safetensors``), ``metrics.json``
and ``checkpoint.safetensors``. Every file is written to a temporary name beside it and renamed
into place, so a crash or a full disk leaves the previous version whole.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..bilm.files import write_text_atomically
from ..bilm.weights import save_model
from ..model_files import METRICS
from .config import TrainConfig
from .storage import CHECKPOINT, SOFTMAX, save_checkpoint, save_softmax

if TYPE_CHECKING:  # pragma: no cover
    from .network import LanguageModel


def export_model(model: LanguageModel, directory: Path) -> None:
    """Write options.json, weights.hdf5 and softmax.safetensors for ``model``."""
    save_model(model.to_bilm(), directory)
    save_softmax(model.softmax, directory / SOFTMAX)


def write_metrics(directory: Path, metrics: dict[str, Any]) -> None:
    """Write ``metrics.json`` (indented JSON)."""
    write_text_atomically(directory / METRICS, json.dumps(jsonable(metrics), indent=2) + "\n")


def write_checkpoint(
    directory: Path,
    config: TrainConfig,
    vocab: list[str],
    state: dict[str, Any],
    metrics: dict[str, Any],
    best_valid: float,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
) -> None:
    """Write checkpoint.safetensors (model, optimizer, RNG and position; no pickle), replacing the last one."""
    info = {
        "config": jsonable(asdict(config)),
        "vocab": vocab,
        "state": state,
        "metrics": jsonable(metrics),
        "best_valid": None if math.isinf(best_valid) else best_valid,
    }
    save_checkpoint(directory / CHECKPOINT, model.state_dict(), optimizer.state_dict(), torch.get_rng_state(), info)


def jsonable(value: Any) -> Any:
    """``value`` with tuples as lists, paths as strings and every dict key a string."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


__all__ = ["export_model", "jsonable", "write_checkpoint", "write_metrics"]
