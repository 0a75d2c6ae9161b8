"""What a model string means as the paths of existing files, and the files of a model folder: the one place that
decides both.

A model is named by ``"default"`` (the bundled biLM), a bundled version's own name (``"default-v1"``, see
:mod:`.bundled_versions`), a published name (``"original"``, see
:mod:`.published`), a directory, a ``.zip`` / ``.tar.gz`` archive (local path or URL), or an
options URL of a published model; or given as an ``options=`` + ``weights=`` pair of paths or
URLs. :func:`resolve_model_files` turns any of them into a local ``(options.json, weights)``
pair, downloading and unpacking into the cache (:mod:`.download`) when needed; :func:`model_dir_in` finds
the model folder inside an unpacked archive. What a string names before anything is read, the early checks and
the error for a string that names nothing are :mod:`.model_names`' (torch-free, for the command line).

Two directory formats are told apart by their files: ELMo's (``options.json`` + an HDF5 weight
file) and ELMoForManyLangs' (``config.json`` + the torch-saved ``encoder.pkl`` and
``token_embedder.pkl``, see :mod:`.bilm.manylangs_reader`). For the latter the pair is
``(config.json, encoder.pkl)``; :func:`is_manylangs` recognises such a pair and
:func:`model_file_map` lists every file of either kind of model.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Optional

from ..bilm import manylangs_files
from ..bilm.weights import WeightFileError, read_options
from ..groundwork.excerpt import excerpt
from ..groundwork.file_names import METRICS, OPTIONS, VOCAB, WEIGHT_NAMES, WEIGHTS, PathLike  # noqa: F401 (METRICS, VOCAB re-exported)
from ..onnx import manifest as onnx_files
from .bundled_versions import DEFAULT_DIR, bundled_version, is_version_name, version_in
from .download import DownloadError, cached_path, forget, is_archive, is_url, unpacked_archive
from .model_names import check_model_name, is_default, local_path, not_found  # noqa: F401 (check_model_name re-exported)
from .published import PUBLISHED, PublishedModel, published_by_url, published_model

DEFAULT_MODEL_DIR = DEFAULT_DIR  # the bundled default's folder (bundled_versions names every bundled model)


def bundled_name(model: Optional[PathLike]) -> Optional[str]:
    """The bundled model ``model`` names: ``"default"``, a version name (``"default-v1"``, also for a path to its
    folder), or ``None`` for any other model. Saved spaCy pipelines keep a bundled model as a reference."""
    if is_default(model):
        return "default"
    text = os.fspath(model)  # type: ignore[arg-type]
    if is_version_name(text):
        return text
    if is_url(text):
        return None
    try:
        return version_in(Path(text).expanduser())
    except OSError:
        return None


def is_remote(model: Optional[PathLike]) -> bool:
    """Whether ``model`` is fetched rather than read from a local folder: a published name or a URL.

    Saved spaCy pipelines keep such models as a reference (name or URL + fingerprint), not a copy.
    """
    return model is not None and (is_url(str(model)) or published_model(str(model)) is not None)


def resolve_model_files(
    model: Optional[PathLike] = "default", options: Optional[PathLike] = None, weights: Optional[PathLike] = None
) -> tuple[Path, Path]:
    """The local ``(options.json, weights)`` pair that ``model`` / ``options`` / ``weights`` name (module docstring).

    Both files exist when it returns (``WeightFileError`` names a missing one), so callers need not check again.
    """
    if options is not None or weights is not None:
        if options is None or weights is None:
            raise ValueError("give both options= and weights= (or a model directory, name, archive or URL)")
        return _local(options, "options"), _local(weights, "weights")
    if is_default(model):
        return _bundled(DEFAULT_MODEL_DIR, "the bundled default ELMo model")
    text = os.fspath(model)  # type: ignore[arg-type]
    version = bundled_version(text)  # a bundled version by its own name: its folder in the package, no download
    if version is not None:
        return _bundled(version.directory, f"the bundled model {text!r}")
    url = is_url(text)
    path = Path(text) if url else local_path(text)  # a name no path can have: said here, once
    if not url and is_model_dir(path):  # a local model folder wins over a published name
        return _in_directory(path)
    entry = published_model(text)
    if entry is None and url:
        entry = published_by_url(text)
    if entry is not None:
        return published_files(entry)
    if url:
        if is_archive(text):
            archive = cached_path(text, what=f"archive {text}")
            return _in_directory(model_dir_in(unpacked_archive(archive, source=text), text))
        raise WeightFileError(
            f"{excerpt(text)} is neither a published model's file nor a .zip/.tar.gz archive; for separate files use "
            f"load_bilm(options=OPTIONS_URL, weights=WEIGHTS_URL); published names: {', '.join(PUBLISHED)}"
        )
    if path.is_file() and is_archive(text):
        return _in_directory(model_dir_in(unpacked_archive(path), str(path)))
    if path.is_file():
        raise WeightFileError(
            f"{path} is a file, not an ELMo model directory: pass its folder ({str(path.parent)!r}, which holds "
            f"{OPTIONS} and the weights), or both files as load_bilm(options=..., weights=...)"
        )
    if not path.is_dir():
        raise not_found(text)
    return _in_directory(path)


def published_files(entry: PublishedModel) -> tuple[Path, Path]:
    """The cached options and weights of a published model (or its unpacked archive's), downloaded first if needed."""
    what = f"model '{entry.name}'"
    if entry.archive_url is not None:
        archive = cached_path(entry.archive_url, what=what, download_name=entry.name)
        return _in_directory(model_dir_in(unpacked_archive(archive, source=entry.archive_url), entry.archive_url))
    assert entry.options_url is not None and entry.weights_url is not None  # a model of two files
    options = cached_path(entry.options_url, sha256=entry.options_sha256, what=what, download_name=entry.name)
    weights = cached_path(entry.weights_url, sha256=entry.weights_sha256, what=what, download_name=entry.name)
    return options.resolve(), weights.resolve()


def forget_cached(model: PathLike) -> list[Path]:
    """Remove what the download cache holds of ``model`` (a published name, URL or archive path); returns what went.

    The next use downloads (or unpacks) it again: what ``spacy-elmo download --force`` does.
    """
    text = os.fspath(model)
    entry = published_model(text) or (published_by_url(text) if is_url(text) else None)
    if entry is not None:
        sources = list(entry.urls)
    elif is_url(text) or is_archive(text):
        sources = [text]
    else:
        sources = []
    return [path for source in sources for path in forget(source)]


def download_model(model: PathLike) -> Path:
    """Fetch ``model`` into the download cache now (``spacy-elmo download``), verified, and return where it is: the
    folder of its files, or the file itself for a URL of one file that is no published model's (it has no folder)."""
    text = os.fspath(model)
    if is_url(text) and not is_archive(text) and published_by_url(text) is None:
        return cached_path(text)
    return resolve_model_files(model)[1].parent


def _local(value: PathLike, role: str) -> Path:
    """The local file an ``options=`` / ``weights=`` value names (a URL downloaded first), checked to exist.

    Every other route of :func:`resolve_model_files` finds its files in a folder it has looked in, so
    after this the pair exists: the one check the front ends and ``load_bilm`` rely on.
    """
    text = os.fspath(value)
    if is_url(text):
        return cached_path(text, what=f"{role} file {text}").resolve()
    path = Path(text).expanduser().resolve()
    if not path.is_file():
        raise WeightFileError(f"{role} file not found: {path}")
    return path


def check_model_folder(model: Optional[PathLike]) -> None:
    """Fail now, reading no weights, when ``model`` names a folder here that holds no model (``WeightFileError``,
    the one that loading it would raise, saying what a model folder holds); anything else waits for the load.

    For front ends that load their model later (the spaCy component, at its first doc): a folder that is not
    there may be the one a saved pipeline was made from (its own copy is what it loads), so only a folder that
    is there is looked into, and only for its files' names.
    """
    if model is None or is_default(model) or is_url(os.fspath(model)) or is_version_name(os.fspath(model)):
        return
    text = os.fspath(model)
    path = local_path(text)
    if path.is_dir() and not is_model_dir(path) and published_model(text) is None and version_in(path) is None:
        _in_directory(path)  # raises: no options.json and no ELMoForManyLangs model


def is_model_dir(directory: Path) -> bool:
    """Whether ``directory`` holds a model of a format the package reads: ELMo's options.json, ELMoForManyLangs'
    files, or an ONNX export's (``spacy-elmo export``)."""
    return (directory / OPTIONS).is_file() or manylangs_files.is_model_dir(directory) or is_onnx_dir(directory)


ONNX_FILES = (onnx_files.MANIFEST, *onnx_files.GRAPH_FILES.values())  # an export folder's


def is_onnx_dir(directory: Path) -> bool:
    """Whether ``directory`` is an ONNX export folder: its manifest, and no model of another format beside it. Its
    graphs and the manifest's contents are checked where it loads, so that a folder missing a graph (or written by
    another version, with other files) is told which file it lacks."""
    return (
        (directory / onnx_files.MANIFEST).is_file()
        and not (directory / OPTIONS).is_file()
        and not manylangs_files.is_model_dir(directory)
    )


def is_onnx_export(options_path: Path, weights_path: Path) -> bool:
    """Whether a resolved pair is an ONNX export folder's ``(manifest.json, token_encoder.onnx)``: a model that runs
    on ONNX Runtime, without torch."""
    return (
        options_path.name == onnx_files.MANIFEST
        and weights_path.name == onnx_files.TOKEN_ENCODER
        and options_path.parent == weights_path.parent
    )


def is_manylangs(options_path: Path, weights_path: Path) -> bool:
    """Whether a resolved pair is an ELMoForManyLangs model's ``(config.json, encoder.pkl)``."""
    return (
        options_path.name == manylangs_files.CONFIG
        and weights_path.name == manylangs_files.ENCODER
        and options_path.parent == weights_path.parent
        and manylangs_files.is_model_dir(weights_path.parent)
    )


def model_file_map(options_path: Path, weights_path: Path) -> dict[str, Path]:
    """Every file of the model a resolved pair names, by the name it must have in a copy of the model's folder."""
    if is_manylangs(options_path, weights_path):
        from ..bilm import manylangs_reader  # torch: only for an ELMoForManyLangs model

        return manylangs_reader.model_files(weights_path.parent)
    if is_onnx_export(options_path, weights_path):
        folder = weights_path.parent
        dictionaries = [name for name in onnx_files.DICTIONARIES if (folder / name).is_file()]  # ELMoForManyLangs'
        return {name: folder / name for name in (*ONNX_FILES, *dictionaries)}
    return {OPTIONS: options_path, WEIGHTS: weights_path}


def model_shape(options_path: Path, weights_path: Path) -> tuple[int, int]:
    """``(n_layers, dim)`` of a resolved pair, read from its options (or ELMoForManyLangs config) alone, weights unread.

    ``dim`` is the width of every output layer (``2 * projection_dim``), as ``ElmoBackend.dim``;
    the backend returns ``n_layers + 1`` layers. For a client that only needs the shape (Dask).
    """
    if is_manylangs(options_path, weights_path):
        from ..bilm import manylangs_reader  # torch: only for an ELMoForManyLangs model

        config = manylangs_reader.read_config(weights_path.parent)
        return config.n_layers, 2 * config.projection_dim
    if is_onnx_export(options_path, weights_path):
        options = onnx_files.read_manifest(weights_path.parent)[1]
        return options.n_layers, options.output_dim
    options = read_options(options_path)
    return options.n_layers, options.output_dim


def model_dir_in(directory: Path, name: str) -> Path:
    """The folder inside an unpacked archive that holds ``options.json`` or an ELMoForManyLangs model (exactly one
    must)."""
    found = sorted(p.parent for p in directory.rglob(OPTIONS) if p.is_file())
    found += sorted(
        p.parent for p in directory.rglob(manylangs_files.ENCODER) if manylangs_files.is_model_dir(p.parent)
    )
    if len(found) == 1:
        return found[0]
    if not found:
        raise DownloadError(
            f"{name} holds no options.json (an ELMo archive needs options.json and one .hdf5 file) "
            "and no ELMoForManyLangs model (config.json, encoder.pkl, token_embedder.pkl)"
        )
    listed = ", ".join(str(p.relative_to(directory)) for p in found)
    raise DownloadError(f"{name} holds several options.json files ({listed}); unpack it and name one folder")


def _bundled(directory: Path, what: str) -> tuple[Path, Path]:
    """A bundled model's files, or what to do when this installation lacks them (a trimmed or broken install)."""
    if not (directory / OPTIONS).is_file():
        raise WeightFileError(
            f"{what} is not part of this installation (no {directory / OPTIONS}); "
            "pass a directory holding options.json and a weights .hdf5 file, or a published model name"
        )
    return _in_directory(directory)


def _in_directory(directory: Path) -> tuple[Path, Path]:
    if not (directory / OPTIONS).is_file() and manylangs_files.is_model_dir(directory):
        return (directory / manylangs_files.CONFIG).resolve(), (directory / manylangs_files.ENCODER).resolve()
    if not (directory / OPTIONS).is_file() and is_onnx_dir(directory):
        return (directory / onnx_files.MANIFEST).resolve(), (directory / onnx_files.TOKEN_ENCODER).resolve()
    options_path = directory / OPTIONS
    if not options_path.is_file():
        raise WeightFileError(
            f"ELMo model directory {directory} has no {OPTIONS}: a model folder holds {OPTIONS} and a weights .hdf5 "
            f"file (ELMo's format) or {manylangs_files.CONFIG}, {' and '.join(manylangs_files.STATE_FILES)} "
            "(ELMoForManyLangs'); name that folder, a published model or 'default'"
        )
    return options_path.resolve(), find_weights(directory).resolve()


def find_weights(directory: Path) -> Path:
    """The weights file of a model folder: the first of :data:`WEIGHT_NAMES` it holds, else its only ``*.hdf5``."""
    for name in WEIGHT_NAMES:
        if (directory / name).is_file():
            return directory / name
    found = sorted(p for p in directory.glob("*.hdf5") if p.is_file())
    if len(found) == 1:
        return found[0]
    if not found:
        raise WeightFileError(f"ELMo model directory {directory} has no .hdf5 weight file")
    names = ", ".join(p.name for p in found)
    raise WeightFileError(f"ELMo model directory {directory} has several .hdf5 files ({names}); name one with weights=")


FileState = tuple[int, int, int, int]  # a file's size, mtime_ns, ctime_ns and inode


def files_state(paths: Iterable[Path]) -> tuple[FileState, ...]:
    """Each file's ``(size, mtime_ns, ctime_ns, inode)``: what tells that a file changed without reading it. A file
    replaced by a rename (as every writer of this package replaces one) has a new inode; one rewritten in place
    with its mtime put back (``cp -p``) a new ctime."""
    states = []
    for path in paths:
        stat = os.stat(path)
        states.append((stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino))
    return tuple(states)


# fingerprints already computed in this process: (options, weights) -> (their files' state then, fingerprint)
_FINGERPRINTS: dict[tuple[str, str], tuple[tuple[FileState, ...], str]] = {}


def fingerprint(options_path: Path, weights_path: Path) -> str:
    """sha256 of the canonical options and the weight file's bytes: equal files, equal fingerprint.

    An ELMoForManyLangs model's covers each of its files (name and bytes). Remembered for the process while
    :func:`files_state` of the model's files stays the same, so checking files again (before a fitted
    ``ElmoVectorizer`` transforms, before a pipeline copies its model) reads no weights unless they changed.
    """
    files = list(model_file_map(options_path, weights_path).values())
    key = (os.fspath(options_path), os.fspath(weights_path))
    before = files_state(files)
    known = _FINGERPRINTS.get(key)
    if known is not None and known[0] == before:
        return known[1]
    value = _hashed(options_path, weights_path)
    if files_state(files) == before:  # not remembered when a file changed while it was read
        _FINGERPRINTS[key] = (before, value)
    return value


def _hashed(options_path: Path, weights_path: Path) -> str:
    """:func:`fingerprint`, read from the files."""
    digest = hashlib.sha256()
    if is_manylangs(options_path, weights_path) or is_onnx_export(options_path, weights_path):
        for name, path in sorted(model_file_map(options_path, weights_path).items()):
            digest.update(name.encode("utf-8") + b"\0")
            digest.update(path.read_bytes())
        return digest.hexdigest()[:32]
    options = json.loads(options_path.read_text(encoding="utf-8"))
    digest.update(json.dumps(options, sort_keys=True).encode("utf-8"))
    with open(weights_path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()[:32]
