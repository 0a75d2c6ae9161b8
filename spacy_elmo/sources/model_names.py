"""What a model string names before anything is read or downloaded (the bundled default, a bundled version's name, a
published name, a URL, or a path here), the early checks that read and download nothing, and the one message for a
model string that names nothing.

Torch-free, so the command line checks ``train --init-from`` before torch is imported; :mod:`.model_paths` turns
the same strings into files and says a missing model with the same error (:func:`not_found`).
"""

from __future__ import annotations

import difflib
import errno
import os
from pathlib import Path
from typing import Optional

from ..bilm.weights import WeightFileError
from ..groundwork.excerpt import excerpt
from ..groundwork.file_names import PathLike
from .bundled_versions import DEFAULT_DIR, is_version_name, version_names
from .fetch import is_archive, is_url
from .published import PUBLISHED, published_model


def is_default(model: Optional[PathLike]) -> bool:
    """Whether ``model`` names the bundled default biLM."""
    if model is None or str(model) == "default":
        return True
    if is_url(str(model)):
        return False
    try:
        return Path(model).expanduser().resolve() == DEFAULT_DIR.resolve()
    except OSError:
        return False


def require_model(model: PathLike) -> None:
    """Fail now, reading and downloading nothing, when ``model`` names nothing: neither a bundled model, a published
    name nor a URL, and no path here (:func:`not_found`: the error loading it would raise). A path that exists is
    checked when it loads."""
    text = os.fspath(model)
    if is_default(model) or is_url(text) or is_version_name(text) or published_model(text) is not None:
        return
    if not local_path(text).exists():
        raise not_found(text)


def local_path(text: str) -> Path:
    """``text`` as a local path (``~`` expanded), refused with a ``WeightFileError`` when this system cannot hold a
    path of that name (a name too long for a folder entry or a path: ``ENAMETOOLONG``), rather than the ``OSError``
    the first look at it would raise: the one look every route from a model string to a local path takes."""
    path = Path(text).expanduser()
    try:
        os.stat(path)
    except OSError as err:
        if err.errno == errno.ENAMETOOLONG:
            raise WeightFileError(
                f"ELMo model {excerpt(text)} not found: too long to be a path on this system, and no published model "
                "has that name; `spacy-elmo models` lists the published models"
            ) from None
    return path


def not_found(text: str) -> WeightFileError:
    """The error for a model string that names nothing here: a bare word as an unknown name (with the close names
    it may be a typo of), anything else as a missing folder."""
    path = Path(text).expanduser()
    if _is_bare_name(text):
        return WeightFileError(_unknown_name_message(text, path.absolute()))
    return WeightFileError(f"ELMo model directory not found: {excerpt(str(path))}")


def check_model_name(model: Optional[PathLike]) -> None:
    """Fail now, reading and downloading nothing, on a mistyped model name: a bare word that is neither a path
    here nor a published name but close to one (``"orignal"``); ``WeightFileError`` says "did you mean ...?".

    For front ends that load their model later (the spaCy component loads it at the first doc). Anything
    else waits for the load: a bare word close to no name may be the relative folder a saved pipeline was
    made from (its own copy is what it loads), and paths, archives and URLs are checked when read.
    """
    if model is None or is_default(model) or is_url(os.fspath(model)) or is_version_name(os.fspath(model)):
        return
    text = os.fspath(model)
    if not _is_bare_name(text) or published_model(text) is not None or local_path(text).exists():
        return
    if _close_names(text):
        raise WeightFileError(_unknown_name_message(text, Path(text).expanduser().resolve()))


def _is_bare_name(text: str) -> bool:
    """Whether ``text`` reads as a model name rather than a path: no folder separator, no archive suffix."""
    return os.sep not in text and "/" not in text and not is_archive(text)


def _close_names(text: str) -> list[str]:
    """The published and bundled names ``text`` is a likely typo of, closest first (difflib, case-insensitive)."""
    names = {name.lower(): name for name in ("default", *version_names(), *PUBLISHED)}
    return [names[found] for found in difflib.get_close_matches(text.lower(), list(names), n=3, cutoff=0.75)]


def _unknown_name_message(text: str, path: Path) -> str:
    close = _close_names(text)
    suggestion = f"did you mean {' or '.join(repr(name) for name in close)}? " if close else ""
    return (
        f"ELMo model {excerpt(text)} not found: no published model has that name and there is no folder "
        f"{excerpt(str(path))}; {suggestion}`spacy-elmo models` lists the published models"
    )
