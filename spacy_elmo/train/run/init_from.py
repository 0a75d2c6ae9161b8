"""Where a fine-tuning run (``--init-from``) starts: the biLM, and its vocabulary and softmax when it ships them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from ...bilm.model import BiLM
from ...bilm.weights import load_model
from ...groundwork.file_names import LEGACY_SOFTMAX, METRICS, VOCAB
from ...sources.model_paths import resolve_model_files
from ..corpus.batching import Vocabulary
from ..corpus.sentences import PathLike
from ..output_folder.stages import INIT_FROM_ADVICE, read_metrics
from ..output_folder.storage import SOFTMAX, SoftmaxFile, load_softmax, require_file


@dataclass
class InitialModel:
    """A model to fine-tune: the biLM, its directory and (both or neither) its vocabulary and softmax."""

    bilm: BiLM
    directory: Path
    vocab: Optional[Vocabulary] = None
    softmax: Optional[SoftmaxFile] = None

    @property
    def softmax_path(self) -> Path:
        return self.directory / SOFTMAX


def load_initial_model(model: PathLike) -> InitialModel:
    """The model named by ``--init-from`` (a directory, ``"default"``, a published name or URL)."""
    options_path, weights_path = resolve_model_files(model)
    directory = options_path.parent.absolute()  # (the run records it by name: recorded_paths)
    bilm = load_model(options_path, weights_path)
    if not (directory / VOCAB).is_file():
        return InitialModel(bilm, directory)
    try:
        path = require_file(directory, SOFTMAX, LEGACY_SOFTMAX, "the model's softmax")
    except FileNotFoundError:
        return InitialModel(bilm, directory)
    vocab, softmax = Vocabulary.load(directory / VOCAB), load_softmax(path)
    softmax.check_fits(path, len(vocab), bilm.options.projection_dim)
    return InitialModel(bilm, directory, vocab, softmax)


def previous_training(model: PathLike) -> dict[str, Any]:
    """How the model a fine-tuning run starts from was trained (from its metrics.json), kept as a chain."""
    directory = resolve_model_files(model)[0].parent
    path = directory / METRICS
    if not path.is_file():
        return {"model": str(directory)}
    metrics = read_metrics(path, INIT_FROM_ADVICE)
    best = metrics.get("best") or {}
    return {
        "model": str(directory),
        "command": metrics.get("command"),
        "steps": metrics.get("steps", best.get("step")),
        "words_seen": metrics.get("words_seen", best.get("words_seen")),
        "wall_time_s": metrics.get("wall_time_s"),
        "best": best,
        "init_from": metrics.get("init_from"),
    }


__all__ = ["InitialModel", "load_initial_model", "previous_training"]
