"""The trainer's files without pickle: tensors in safetensors, everything else as JSON in the same file.

``checkpoint.safetensors`` (for ``--resume``)
    tensors ``model.<name>`` (the model's state dict), ``optimizer.<param index>.<key>`` (e.g. Adam's
    ``exp_avg``, ``exp_avg_sq`` and ``step``) and ``rng.torch`` (torch's CPU generator state);
    header metadata ``format`` = ``spacy-elmo checkpoint``, ``version`` = ``1`` and ``json``: the
    config, vocabulary, position in the data, metrics, best score and the optimizer's param groups
    and non-tensor state.
``softmax.safetensors`` (ships with a trained model)
    the adaptive softmax's float32 state dict; header metadata ``format`` = ``spacy-elmo softmax``,
    ``version`` = ``1`` and ``json``: ``n_classes``, ``cutoffs``, ``div_value`` and ``in_features``.

A checkpoint or softmax file may come from anywhere, and unpickling a file can run any code, so these
files are never unpickled; the ``.pt`` (torch.save) files of older versions are refused by name.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel
from safetensors import SafetensorError, safe_open  # type: ignore[attr-defined,unused-ignore]  # not in 0.4's stubs
from safetensors.torch import save_file

from ...bilm.file_formats import CheckpointHeader, SoftmaxHeader
from ...bilm.weights import WeightFileError
from ...groundwork.atomic_write import atomic_path
from ...groundwork.file_names import CHECKPOINT, SOFTMAX, PathLike
from ...groundwork.schema_check import check_json_text

CHECKPOINT_KIND = "spacy-elmo checkpoint"
SOFTMAX_KIND = "spacy-elmo softmax"
VERSION = "1"
SOFTMAX_ADVICE = f"the model's softmax is damaged: train the model again, or restore its {SOFTMAX} from a copy"
CHECKPOINT_ADVICE = f"the checkpoint is damaged: train again without --resume, or restore {CHECKPOINT} from a copy"


class TrainingFileError(WeightFileError):
    """A checkpoint or softmax file that is unreadable, legacy (pickle) or not what it should be; names the file."""


@dataclass
class Checkpoint:
    """What ``checkpoint.safetensors`` holds: model and optimizer state, torch's RNG state and the JSON part."""

    model: dict[str, torch.Tensor]
    optimizer: dict[str, Any]  # a torch optimizer state dict
    rng: torch.Tensor
    info: dict[str, Any]  # config, vocab, state, metrics, best_valid


@dataclass
class SoftmaxFile:
    """What ``softmax.safetensors`` holds: the adaptive softmax's state dict and how to rebuild the module."""

    state_dict: dict[str, torch.Tensor]
    n_classes: int
    cutoffs: list[int]
    div_value: float
    in_features: int

    def check_fits(self, path: PathLike, vocab_size: int, in_features: int) -> None:
        """Refuse (a TrainingFileError naming ``path``) a softmax of another vocabulary size or input width than
        the model's, before a module is built from its settings."""
        for field, saved, wanted, what in (
            ("n_classes", self.n_classes, vocab_size, "words in the vocabulary"),
            ("in_features", self.in_features, in_features, "the biLM's projection_dim"),
        ):
            if saved != wanted:
                raise TrainingFileError(
                    f"{path}: {field}: {saved}, where the model has {wanted} ({what}): {SOFTMAX_ADVICE}"
                )


# -- generic: tensors + a JSON header ----------------------------------------------------------


def write_tensor_file(path: Path, tensors: Mapping[str, torch.Tensor], kind: str, info: Mapping[str, Any]) -> None:
    """Write ``tensors`` and the JSON ``info`` to ``path`` atomically (a crash leaves the old file whole; a full disk
    too, and is a :class:`~spacy_elmo.groundwork.atomic_write.WriteFailedError` naming ``path``)."""
    metadata = {"format": kind, "version": VERSION, "json": json.dumps(info)}
    with atomic_path(path) as tmp:
        tmp.touch()  # the mode the umask gives any new file: safetensors itself writes 0600
        mode = stat.S_IMODE(tmp.stat().st_mode)
        try:
            save_file(_standalone(tensors), str(tmp), metadata=metadata)
        except SafetensorError as err:
            raise _os_error(err) from err
        os.chmod(tmp, mode)


def _os_error(err: SafetensorError) -> Exception:
    """The OSError behind a failed safetensors write (its Rust I/O error says "(os error N)", or in safetensors 0.4
    "IoError(Os { code: N, ...})"), so a full disk is reported as every other write's; ``err`` itself when it was not
    the operating system's."""
    found = re.search(r"\(os error (\d+)\)|\bOs \{ code: (\d+)", str(err))
    if found is None:
        return err
    number = int(found.group(1) or found.group(2))
    return OSError(number, os.strerror(number))


def read_tensor_file(
    path: Path, kind: str, schema: type[BaseModel], advice: str
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The tensors and JSON info of a file written by :func:`write_tensor_file`, the info checked against ``schema``
    (:mod:`~spacy_elmo.bilm.file_formats`); one clear error otherwise, naming the file, the field and ``advice``."""
    try:
        with safe_open(str(path), framework="pt") as handle:  # type: ignore[attr-defined,unused-ignore]  # 0.4's stubs
            metadata = handle.metadata() or {}
            tensors = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118 (safe_open is not iterable)
    except (SafetensorError, OSError) as err:
        if _looks_pickled(path):
            raise TrainingFileError(
                f"{path} is a pickle (torch.save) file, not a {kind} file: spacy-elmo never unpickles files "
                f"(that can run any code)"
            ) from err
        raise TrainingFileError(f"{path} is not a readable {kind} file (empty, truncated or corrupt: {err})") from err
    if metadata.get("format") != kind:
        raise TrainingFileError(f"{path} is not a {kind} file (its header says format={metadata.get('format')!r})")
    if metadata.get("version") != VERSION:
        version = metadata.get("version")
        raise TrainingFileError(f"{path} is a {kind} file of version {version!r}; this spacy-elmo reads {VERSION}")
    if "json" not in metadata:
        raise TrainingFileError(f"{path} has no JSON part in its header: {advice}")
    info: dict[str, Any] = check_json_text(metadata["json"], path, schema, advice, TrainingFileError)
    return tensors, info


def _standalone(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """CPU, contiguous tensors that share no memory (what safetensors requires); copies only where needed."""
    seen = set()
    result = {}
    for name, tensor in tensors.items():
        tensor = tensor.detach().cpu()
        if not tensor.is_contiguous() or (tensor.numel() and tensor.untyped_storage().data_ptr() in seen):
            tensor = tensor.clone(memory_format=torch.contiguous_format)
        seen.add(tensor.untyped_storage().data_ptr())
        result[name] = tensor
    return result


def _looks_pickled(path: Path) -> bool:
    """Whether ``path`` (not a valid safetensors file) starts like a torch.save zip or a protocol-2+ pickle."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(4)
    except OSError:
        return False  # safe_open reports it
    return head.startswith(b"PK\x03\x04") or head[:1] == b"\x80"


def require_file(directory: Path, name: str, legacy_name: str, what: str, context: str = "") -> Path:
    """``directory / name``; a missing one is a FileNotFoundError, a legacy pickle in its place a TrainingFileError.

    ``context`` (e.g. ``"--resume: "``) starts either message.
    """
    path = directory / name
    if path.is_file():
        return path
    legacy = directory / legacy_name
    if legacy.is_file():
        raise TrainingFileError(
            f"{context}{legacy} is {what} in the pickle format of older spacy-elmo versions, which is never loaded "
            f"(unpickling a file can run any code); {name} is needed instead"
        )
    raise FileNotFoundError(f"{context}no {name} in {directory}")


# -- checkpoints -----------------------------------------------------------------------------


def save_checkpoint(
    path: Path,
    model: Mapping[str, torch.Tensor],
    optimizer: Mapping[str, Any],
    rng: torch.Tensor,
    info: Mapping[str, Any],
) -> None:
    """Write a training checkpoint: tensors exactly as they are (dtype and bits), the rest as JSON."""
    tensors = {f"model.{name}": value for name, value in model.items()}
    optimizer_json: dict[str, Any] = {"param_groups": optimizer["param_groups"], "state": {}}
    for index, entry in optimizer["state"].items():
        scalars = optimizer_json["state"].setdefault(str(index), {})
        for key, value in entry.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optimizer.{index}.{key}"] = value
            else:
                scalars[key] = value
    tensors["rng.torch"] = rng
    write_tensor_file(path, tensors, CHECKPOINT_KIND, {**info, "optimizer": optimizer_json})


def load_checkpoint(path: Path) -> Checkpoint:
    """Read a checkpoint written by :func:`save_checkpoint` (never unpickles); TrainingFileError if it is not one."""
    tensors, info = read_tensor_file(path, CHECKPOINT_KIND, CheckpointHeader, CHECKPOINT_ADVICE)
    if "rng.torch" not in tensors:
        raise TrainingFileError(f"{path} is not a complete {CHECKPOINT_KIND}: it lacks rng.torch: {CHECKPOINT_ADVICE}")
    model = {name[len("model.") :]: value for name, value in tensors.items() if name.startswith("model.")}
    try:
        optimizer = _optimizer_state(info.pop("optimizer"), tensors)
    except (AttributeError, KeyError, TypeError, ValueError) as err:
        raise TrainingFileError(f"{path} holds a malformed optimizer state ({err})") from err
    return Checkpoint(model=model, optimizer=optimizer, rng=tensors["rng.torch"], info=info)


def _optimizer_state(saved: dict[str, Any], tensors: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    """A torch optimizer state dict from the JSON part and the ``optimizer.<index>.<key>`` tensors."""
    state: dict[int, dict[str, Any]] = {int(index): dict(scalars) for index, scalars in saved["state"].items()}
    for name, value in tensors.items():
        if name.startswith("optimizer."):
            index, key = name[len("optimizer.") :].split(".", 1)
            state.setdefault(int(index), {})[key] = value
    # JSON turned tuples (Adam's betas) into lists; "params" is the one list a param group holds
    groups = [
        {k: tuple(v) if isinstance(v, list) and k != "params" else v for k, v in g.items()}
        for g in saved["param_groups"]
    ]
    return {"state": state, "param_groups": groups}


# -- the adaptive softmax --------------------------------------------------------------------


def save_softmax(softmax: torch.nn.AdaptiveLogSoftmaxWithLoss, path: Path) -> None:
    """Write the output layer as a small float32 state dict plus what is needed to rebuild it."""
    state_dict = {k: v.detach().float().cpu() for k, v in softmax.state_dict().items()}
    info = {
        "n_classes": softmax.n_classes,
        "cutoffs": [int(c) for c in softmax.cutoffs[:-1]],
        "div_value": float(softmax.div_value),
        "in_features": softmax.in_features,
    }
    write_tensor_file(path, state_dict, SOFTMAX_KIND, info)


def load_softmax(path: Path) -> SoftmaxFile:
    """Read ``softmax.safetensors`` (never unpickles); TrainingFileError if it is not one."""
    tensors, info = read_tensor_file(path, SOFTMAX_KIND, SoftmaxHeader, SOFTMAX_ADVICE)
    return SoftmaxFile(
        state_dict=tensors,
        n_classes=info["n_classes"],
        cutoffs=list(info["cutoffs"]),
        div_value=float(info["div_value"]),
        in_features=info["in_features"],
    )


def load_softmax_into(softmax: torch.nn.AdaptiveLogSoftmaxWithLoss, saved: SoftmaxFile, path: PathLike) -> None:
    """Copy saved softmax weights into ``softmax``; a shape or name mismatch is a TrainingFileError naming ``path``."""
    try:
        softmax.load_state_dict(saved.state_dict)
    except RuntimeError as err:
        raise TrainingFileError(f"{path} does not fit the model's softmax: {err}") from err


__all__ = [
    "CHECKPOINT",
    "SOFTMAX",
    "Checkpoint",
    "SoftmaxFile",
    "TrainingFileError",
    "load_checkpoint",
    "load_softmax",
    "save_checkpoint",
    "save_softmax",
]
