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

from ...bilm import manylangs_reader
from ...bilm.weights import write_model_files
from ...groundwork.atomic_write import atomic_paths, reported_as, write_text_atomically
from ...groundwork.file_names import LEGACY_CHECKPOINT, LEGACY_SOFTMAX, METRICS, OPTIONS, VOCAB, WEIGHTS
from ..config import TrainConfig
from ..output_folder.recorded_paths import recorded, recorded_argument, resolved_path, resumable_path
from ..output_folder.storage import CHECKPOINT, SOFTMAX, save_checkpoint, save_softmax

if TYPE_CHECKING:  # pragma: no cover
    from ..corpus.batching import Vocabulary
    from ..network.language_model import LanguageModel

# what makes a folder hold a model (or a run's model), besides its weight files (*.hdf5)
_MODEL_FILES = (
    OPTIONS,
    VOCAB,
    SOFTMAX,
    LEGACY_SOFTMAX,
    CHECKPOINT,
    LEGACY_CHECKPOINT,
    manylangs_reader.CONFIG,
    *manylangs_reader.STATE_FILES,
)


def model_files_in(directory: Path) -> list[str]:
    """The names of the model files ``directory`` holds (options, weights, softmax, checkpoint, either format)."""
    if not directory.is_dir():
        return []
    return sorted(p.name for p in directory.iterdir() if p.name in _MODEL_FILES or p.suffix == ".hdf5")


def refuse_another_model(directory: Path, overwrite: bool, resume_hint: bool = True) -> None:
    """Refuse, before anything is written, a folder that already holds a model, unless ``overwrite``.

    A new model written there would replace some of its files and leave others beside them (old weights
    under another name, its softmax, its checkpoint): a folder that loads neither model.
    """
    found = model_files_in(directory)
    if found and not overwrite:
        more = f" (and {len(found) - 3} more)" if len(found) > 3 else ""
        resume = ", continue its run with --resume" if resume_hint and CHECKPOINT in found else ""
        raise ValueError(
            f"{directory} already holds a model ({', '.join(found[:3])}{more}); write into a new folder{resume}, "
            "or pass --overwrite (Python: overwrite=True) to replace it"
        )


def remove_replaced_run(directory: Path) -> None:
    """With ``overwrite``, before training: the replaced run's checkpoint, which --resume would otherwise continue."""
    for name in (CHECKPOINT, LEGACY_CHECKPOINT):
        (directory / name).unlink(missing_ok=True)


def export_model(model: LanguageModel, directory: Path, vocab: Vocabulary) -> None:
    """Write options.json, weights.hdf5, softmax.safetensors and vocab.txt for ``model``, as one set.

    Every file is written beside its target first; only when all are written do they replace the
    folder's previous ones (:func:`~spacy_elmo.groundwork.atomic_write.atomic_paths`), so a full disk or an error
    leaves the previous model whole. Weight files of a replaced model under other names are removed
    afterwards, so the folder holds one model.
    """
    targets = [directory / name for name in (WEIGHTS, OPTIONS, SOFTMAX, VOCAB)]
    with atomic_paths(*targets) as (weights, options, softmax, words):
        write_model_files(model.to_bilm(), options, weights, directory / WEIGHTS)
        with reported_as(directory / SOFTMAX):
            save_softmax(model.softmax, softmax)
        with reported_as(directory / VOCAB):
            vocab.save(words)
    stale = [p for p in directory.glob("*.hdf5") if p.name != WEIGHTS]
    stale += [directory / name for name in (manylangs_reader.CONFIG, *manylangs_reader.STATE_FILES)]
    for path in stale:
        path.unlink(missing_ok=True)


def write_metrics(directory: Path, metrics: dict[str, Any]) -> None:
    """Write ``metrics.json`` (indented JSON), its paths as a shared folder may show them (:func:`~.recorded_paths.
    recorded`: relative to ``directory``, or names; never this machine's directories)."""
    write_text_atomically(directory / METRICS, json.dumps(recorded(jsonable(metrics), directory), indent=2) + "\n")


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
    """Write checkpoint.safetensors (model, optimizer, RNG and position; no pickle), replacing the last one.

    Its config keeps the training text as the way from ``directory`` to it (:func:`resumable_config`), its metrics
    as ``metrics.json`` records them."""
    info = {
        "config": resumable_config(config, directory),
        "vocab": vocab,
        "state": state,
        "metrics": recorded(jsonable(metrics), directory),
        "best_valid": None if math.isinf(best_valid) else best_valid,
    }
    save_checkpoint(directory / CHECKPOINT, model.state_dict(), optimizer.state_dict(), torch.get_rng_state(), info)


def resumable_config(config: TrainConfig, directory: Path) -> dict[str, Any]:
    """``config`` as a checkpoint in ``directory`` keeps it: the text files and prepared corpora ``--resume`` reads
    again as the way from ``directory`` to them (:func:`~.recorded_paths.resumable_path`; :func:`resumed_paths`
    reads them back), ``--init-from`` (read only when the run started) as a record names it."""
    saved = jsonable(asdict(config))
    for key in ("train", "valid"):
        saved[key] = [{**source, "path": resumable_path(source["path"], directory)} for source in saved[key]]
    saved["corpus"] = [resumable_path(folder, directory) for folder in saved["corpus"]]
    if saved["init_from"] is not None:
        saved["init_from"] = recorded_argument(saved["init_from"], directory)
    return saved


def resumed_paths(saved: dict[str, Any], directory: Path) -> dict[str, Any]:
    """A checkpoint's config (:func:`resumable_config`) with its text files and corpora from the root again."""
    resumed = dict(saved)
    for key in ("train", "valid"):
        resumed[key] = [{**source, "path": resolved_path(source["path"], directory)} for source in saved[key]]
    resumed["corpus"] = [resolved_path(folder, directory) for folder in saved.get("corpus", [])]
    if saved.get("init_from"):  # (an older checkpoint's from the root)
        resumed["init_from"] = recorded_argument(saved["init_from"], directory)
    return resumed


def jsonable(value: Any) -> Any:
    """``value`` with tuples as lists, paths as strings and every dict key a string."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


__all__ = [
    "export_model",
    "jsonable",
    "model_files_in",
    "refuse_another_model",
    "remove_replaced_run",
    "resumable_config",
    "resumed_paths",
    "write_checkpoint",
    "write_metrics",
]
