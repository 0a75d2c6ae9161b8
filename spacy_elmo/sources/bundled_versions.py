"""The bundled models by version name: each one's folder and files fingerprint, and which one ``"default"`` names.

Every model spacy-elmo bundles has a version name (``"default-v1"``) that keeps naming it after ``"default"``
moves on to a newer model. A spaCy pipeline saved with ``"default"`` and a fitted ``ElmoVectorizer`` record the
files fingerprint of the model they used; :func:`follow_saved` finds the bundled version that has it, so they
keep giving the vectors they were made with, and :func:`moved_on_advice` says what to do when no bundled version
has it any more.

Replacing the default is a change of files and of this table only: move the current default's files from
``models/default/`` to ``models/<its version name>/`` and point its row there, put the new model in
``models/default/``, add the new model's row (its fingerprint: ``model_files.fingerprint`` of its files, which
``tests/sources/test_bundled_versions.py`` checks) and name it in :data:`DEFAULT_VERSION`.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

logger = logging.getLogger(__name__)  # a child of the "spacy_elmo" logger

MODELS_DIR = Path(__file__).parents[1] / "models"
DEFAULT_NAME = "default"  # the name of whichever bundled version is the default
DEFAULT_DIR = MODELS_DIR / DEFAULT_NAME  # the folder of whichever bundled version is the default


@dataclass(frozen=True)
class BundledVersion:
    """One bundled model: its version name, its folder and the fingerprint of its files."""

    name: str
    directory: Path
    files_fingerprint: str  # model_files.fingerprint(options.json, weights) of the files in ``directory``
    summary: str  # what it is, in a few words (``spacy-elmo models``)


VERSIONS: dict[str, BundledVersion] = {
    version.name: version
    for version in (
        BundledVersion(
            name="default-v1",
            directory=MODELS_DIR / "default-v1",
            files_fingerprint="6d594a3816944538e32b637b1b584ce0",
            summary="the first bundled model: 2 x 512 cells / 128 proj, trained on WikiText-2 + four novels",
        ),
        BundledVersion(
            name="default-v2",
            directory=DEFAULT_DIR,
            files_fingerprint="64ae069baa68f5fe71490884378e3916",
            summary="2 x 512 cells / 128 proj, 103M words seen of Wikipedia, Simple English Wikipedia, Gutenberg",
        ),
    )
}
DEFAULT_VERSION = "default-v2"  # the version that "default" names: its files are in models/default/
# the model "default" named in every spacy-elmo up to 0.2.0, which saved no fingerprint with a pipeline saved
# before its first doc: such a save was made with this one
UNRECORDED_VERSION = "default-v1"


def default_version() -> BundledVersion:
    """The bundled version that ``"default"`` names."""
    return VERSIONS[DEFAULT_VERSION]


def bundled_version(name: str) -> Optional[BundledVersion]:
    """The version that ``name`` names (``"default"`` or a version name such as ``"default-v1"``), or ``None``."""
    if name == DEFAULT_NAME:
        return default_version()
    return VERSIONS.get(name)


def is_version_name(name: str) -> bool:
    """Whether ``name`` is a bundled version's own name (``"default-v1"``; not ``"default"``)."""
    return name in VERSIONS


def version_names() -> list[str]:
    """Every bundled version's own name."""
    return list(VERSIONS)


def version_in(directory: Path) -> Optional[str]:
    """The name of the bundled version whose folder ``directory`` is, or ``None``."""
    resolved = directory.resolve()
    return next((v.name for v in VERSIONS.values() if v.directory.resolve() == resolved), None)


def precision_fingerprint(files_fingerprint: str, precision: str) -> str:
    """The identity of the vectors a model's files give in ``precision`` ("float32", "int8", ...).

    float32's is the files' own fingerprint; another precision gives other vectors, so a hash of both.
    """
    if precision == "float32":
        return files_fingerprint
    return hashlib.sha256(f"{files_fingerprint}:torch.{precision}".encode()).hexdigest()[:32]


def version_with_fingerprint(fingerprint: str, precisions: Iterable[str] = ("float32",)) -> Optional[BundledVersion]:
    """The bundled version whose files (read in one of ``precisions``) have ``fingerprint``, or ``None``."""
    names = tuple(precisions)
    for version in VERSIONS.values():
        if any(precision_fingerprint(version.files_fingerprint, p) == fingerprint for p in names):
            return version
    return None


def saved_fingerprint(saved: dict[str, Any]) -> Optional[str]:
    """The fingerprint a saved reference to a bundled model recorded: its files', else its precision-specific one,
    else (saved by spacy-elmo 0.2.0 or earlier before its first doc: no fingerprint and no spacy-elmo version)
    that of :data:`UNRECORDED_VERSION`, the only model "default" named up to then."""
    recorded = saved.get("files_fingerprint") or saved.get("fingerprint")
    if recorded is None and "spacy_elmo_version" not in saved and saved.get("model", DEFAULT_NAME) == DEFAULT_NAME:
        return VERSIONS[UNRECORDED_VERSION].files_fingerprint
    return recorded


def follow_saved(
    name: str, fingerprint: Optional[str], what: str, precisions: Iterable[str] = ("float32",)
) -> Optional[str]:
    """The bundled model to load for something saved (or fitted) with bundled model ``name`` and ``fingerprint``.

    ``name`` itself while its version has that fingerprint (or nothing was recorded); else the version that has
    it, logged at INFO ("``what`` with the bundled model default-v1 ...; loading it", ``what`` such as
    "component 'elmo' was saved"); ``None`` when no bundled version has it (the caller says what to do:
    :func:`moved_on_advice`). ``precisions``: those the fingerprint may be of (a saved precision-specific
    fingerprint; the files' own is float32's).
    """
    names = tuple(precisions)
    current = bundled_version(name)
    if fingerprint is None:
        return name if current is not None else None
    if current is not None and any(precision_fingerprint(current.files_fingerprint, p) == fingerprint for p in names):
        return name
    version = version_with_fingerprint(fingerprint, names)
    if version is None:
        return None
    logger.info(
        "%s with the bundled model %s (fingerprint %s), which %r no longer names; loading it",
        what,
        version.name,
        version.files_fingerprint,
        name,
    )
    return version.name


def moved_on_advice(
    name: str,
    saved: str,
    saved_by: Optional[str],
    installed: str,
    set_model: str,
    redo: str,
    done: str = "saved",
) -> str:
    """What to do with something saved with a bundled model that this spacy-elmo no longer bundles.

    ``name``: the bundled model it names ("default"); ``saved``: the files fingerprint it recorded; ``saved_by``:
    the spacy-elmo version that saved it, when recorded; ``installed``: this one; ``set_model``: how to point it
    at the files it was saved with; ``redo``: how to make it again on today's default; ``done``: "saved" or
    "fitted".
    """
    version = bundled_version(name)
    now = f"{name!r} here has {version.files_fingerprint}" if version else f"this spacy-elmo bundles no {name!r}"
    listed = ", ".join(f"{v.name} = {v.files_fingerprint}" for v in VERSIONS.values())
    return (
        f"it was {done} with the bundled ELMo model {name!r} whose files had fingerprint {saved}, but {now}: "
        f"spacy-elmo {installed} no longer bundles the model it was {done} with (it bundles {listed}; 'default' is "
        f"{DEFAULT_VERSION}). Choose one: (1) install the spacy-elmo version it was {done} with "
        f"(pip install 'spacy-elmo=={saved_by or 'VERSION'}'); (2) {set_model}, FOLDER being the folder "
        f"spacy_elmo/models/default of that version (or a published name with those files); (3) {redo}"
    )
