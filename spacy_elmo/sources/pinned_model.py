"""Which model something was made with, pinned so that it can be found again: the one home of model identity.

A spaCy pipeline saved with the ``elmo`` component and a fitted ``ElmoVectorizer`` each record a
:class:`PinnedModel` (what their ``model`` setting named, the fingerprint of the files behind it and of the vectors
they gave in their precision, the spacy-elmo version) and resolve it when loaded or used again
(:meth:`PinnedModel.resolve`): a bundled model's name keeps meaning the files it meant then, after ``"default"``
names a newer model (the bundled version with that fingerprint, logged), or a :class:`WeightFileError` says what to
do when this spacy-elmo no longer bundles them. A folder or a published name is loaded as named; the loader checks
the fingerprint.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from ..bilm.engine.precisions import VECTOR_PRECISIONS
from ..bilm.weights import WeightFileError
from .bundled_versions import (
    DEFAULT_NAME,
    DEFAULT_VERSION,
    UNRECORDED_VERSION,
    VERSIONS,
    bundled_version,
    precision_fingerprint,
    version_with_fingerprint,
)
from .model_paths import bundled_name, fingerprint

logger = logging.getLogger(__name__)  # a child of the "spacy_elmo" logger


@dataclass(frozen=True)
class PinnedModel:
    """A model as something made with it recorded it.

    name: what its ``model`` setting named ("default", a bundled version such as "default-v1", a published name,
        a folder or URL).
    files_fingerprint: ``model_paths.fingerprint`` of the files behind ``name`` then (None: not recorded).
    fingerprint: the fingerprint of the vectors they gave in its precision (``ElmoBackend.fingerprint``).
    saved_by: the spacy-elmo version that recorded it (what to install again should a later one not bundle it).
    """

    name: str
    files_fingerprint: Optional[str] = None
    fingerprint: Optional[str] = None
    saved_by: Optional[str] = None

    @property
    def recorded(self) -> Optional[str]:
        """The fingerprint to find the model by: its files', else its vectors'; for a pin of ``"default"`` with
        neither and no version (a pipeline spacy-elmo 0.2.0 or earlier saved before its first doc) that of
        :data:`~.bundled_versions.UNRECORDED_VERSION`, the only model "default" named up to then."""
        recorded = self.files_fingerprint or self.fingerprint
        if recorded is None and self.saved_by is None and self.name == DEFAULT_NAME:
            return VERSIONS[UNRECORDED_VERSION].files_fingerprint
        return recorded

    def matches(self, files_fingerprint: str) -> bool:
        """Whether files with ``files_fingerprint`` are those pinned (read in any precision)."""
        return any(precision_fingerprint(files_fingerprint, p) == self.recorded for p in VECTOR_PRECISIONS)

    def check_files(
        self,
        options_path: Path,
        weights_path: Path,
        *,
        where: str,
        since: str,
        what_to_do: str,
        now: Optional[str] = None,
    ) -> Optional[str]:
        """``WeightFileError`` unless the model files at ``options_path`` / ``weights_path`` are still the pinned ones
        (:meth:`matches`) as they are on disk now: the one check, before a fitted ``ElmoVectorizer`` transforms and
        before the spaCy component copies its model into a save, that nothing pairs other files with this pin.

        ``model_paths.fingerprint`` reads the files again only when their size, times or inode changed, so the
        check costs a stat of each file; ``now``: their fingerprint, taken a moment ago by another check of the same
        files (not taken again). The message: "``where``: the ELMo model files in FOLDER changed on disk since
        ``since`` (fingerprint ... then, ... now): ``what_to_do``". Nothing recorded: nothing to check (None is
        returned); else the files' fingerprint now.
        """
        recorded = self.recorded
        if recorded is None:
            return now
        current = now if now is not None else fingerprint(options_path, weights_path)
        if self.matches(current):
            return current
        raise WeightFileError(
            f"{where}: the ELMo model files in {_excerpt(str(options_path.parent), 200)} changed on disk since {since} "
            f"(fingerprint {_excerpt(recorded, 40)} then, {current} now): {what_to_do}"
        )

    def bundled(self, what: str) -> Optional[str]:
        """The bundled model to load for this pin of a bundled model (``name`` is "default", a version name or its
        folder): ``name`` itself while its version has the pinned
        fingerprint (or none was recorded); else the version that has it, logged at INFO ("``what`` with the bundled
        model default-v1 ...; loading it", ``what`` such as "component 'elmo' was saved"); ``None`` when no bundled
        version has it (:meth:`moved_on` says what to do)."""
        name = bundled_name(self.name)
        current = bundled_version(name) if name is not None else None
        fingerprint = self.recorded
        if fingerprint is None:
            return self.name if current is not None else None
        if current is not None and self.matches(current.files_fingerprint):
            return self.name
        version = version_with_fingerprint(fingerprint, VECTOR_PRECISIONS)
        if version is None:
            return None
        logger.info(
            "%s with the bundled model %s (fingerprint %s), which %r no longer names; loading it",
            what,
            version.name,
            version.files_fingerprint,
            self.name,
        )
        return version.name

    def resolve(
        self,
        what: str,
        where: str,
        *,
        installed: str,
        set_model: str,
        redo: str,
        done: str = "saved",
        still_current: Callable[[], Optional[str]] = lambda: None,
        fallback: Optional[str] = None,
        bundled: Optional[bool] = None,
    ) -> str:
        """The model to load for this pin: ``name`` for a model that is not bundled (its loader checks the files),
        else :meth:`bundled`'s choice (``what`` for its log line). When no bundled version has the pinned files:
        ``name`` if ``still_current()`` (the files fingerprint of what ``name`` loads now, where the caller can tell)
        matches, else ``fallback`` (a model the user named instead, checked by its loader), else ``WeightFileError``
        "``where``: " + :meth:`moved_on` (``installed``, ``set_model``, ``redo``, ``done``). ``bundled``: whether the
        pin is of a bundled model (a saved reference says so); None: whether ``name`` names one here."""
        if not (bundled_name(self.name) is not None if bundled is None else bundled):
            return self.name
        version = self.bundled(what)
        if version is not None:
            return version
        current = still_current()
        if current is not None and self.matches(current):
            return self.name
        if fallback is not None:
            return fallback
        raise WeightFileError(f"{where}: {self.moved_on(installed, set_model=set_model, redo=redo, done=done)}")

    def moved_on(self, installed: str, *, set_model: str, redo: str, done: str = "saved") -> str:
        """What to do with something ``done`` ("saved", "fitted") with a bundled model that spacy-elmo ``installed``
        no longer bundles: install the version that made it, point it at those files (``set_model``: how), or make
        it again on today's default (``redo``: how)."""
        name = bundled_name(self.name) or self.name
        version = bundled_version(name)
        now = f"{name!r} here has {version.files_fingerprint}" if version else f"this spacy-elmo bundles no {name!r}"
        listed = ", ".join(f"{v.name} = {v.files_fingerprint}" for v in VERSIONS.values())
        return (
            f"it was {done} with the bundled ELMo model {name!r} whose files had fingerprint {self.recorded or '?'}, "
            f"but {now}: spacy-elmo {installed} no longer bundles the model it was {done} with (it bundles {listed}; "
            f"'default' is {DEFAULT_VERSION}). Choose one: (1) install the spacy-elmo version it was {done} with "
            f"(pip install 'spacy-elmo=={self.saved_by or 'VERSION'}'); (2) {set_model}, FOLDER being the folder "
            f"spacy_elmo/models/default of that version (or a published name with those files); (3) {redo}"
        )

    # -- as saved --------------------------------------------------------------------------------

    @classmethod
    def from_saved(cls, saved: dict[str, Any], name: Optional[str] = None) -> PinnedModel:
        """The pin a saved pipeline's model description holds (keys ``model``, ``files_fingerprint``,
        ``fingerprint``, ``spacy_elmo_version``; ``name`` when the description names no model)."""
        return cls(
            name=saved.get("model", name or DEFAULT_NAME),
            files_fingerprint=saved.get("files_fingerprint"),
            fingerprint=saved.get("fingerprint"),
            saved_by=saved.get("spacy_elmo_version"),
        )


def _excerpt(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters (a recorded value may come from a pickle or a saved file)."""
    return text if len(text) <= limit else text[: limit - 3] + "..."
