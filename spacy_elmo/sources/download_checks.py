"""Whether a downloaded file is what its name says it is, before it may enter the download cache: the ``check``
that :mod:`.download` gives the generic fetcher (:mod:`.fetch`).

A server can answer 200 with something else than the file: a captive portal's login page, a CDN's
HTML error, an S3 XML error, a gzip body nobody decoded. Cached under the file's name, with its
sha256 recorded as the file's identity, such a body would poison the model for good. So a weight
file (``.hdf5``/``.h5``) must carry the HDF5 signature and open with h5py (every object visited),
an options file (``.json``) must parse as a JSON object, and an archive must be a readable zip or
tar holding exactly one ``options.json`` with an ``.hdf5`` file beside it, or an ELMoForManyLangs
model folder (``config.json``, ``encoder.pkl``, ``token_embedder.pkl``). Other names are not
checked. Nothing here raises: :func:`content_problem` says what is wrong, in words, or ``None``.
"""

from __future__ import annotations

import json
import tarfile
import zipfile
from pathlib import Path, PurePosixPath
from typing import Optional

from ..bilm import manylangs_files
from ..bilm.weights import first_line
from ..groundwork.file_names import OPTIONS
from .fetch import ARCHIVE_SUFFIXES

WEIGHT_SUFFIXES = (".hdf5", ".h5")
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def content_problem(path: Path, name: str) -> Optional[str]:
    """What is wrong with the file at ``path`` as the kind of file ``name`` ends in; ``None`` if nothing is."""
    lower = name.lower()
    if lower.endswith(WEIGHT_SUFFIXES):
        return _hdf5_problem(path)
    if lower.endswith(".json"):
        return _json_problem(path)
    if lower.endswith(ARCHIVE_SUFFIXES):
        return _archive_problem(path)
    return None


def describe_body(head: bytes) -> str:
    """What the first bytes of a body look like, for an error message ("an HTML page", "the first bytes ...")."""
    text = head.lstrip().lower()
    if text.startswith((b"<!doctype html", b"<html", b"<head", b"<body")) or b"<html" in text[:512]:
        return "an HTML page (a server error, login or captive-portal page?)"
    if text.startswith(b"<?xml") or text.startswith(b"<error"):
        return "an XML document (a storage service's error?)"
    if text.startswith((b"{", b"[")):
        return "JSON text"
    if head.startswith(b"\x1f\x8b"):
        return "gzip-compressed data"
    if not head:
        return "an empty body"
    return f"data starting with {head[:16]!r}"


def _head(path: Path, size: int = 1024) -> bytes:
    with open(path, "rb") as handle:
        return handle.read(size)


def _hdf5_problem(path: Path) -> Optional[str]:
    """HDF5 files start with the signature at byte 0 (or 512, 1024, 2048 ... after a user block) and must open."""
    if not _has_hdf5_signature(path):
        return f"it is {describe_body(_head(path))}, not an HDF5 file"
    import h5py

    try:
        with h5py.File(path, "r") as handle:
            handle.visititems(lambda name, item: None)  # reads every object header: damage shows here
    except Exception as err:  # h5py raises OSError, KeyError, RuntimeError, ValueError... on damaged files
        return f"it has the HDF5 signature but h5py cannot read it ({type(err).__name__}: {first_line(err)})"
    return None


def _has_hdf5_signature(path: Path) -> bool:
    size = path.stat().st_size
    offset = 0
    with open(path, "rb") as handle:
        while offset + len(HDF5_SIGNATURE) <= size:
            handle.seek(offset)
            if handle.read(len(HDF5_SIGNATURE)) == HDF5_SIGNATURE:
                return True
            offset = 512 if offset == 0 else offset * 2
    return False


def _json_problem(path: Path) -> Optional[str]:
    try:
        value = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return f"it is {describe_body(_head(path))}, not JSON"
    if not isinstance(value, dict):
        return f"it is JSON, but a {type(value).__name__}, not an object (options.json is an object)"
    return None


def _archive_problem(path: Path) -> Optional[str]:
    try:
        names = _member_names(path)
    except (OSError, zipfile.BadZipFile, tarfile.TarError, EOFError) as err:
        return f"it is {describe_body(_head(path))}, not a readable zip or tar archive ({first_line(err)})"
    return layout_problem(names)


def _member_names(path: Path) -> list[str]:
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            return [info.filename for info in archive.infolist() if not info.is_dir()]
    with tarfile.open(path, "r:*") as archive:
        return [member.name for member in archive.getmembers() if member.isfile()]


def layout_problem(names: list[str]) -> Optional[str]:
    """What is wrong with an ELMo archive's file members: exactly one options.json, an .hdf5 file beside it
    (or an ELMoForManyLangs model folder: config.json with its torch-saved state files beside it)."""
    paths = [PurePosixPath(name.replace("\\", "/")) for name in names]
    for config in (p for p in paths if p.name == manylangs_files.CONFIG):
        if all(config.parent / state in paths for state in manylangs_files.STATE_FILES):
            return None
    options = [p for p in paths if p.name == OPTIONS]
    if len(options) != 1:
        found = "no options.json" if not options else f"{len(options)} options.json files"
        return f"it holds {found} (an ELMo archive holds one options.json and an .hdf5 weight file beside it)"
    folder = options[0].parent
    if not any(p.parent == folder and p.name.lower().endswith(".hdf5") for p in paths):
        return f"it holds no .hdf5 weight file beside {options[0]}"
    return None
