"""The bundled models by version name: each one's folder and files fingerprint, and which one ``"default"`` names.

Every model spacy-elmo bundles has a version name (``"default-v1"``) that keeps naming it after ``"default"``
moves on to a newer model. A spaCy pipeline saved with ``"default"`` and a fitted ``ElmoVectorizer`` record the
files fingerprint of the model they used (``pinned_model.PinnedModel``), which finds the bundled version that has
it here, so they keep giving the vectors they were made with, or says what to do when no bundled version has it.

Replacing the default is a change of files and of this table only: move the current default's files from
``models/default/`` to ``models/<its version name>/`` and point its row there, put the new model in
``models/default/``, add the new model's row (its fingerprint: ``model_paths.fingerprint`` of its files, which
``tests/sources/test_bundled_versions.py`` checks) and name it in :data:`DEFAULT_VERSION`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..bilm.engine.precisions import vectors_fingerprint

MODELS_DIR = Path(__file__).parents[1] / "models"
DEFAULT_NAME = "default"  # the name of whichever bundled version is the default
DEFAULT_DIR = MODELS_DIR / DEFAULT_NAME  # the folder of whichever bundled version is the default


@dataclass(frozen=True)
class BundledVersion:
    """One bundled model: its version name, its folder and the fingerprint of its files."""

    name: str
    directory: Path
    files_fingerprint: str  # model_paths.fingerprint(options.json, weights) of the files in ``directory``
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
    """The identity of the vectors a model's files give in ``precision`` ("float32", "int8", "bfloat16-cuda": a name
    of the precision table's :data:`~spacy_elmo.bilm.engine.precisions.VECTOR_PRECISIONS`).

    float32's is the files' own fingerprint; another precision gives other vectors, so a hash of both
    (:func:`~spacy_elmo.bilm.engine.precisions.vectors_fingerprint`, which a row's ``fingerprint`` gives).
    """
    return vectors_fingerprint(files_fingerprint, precision)


def version_with_fingerprint(fingerprint: str, precisions: Iterable[str] = ("float32",)) -> Optional[BundledVersion]:
    """The bundled version whose files (read in one of ``precisions``) have ``fingerprint``, or ``None``."""
    names = tuple(precisions)
    for version in VERSIONS.values():
        if any(precision_fingerprint(version.files_fingerprint, p) == fingerprint for p in names):
            return version
    return None
