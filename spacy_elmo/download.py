"""Downloads and archives, once per machine: the cache under ``SPACY_ELMO_HOME``, locks, checks, offline mode.

A URL is fetched with ``requests`` into ``home()/downloads/<hash of the URL>/<file name>``: streamed
to a ``.part`` file (resumed with an HTTP Range request where the server allows), checked against
the length the server announced and any known sha256, and renamed into place only when complete.
Beside it a ``.json`` record keeps the URL, size and sha256 of the first download; a later
download with another sha256 is refused (the published file changed or the transfer is corrupt).
A file lock makes concurrent processes (spaCy ``n_process``, ``GridSearchCV(n_jobs=...)``, Dask
workers) download once while the others wait. Archives (``.zip``, ``.tar.gz``) are unpacked once
into ``home()/archives/``, refusing members with absolute paths, ``..`` or links. With
``SPACY_ELMO_OFFLINE=1`` nothing touches the network. Nothing downloaded is ever unpickled.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tarfile
import zipfile
from pathlib import Path, PurePosixPath
from typing import Any, Dict, Optional, Tuple, Union
from urllib.parse import urlparse

from .bilm import manylangs_files
from .bilm.weights import WeightFileError

HOME_ENV = "SPACY_ELMO_HOME"
OFFLINE_ENV = "SPACY_ELMO_OFFLINE"
ARCHIVE_SUFFIXES = (".zip", ".tar.gz", ".tgz")
_CHUNK = 1 << 20
_ATTEMPTS = 3  # transfers cut off mid-way are resumed (Range) up to this many times per call
_LOCK_TIMEOUT_S = 6 * 3600.0  # another process downloading the original model on a slow line
_CONNECT_TIMEOUT_S, _READ_TIMEOUT_S = 15.0, 120.0


class DownloadError(WeightFileError):
    """A model's files could not be fetched or unpacked (network, server, offline mode, checksum, archive)."""


def home() -> Path:
    """The cache directory: ``SPACY_ELMO_HOME``, else the user cache directory (platformdirs)."""
    value = os.environ.get(HOME_ENV, "").strip()
    if value:
        return Path(value).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("spacy-elmo", appauthor=False))


def is_offline() -> bool:
    """Whether ``SPACY_ELMO_OFFLINE`` forbids network access."""
    return os.environ.get(OFFLINE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def is_url(value: Union[str, "os.PathLike[str]"]) -> bool:
    """Whether ``value`` is an http(s) URL (paths, including ``os.PathLike`` ones, are not)."""
    return isinstance(value, str) and urlparse(value).scheme in ("http", "https")


def is_archive(value: Union[str, "os.PathLike[str]"]) -> bool:
    """Whether ``value`` (a path or URL) names a ``.zip`` / ``.tar.gz`` / ``.tgz`` file."""
    text = os.fspath(value)
    name = urlparse(text).path if is_url(text) else text
    return name.lower().endswith(ARCHIVE_SUFFIXES)


# -- single files ----------------------------------------------------------------------------


def cached_path(
    url: str,
    *,
    sha256: Optional[str] = None,
    what: str = "",
    download_name: Optional[str] = None,
    progress: Optional[bool] = None,
) -> Path:
    """The local copy of ``url``, downloaded into the cache first if it is not there (see the module docstring).

    ``what`` names the model in error messages (e.g. ``model 'original'``); ``download_name`` is what
    offline mode tells the user to pass to ``spacy-elmo download`` (default: the URL);
    ``progress=None`` shows a tqdm bar only on a terminal.
    """
    target = _download_target(url)
    record = _record_path(target)
    found = _verified(target, record, url, sha256)
    if found is not None:
        return found
    if is_offline():
        raise DownloadError(
            f"offline mode is on ({OFFLINE_ENV}=1) and {what or url} is not in the cache ({target}); "
            f"on a machine with a network run `spacy-elmo download {download_name or url}` "
            f"(with {HOME_ENV} pointing at the same cache), or unset {OFFLINE_ENV}"
        )
    from filelock import FileLock, Timeout

    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with FileLock(str(target.parent / ".lock"), timeout=_LOCK_TIMEOUT_S):
            found = _verified(target, record, url, sha256)  # another process may have fetched it meanwhile
            if found is not None:
                return found
            _download(url, target, record, sha256, what, progress)
    except Timeout:
        raise DownloadError(f"timed out waiting for another process to download {url} into {target}") from None
    return target


def _download_target(url: str) -> Path:
    name = PurePosixPath(urlparse(url).path).name or "download"
    return home() / "downloads" / hashlib.sha256(url.encode("utf-8")).hexdigest()[:16] / name


def _record_path(target: Path) -> Path:
    return target.with_name(target.name + ".json")


def _read_record(record: Path) -> Optional[Dict[str, Any]]:
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _verified(target: Path, record: Path, url: str, sha256: Optional[str]) -> Optional[Path]:
    """``target`` if it is a complete download of ``url`` (size as recorded, sha256 as expected), else None."""
    info = _read_record(record)
    if info is None or not target.is_file() or info.get("url") != url:
        return None
    if target.stat().st_size != info.get("size"):
        return None  # damaged since: fetch again
    if sha256 is not None and info.get("sha256") != sha256.lower():
        raise DownloadError(
            f"{target} (from {url}) has sha256 {info.get('sha256')}, but {sha256.lower()} is expected; "
            f"delete {target.parent} to fetch it again"
        )
    return target


def _download(url: str, target: Path, record: Path, sha256: Optional[str], what: str, progress: Optional[bool]) -> None:
    """Fetch ``url`` into ``target`` under the caller's lock: ``.part`` file, resume, checks, rename."""
    part = target.with_name(target.name + ".part")
    size, digest = _fetch_to(url, part, what, progress)
    expected = (sha256 or "").lower() or None
    first = _read_record(record)
    recorded = first.get("sha256") if first and first.get("url") == url else None
    for wanted, why in ((expected, "is expected"), (recorded, f"was recorded at the first download ({record})")):
        if wanted is not None and digest != wanted:
            part.unlink(missing_ok=True)
            raise DownloadError(f"{url}: the downloaded file has sha256 {digest}, but {wanted} {why}; refused")
    os.replace(part, target)
    _write_json_atomically(record, {"url": url, "size": size, "sha256": digest})


def _fetch_to(url: str, part: Path, what: str, progress: Optional[bool]) -> Tuple[int, str]:
    """Stream ``url`` into ``part`` (resuming what is there), returning (size, sha256) of the whole file."""
    import requests
    from tqdm import tqdm

    name = what if url in what else f"{what} ({url})" if what else url
    session = requests.Session()
    bar = None
    resumable = False  # whether the server said it serves byte ranges (Accept-Ranges: bytes)
    try:
        for attempt in range(_ATTEMPTS):
            have = part.stat().st_size if part.is_file() else 0
            headers = {"Range": f"bytes={have}-"} if have else {}
            try:
                with session.get(url, stream=True, headers=headers, timeout=(_CONNECT_TIMEOUT_S, _READ_TIMEOUT_S)) as response:
                    if response.status_code == 416 and have:  # nothing left to send: what we have is the whole file
                        part.unlink()
                        continue
                    response.raise_for_status()
                    resumable = response.headers.get("Accept-Ranges", "").lower() == "bytes"
                    resumed = have and response.status_code == 206
                    if not resumed:
                        have = 0
                    length = response.headers.get("Content-Length")
                    total = have + int(length) if length is not None and length.isdigit() else None
                    if bar is None:
                        bar = tqdm(total=total, initial=have, unit="B", unit_scale=True, unit_divisor=1024,
                                   desc=PurePosixPath(urlparse(url).path).name, disable=_bar_disabled(progress), leave=False)
                    else:
                        bar.reset(total=total)
                        bar.update(have)
                    with open(part, "ab" if resumed else "wb") as handle:
                        for chunk in response.iter_content(1 << 16):  # small reads: a cut-off keeps most of what came
                            handle.write(chunk)
                            bar.update(len(chunk))
                    got = part.stat().st_size
                    if total is not None and got != total:
                        raise _CutOff(f"got {got:,} of {total:,} bytes")
                    return got, _sha256_of(part)
            except (requests.exceptions.ChunkedEncodingError, requests.exceptions.ConnectionError,
                    requests.exceptions.Timeout, _CutOff) as err:
                got = part.stat().st_size if part.is_file() else 0
                can_resume = got > 0 and resumable
                if not can_resume:
                    part.unlink(missing_ok=True)
                if attempt + 1 == _ATTEMPTS or not can_resume:
                    reason = "could not connect" if got == 0 and isinstance(err, requests.exceptions.ConnectionError) else "the transfer was cut off"
                    kept = f"; the {got:,} bytes received are kept aside to resume on the next try" if can_resume else ""
                    raise DownloadError(
                        f"downloading {name} failed: {reason} ({_short(err)}); no incomplete file was put in the cache{kept}"
                    ) from None
            except requests.exceptions.HTTPError as err:
                part.unlink(missing_ok=True)
                raise DownloadError(f"downloading {name} failed: the server answered {_short(err)}") from None
            except requests.exceptions.RequestException as err:
                part.unlink(missing_ok=True)
                raise DownloadError(f"downloading {name} failed: {_short(err)}") from None
        raise DownloadError(f"downloading {name} failed after {_ATTEMPTS} attempts")
    finally:
        if bar is not None:
            bar.close()
        session.close()


class _CutOff(Exception):
    """The server sent fewer bytes than it announced."""


def _short(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _bar_disabled(progress: Optional[bool]) -> Optional[bool]:
    return None if progress is None else not progress  # None: tqdm decides (off when not a terminal)


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _write_json_atomically(path: Path, data: Dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
    os.replace(tmp, path)


# -- archives ----------------------------------------------------------------------------------


def unpacked_archive(archive: Path, *, source: Optional[str] = None) -> Path:
    """The directory an archive unpacks to (once, in the cache); ``source`` names it in messages (its URL)."""
    archive = archive.resolve()
    info = archive.stat()
    key = hashlib.sha256(f"{archive}:{info.st_size}:{info.st_mtime_ns}".encode()).hexdigest()[:16]
    target = home() / "archives" / key
    done = target / ".complete"
    if done.is_file():
        return target
    from filelock import FileLock

    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target.parent / f".{key}.lock"), timeout=_LOCK_TIMEOUT_S):
        if done.is_file():
            return target
        tmp = target.with_name(f".{key}.{os.getpid()}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            _extract(archive, tmp, source or str(archive))
            (tmp / ".complete").write_text(source or str(archive), encoding="utf-8")
            shutil.rmtree(target, ignore_errors=True)
            os.replace(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _extract(archive: Path, into: Path, name: str) -> None:
    """Every regular file of a zip or tar archive, after checking every member's name and kind."""
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            members = [(info.filename, _zip_kind(info)) for info in zf.infolist()]
            _check_members(members, name)
            for info in zf.infolist():
                if not info.is_dir():
                    _write_member(into, info.filename, zf.open(info))
        return
    try:
        tf = tarfile.open(archive, "r:*")
    except tarfile.TarError as err:
        raise DownloadError(f"{name} is neither a zip nor a tar archive ({err})") from None
    with tf:
        entries = tf.getmembers()
        _check_members([(m.name, _tar_kind(m)) for m in entries], name)
        for member in entries:
            if member.isfile():
                handle = tf.extractfile(member)
                assert handle is not None
                _write_member(into, member.name, handle)


def _zip_kind(info: zipfile.ZipInfo) -> str:
    mode = info.external_attr >> 16
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "dir" if info.is_dir() else "file"


def _tar_kind(member: tarfile.TarInfo) -> str:
    if member.issym():
        return "a symbolic link"
    if member.islnk():
        return "a hard link"
    if member.isdir():
        return "dir"
    return "file" if member.isfile() else "a device or special file"


def _check_members(members: Any, name: str) -> None:
    for member, kind in members:
        path = member.replace("\\", "/")
        parts = PurePosixPath(path).parts
        if path.startswith("/") or (len(path) > 1 and path[1] == ":"):
            raise DownloadError(f"{name}: member {member!r} has an absolute path; refused (unsafe archive)")
        if ".." in parts:
            raise DownloadError(f"{name}: member {member!r} leads outside the archive ('..'); refused (unsafe archive)")
        if kind not in ("file", "dir"):
            raise DownloadError(f"{name}: member {member!r} is {kind}; refused (links could point outside the archive)")


def _write_member(into: Path, member: str, source: Any) -> None:
    path = into.joinpath(*PurePosixPath(member.replace("\\", "/")).parts)
    path.parent.mkdir(parents=True, exist_ok=True)
    with source, open(path, "wb") as out:
        shutil.copyfileobj(source, out, _CHUNK)


def model_dir_in(directory: Path, name: str) -> Path:
    """The folder inside an unpacked archive that holds ``options.json`` or an ELMoForManyLangs model (exactly one must)."""
    found = sorted(p.parent for p in directory.rglob("options.json") if p.is_file())
    found += sorted(p.parent for p in directory.rglob(manylangs_files.ENCODER) if manylangs_files.is_model_dir(p.parent))
    if len(found) == 1:
        return found[0]
    if not found:
        raise DownloadError(
            f"{name} holds no options.json (an ELMo archive needs options.json and one .hdf5 file) "
            "and no ELMoForManyLangs model (config.json, encoder.pkl, token_embedder.pkl)"
        )
    listed = ", ".join(str(p.relative_to(directory)) for p in found)
    raise DownloadError(f"{name} holds several options.json files ({listed}); unpack it and name one folder")


def is_cached(url: str) -> bool:
    """Whether a complete download of ``url`` is in the cache (no network access)."""
    target = _download_target(url)
    try:
        return _verified(target, _record_path(target), url, None) is not None
    except DownloadError:
        return False
