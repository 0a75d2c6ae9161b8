"""How the ``elmo`` component saves its model with a pipeline and finds it again on load.

``to_disk`` writes the model's files (a copy, options.json + weights or an ELMoForManyLangs model's) beside
:data:`MODEL_META`, a small JSON description; a bundled or published model is saved as a reference alone (its name
and fingerprints: a :class:`~spacy_elmo.sources.pinned_model.PinnedModel`). ``to_bytes`` holds the same description
with the files' bytes. Both check the files against the loaded model first (``PinnedModel.check_files``): files
changed on disk since it was loaded would be saved under its fingerprint, a save that could never load. Loading
reads the description back, checks it (a damaged one fails naming the key), and hands the component the model to
load and the pin to check it against (:meth:`ElmoComponent.use_model`); a reference to a bundled model resolves to
the bundled version it was saved with (``PinnedModel.resolve``).
"""

from __future__ import annotations

import atexit
import hashlib
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable, Optional, Protocol

import srsly

from ..about import __version__
from ..bilm.file_formats import ComponentModel
from ..bilm.weights import WeightFileError
from ..groundwork.atomic_write import atomic_path, atomic_paths, reported_as
from ..groundwork.fork_safety import ForkSafeLock
from ..groundwork.schema_check import check_value, read_json_file
from ..runtime.embedding.backend import ElmoBackend
from ..sources.bundled_versions import bundled_version
from ..sources.model_paths import OPTIONS, WEIGHTS, model_file_map
from ..sources.pinned_model import PinnedModel
from .architectures import ElmoModelRef


class ElmoComponent(Protocol):
    """What this module needs of the ``elmo`` component (``pipeline_component.ElmoComponent``)."""

    name: str
    model_ref: ElmoModelRef

    @property
    def backend(self) -> ElmoBackend: ...

    @property
    def loaded_backend(self) -> Optional[ElmoBackend]: ...

    def use_model(self, path: str, pin: PinnedModel) -> None: ...


# the spaCy component's saved model folder: where its model's files are, and their fingerprints
COMPONENT_MODEL = "model.json"
FILE_SCHEMAS = {COMPONENT_MODEL: ComponentModel}  # the schema of each JSON file this module names
MODEL_META = COMPONENT_MODEL  # the component's saved model: where its files are, and their fingerprints


def model_payload(component: ElmoComponent, with_files: bool) -> dict[str, Any]:
    """The description of ``component``'s model that a pipeline saves (with the files' bytes: ``with_files``)."""
    bundled = component.model_ref.bundled_name
    if bundled is not None:  # a reference only: saving must not need the bundled model to exist
        backend = component.loaded_backend
        version = bundled_version(bundled)  # not loaded yet: the table knows its files' fingerprint
        payload: dict[str, Any] = {
            "source": "default",
            "fingerprint": backend.fingerprint if backend else None,
            "files_fingerprint": backend.files_fingerprint if backend else version and version.files_fingerprint,
            "spacy_elmo_version": __version__,  # what to install again should a later version not bundle it
        }
        if bundled != "default":
            payload["model"] = bundled
        return payload
    backend = component.backend
    identity = {"fingerprint": backend.fingerprint, "files_fingerprint": backend.files_fingerprint}
    if component.model_ref.is_remote:  # name or URL + fingerprint; the files come from the download cache
        return {"source": "remote", "model": component.model_ref.path, **identity}
    payload = {"source": "files", **identity}
    if not with_files:
        return payload
    files = loaded_files(component)
    if set(files) == {OPTIONS, WEIGHTS}:  # ELMo's format: the two files under their own keys
        payload["options"] = files[OPTIONS].read_bytes()
        payload["weights"] = files[WEIGHTS].read_bytes()
    else:  # another format (ELMoForManyLangs): each of its files by name
        payload["files"] = {name: path.read_bytes() for name, path in files.items()}
    return payload


def model_dir_writer(component: ElmoComponent) -> Callable[[Path], None]:
    """What ``to_disk`` writes into the model's folder (:func:`save_model_dir`), described and checked now: a model
    that cannot be saved (its files gone, or changed on disk since it was loaded) fails before the component
    writes anything."""
    payload = model_payload(component, with_files=False)
    files = loaded_files(component) if payload["source"] == "files" else {}
    return lambda directory: save_model_dir(directory, payload, files)


def save_model_dir(directory: Path, payload: dict[str, Any], files: dict[str, Path]) -> None:
    """The model's ``files`` (a copy, unless they are this folder's already) and ``payload`` as :data:`MODEL_META`,
    written as one set (:func:`~spacy_elmo.groundwork.atomic_write.atomic_paths`): an error or a full disk leaves the
    folder's previous save whole."""
    directory.mkdir(parents=True, exist_ok=True)
    copies = {  # target -> source
        directory / name: path
        for name, path in files.items()
        if not _same_file(path, directory / name)  # re-saving a loaded pipeline into its own folder
    }
    meta = directory / MODEL_META
    with atomic_paths(*copies, meta) as temporaries:
        for (target, source), tmp in zip(copies.items(), temporaries):
            with reported_as(target):
                shutil.copyfile(source, tmp)
        with reported_as(meta):
            srsly.write_json(temporaries[-1], payload)


def loaded_files(component: ElmoComponent) -> dict[str, Path]:
    """The files of the loaded model, which a saved pipeline copies; gone or changed on disk since loading: an
    error saying so.

    The backend holds the model's parameters, not its files (an int8 backend no longer even holds the
    float32 weights), so a pipeline cannot be saved from memory once its model folder is deleted or moved; and
    files changed since would be saved under the loaded model's fingerprint, a pipeline that could never load.
    """
    try:
        options, weights = component.model_ref.files()
        files = model_file_map(options, weights)
    except WeightFileError as err:
        raise WeightFileError(
            f"component {component.name!r}: cannot save the model: it was loaded from {component.model_ref.path}, "
            f"whose files are gone since ({err}). The loaded model still embeds, but a saved pipeline holds a copy "
            "of its files: put them back there, or save a pipeline whose elmo model is a folder that exists, "
            '"default" or a published name'
        ) from err
    backend = component.backend
    PinnedModel(component.model_ref.path, backend.files_fingerprint).check_files(
        options,
        weights,
        where=f"component {component.name!r}: cannot save the model",
        since="the pipeline loaded them",
        what_to_do="a save would pair them with the loaded model's fingerprint. Put back the files it loaded, or "
        "make the pipeline again on these files (its elmo component then loads them) and train the components "
        "after it again",
    )
    return files


def load_model_dir(component: ElmoComponent, directory: Path) -> None:
    """Point ``component`` at the model :func:`save_model_dir` saved in ``directory``."""
    meta_path = directory / MODEL_META
    if not meta_path.is_file():
        raise WeightFileError(
            f"component {component.name!r}: {meta_path} is missing (not saved by the elmo component?)"
        )
    where, advice = f"component {component.name!r}: {meta_path}", "the saved pipeline is damaged: save it again"
    meta = read_json_file(meta_path, None, advice, WeightFileError)
    source = _saved_source(meta, where, files=())  # its own words for the key that says what the save is
    check_value(meta, where, ComponentModel, advice, WeightFileError)
    if source == "default":
        _use_bundled(component, meta)
        return
    component.use_model(meta["model"] if source == "remote" else str(directory), PinnedModel.from_saved(meta))


def load_payload(component: ElmoComponent, payload: dict[str, Any]) -> None:
    """Point ``component`` at the model in ``to_bytes`` output (its files unpacked to a folder for the process)."""
    where = f"component {component.name!r}: the model in the serialized bytes"
    source = _saved_source(payload, where, files=("options", "weights"))
    if source == "default":
        _use_bundled(component, payload)
        return
    pin = PinnedModel.from_saved(payload)
    if source == "remote":
        component.use_model(payload["model"], pin)
        return
    files = payload.get("files") or {OPTIONS: payload["options"], WEIGHTS: payload["weights"]}
    component.use_model(str(_unpacked_model_dir(files)), pin)


def check_saved_identity(component: ElmoComponent, backend: ElmoBackend, pin: PinnedModel) -> None:
    """``WeightFileError`` unless ``backend`` (the model a loaded pipeline's component found) has the files ``pin``
    recorded: the files' own fingerprint (saved since dtype="auto": another machine may pick another precision),
    else, for pipelines saved before it, the precision-specific one."""
    expected = pin.files_fingerprint or pin.fingerprint
    found = backend.files_fingerprint if pin.files_fingerprint else backend.fingerprint
    if expected is None or found == expected:
        return
    bundled = component.model_ref.bundled_name
    if bundled is not None:
        set_model, redo = _what_to_do(component)
        advice = PinnedModel(bundled, pin.files_fingerprint, pin.fingerprint).moved_on(
            __version__, set_model=set_model, redo=redo
        )
        raise WeightFileError(f"component {component.name!r}: {advice}")
    raise WeightFileError(
        f"component {component.name!r}: the ELMo model in {component.model_ref.path} has fingerprint "
        f"{found}, but the pipeline was saved with {expected}"
    )


def _use_bundled(component: ElmoComponent, saved: dict[str, Any]) -> None:
    """Use the bundled model a pipeline was saved with: the version with its saved fingerprint, should
    ``"default"`` (or the saved version name) now name another one; with none, the model the component's config
    names if that is a folder or a published name (where the error sends users), else that error."""
    pin = PinnedModel.from_saved(saved)
    set_model, redo = _what_to_do(component)
    path = pin.resolve(
        f"component {component.name!r} was saved",
        f"component {component.name!r}",
        installed=__version__,
        fallback=component.model_ref.path if component.model_ref.bundled_name is None else None,
        bundled=True,
        set_model=set_model,
        redo=redo,
    )
    component.use_model(path, pin)


def _what_to_do(component: ElmoComponent) -> tuple[str, str]:
    """How to point a saved pipeline at the files it was saved with, and how to make it again
    (``PinnedModel.moved_on``'s ``set_model`` and ``redo``)."""
    set_model = (
        "load it with the component's model set to the files it was saved with: "
        f'spacy.load(PATH, config={{"components.{component.name}.model.path": FOLDER}})'
    )
    redo = (
        f"train the pipeline's components that follow {component.name!r} again on this version's default "
        "(spacy train with the pipeline's config.cfg)"
    )
    return set_model, redo


_unpacked_root: Optional[Path] = None
_unpacked_lock = ForkSafeLock()


def _unpacked_model_dir(files: dict[str, bytes]) -> Path:
    """A folder holding ``files`` (name -> bytes) for the rest of the process, one per distinct content.

    ``from_bytes`` of the same pipeline again (a server reloading it, ``n_process`` workers) reuses the
    folder, so the disk holds one copy and the backend cache, keyed by the files, finds the loaded model.
    All folders sit in one temporary root, removed at exit (one ``atexit`` registration per process).
    """
    global _unpacked_root
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    with _unpacked_lock:
        if _unpacked_root is None or not _unpacked_root.is_dir():
            _unpacked_root = Path(tempfile.mkdtemp(prefix="spacy_elmo_"))
            atexit.register(shutil.rmtree, _unpacked_root, True)
        directory = _unpacked_root / digest.hexdigest()[:32]
        directory.mkdir(exist_ok=True)
        for name, data in files.items():
            target = directory / Path(name).name  # a bare file name: nothing lands outside the folder
            if not (target.is_file() and target.stat().st_size == len(data)):
                with atomic_path(target) as tmp:
                    tmp.write_bytes(data)
    return directory


def _saved_source(meta: Any, where: str, files: Sequence[str]) -> str:
    """The ``source`` of a saved model description, checked, so a damaged save fails naming ``where`` and the key.

    A "files" save must also hold each key in ``files`` (the bytes of options.json and the weights).
    """
    if not isinstance(meta, dict):
        raise WeightFileError(f"{where}: expected an object with a 'source' key, not {type(meta).__name__}")
    if "source" not in meta:
        raise WeightFileError(f'{where}: missing key \'source\' (expected "default" or "files")')
    source = meta["source"]
    if source not in ("default", "files", "remote"):
        raise WeightFileError(f'{where}: key \'source\' must be "default", "files" or "remote", not {source!r}')
    if source == "default" and not isinstance(meta.get("model", "default"), str):
        raise WeightFileError(f"{where}: key 'model' must be the name of a bundled model, such as \"default-v1\"")
    if source == "remote" and not isinstance(meta.get("model"), str):
        raise WeightFileError(f"{where}: missing key 'model' (the published name or URL of the saved model)")
    if source == "files" and isinstance(meta.get("files"), dict):  # another format's files, by name
        if all(isinstance(k, str) and isinstance(v, bytes) for k, v in meta["files"].items()):
            return source
        raise WeightFileError(f"{where}: key 'files' must map file names to their bytes")
    missing = [key for key in files if source == "files" and not isinstance(meta.get(key), bytes)]
    if missing:
        raise WeightFileError(f"{where}: missing key {missing[0]!r} (the bytes of the saved model file)")
    return source


def _same_file(source: Path, target: Path) -> bool:
    return target.exists() and target.resolve() == source.resolve()
