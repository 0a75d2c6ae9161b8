"""Registered, versioned model loaders that a ``config.cfg`` can name (``@misc = "spacy_elmo.ElmoBiLM.v1"``)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Tuple, Union

import torch
from spacy.util import registry

from ..backend import ElmoBackend, load_bilm
from ..model_files import is_default, is_remote, resolve_model_files


@dataclass(frozen=True)
class ElmoModelRef:
    """Where an ELMo model lives: a directory, ``"default"`` (the bundled model), a published name, an archive or URL.

    Nothing is read until :meth:`load`, so ``spacy.load`` of a saved pipeline never touches the
    original directory (the pipeline carries its own copy, or a reference for default/published models).
    """

    path: str = "default"

    @property
    def is_default(self) -> bool:
        """True for the bundled default model (saved pipelines store only a reference to it)."""
        return is_default(self.path)

    @property
    def is_remote(self) -> bool:
        """True for a published model name or a URL: saved pipelines store the reference, fetched on first use."""
        return is_remote(self.path)

    def files(self) -> Tuple[Path, Path]:
        """The resolved ``(options.json, weights)`` paths; ``WeightFileError`` names what is missing."""
        return resolve_model_files(self.path)

    def load(self, device: Union[None, str, torch.device] = None) -> ElmoBackend:
        """The shared :class:`ElmoBackend` for this model on ``device`` (loaded once per process)."""
        return load_bilm(self.path, device=device)


@registry.misc("spacy_elmo.ElmoBiLM.v1")
def elmo_bilm_v1(path: str = "default") -> ElmoModelRef:
    """The ELMo biLM ``path``: a directory (options.json + one .hdf5), ``"default"``, a published name, an archive or URL."""
    return ElmoModelRef(str(path))


def as_model_ref(model: Union[str, "ElmoModelRef", None]) -> ElmoModelRef:
    """Accept a model reference or a plain directory string / ``"default"`` (as in ``config={"model": ...}``)."""
    if isinstance(model, ElmoModelRef):
        return model
    if model is None:
        return ElmoModelRef()
    if isinstance(model, (str, Path)):
        return ElmoModelRef(str(model))
    raise TypeError(f"model={model!r}: expected a directory path, 'default' or spacy_elmo.ElmoBiLM.v1")


def optional_device(device: Optional[str]) -> Optional[str]:
    """Normalise the config's ``device`` (``None``/``""`` mean CPU)."""
    return None if device in (None, "") else str(device)
