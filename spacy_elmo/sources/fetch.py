"""A local store of fetched files: URL -> a verified file, fetched once per machine; archives unpacked once.

Generic: it knows no file format and no command line. What a body must be is the caller's
``check`` (a callable that says what is wrong with a file, or ``None``), and what a user can do
about a bad entry or a missing network is the caller's ``retry_hint`` / ``offline_hint`` / ``connect_hint``
(text added to the messages).

A URL is fetched with ``requests`` into ``ROOT/downloads/<hash of the URL>/<file name>``: streamed
to a ``.part`` file, checked against the length the server announced, against ``check`` (so an
HTML error page answered with 200 is refused, not stored) and against any known sha256, and
renamed into place only then. A cut-off transfer is resumed only from a ``.part`` whose version
(ETag or Last-Modified, kept in ``.part.json``) the server confirms (``If-Range``) and whose
``Content-Range`` starts where the ``.part`` ends; anything else starts again from zero, so two
versions of a file are never spliced. Servers are asked not to compress (``Accept-Encoding:
identity``). Beside the file a ``.json`` record keeps the URL, size, sha256 and label of the first
download that passed; a later download with another sha256 is refused (the published file changed
or the transfer is corrupt). A file lock makes concurrent processes download once while the
others wait. Archives (``.zip``, ``.tar.gz``) are unpacked once into ``ROOT/archives/<key>``, refusing
members with absolute paths, ``..`` or links, and archives that would expand beyond their declared
sizes, ``MAX_EXPANSION`` times their own size or the free disk space (archive bombs). A store made
``offline`` never touches the network. Nothing fetched is ever unpickled.

An unpacked archive's key is its content, the start of the archive's sha256, so a store copied
elsewhere (``cp -a``, ``cp -r``, another root) and an archive copied to another path find the
folder unpacked before. A downloaded archive's sha256 is its record's (the unpack checks it); a
local archive is hashed once and its sha256 remembered in ``ROOT/archives/.sha256/`` for as long as
its path, size, times, inode and first and last 64 KiB stay the same (the end of a zip holds its
members' CRCs, a gzip's the CRC of all it holds). Folders an older version unpacked under the old
key (the archive's path, size and mtime) are still read where that key still matches.

A store that cannot be written (a read-only folder or mount) hands out its complete entries
without writing anything, no lock included; whatever needs a write (a missing entry, an unpack,
removing an entry) is a :class:`FetchError` naming the folder, ending with the caller's
``unwritable_hint``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import stat
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Optional, Union
from urllib.parse import urlparse

from ..groundwork.atomic_write import write_json_atomically

ARCHIVE_SUFFIXES = (".zip", ".tar.gz", ".tgz")
_CHUNK = 1 << 20
_ATTEMPTS = 3  # transfers cut off mid-way are resumed (Range) up to this many times per call
_LOCK_TIMEOUT_S = 6 * 3600.0  # another process downloading a large file on a slow line
_CONNECT_TIMEOUT_S, _READ_TIMEOUT_S = 15.0, 120.0
MAX_EXPANSION = 100  # an archive may unpack to at most this many times its size (model weights hardly compress)...
MIN_EXPANSION_BYTES = 64 << 20  # ...or to this much, whatever its size
FREE_RESERVE_BYTES = 64 << 20  # left free on the disk after unpacking
_KEY_CHARS = 16  # hex digits of the archive's sha256 that name its unpacked folder
_SAMPLE_BYTES = 64 << 10  # read from each end of a local archive to check that its remembered sha256 still holds

Check = Callable[[Path, str], Optional[str]]  # (file, the name it is stored under) -> what is wrong with it, or None


class FetchError(Exception):
    """A file could not be fetched, verified or unpacked (network, server, offline store, checksum, check, archive)."""


def is_url(value: Union[str, os.PathLike[str]]) -> bool:
    """Whether ``value`` is an http(s) URL (paths, including ``os.PathLike`` ones, are not)."""
    return isinstance(value, str) and urlparse(value).scheme in ("http", "https")


def is_archive(value: Union[str, os.PathLike[str]]) -> bool:
    """Whether ``value`` (a path or URL) names a ``.zip`` / ``.tar.gz`` / ``.tgz`` file."""
    text = os.fspath(value)
    name = urlparse(text).path if is_url(text) else text
    return name.lower().endswith(ARCHIVE_SUFFIXES)


@dataclass(frozen=True)
class Store:
    """The store under ``root`` (see the module docstring): :meth:`fetch` a URL, :meth:`is_fetched`,
    :meth:`unpacked` (an archive), :meth:`forget` (a URL or archive), :meth:`entry_of` (a path's entry).

    ``check`` vets every body before it enters and every entry before it is handed out (a bad one is
    dropped and fetched again; ``None``: any body will do). ``offline``: why the network may not be
    used, the start of the message when a file is missing (e.g. ``"offline mode is on"``); ``None``
    when it may. ``unwritable_hint``: what to do when the store must be written and cannot (read-only), the end of
    that message.
    """

    root: Path
    check: Optional[Check] = None
    offline: Optional[str] = None
    unwritable_hint: str = ""

    def fetch(
        self,
        url: str,
        *,
        sha256: Optional[str] = None,
        what: str = "",
        label: Optional[str] = None,
        retry_hint: str = "",
        offline_hint: str = "",
        connect_hint: str = "",
        progress: Optional[bool] = None,
    ) -> Path:
        """The stored copy of ``url``, fetched into the store first if it is not there (module docstring).

        ``what`` names the download in messages (e.g. ``model 'x'``; default: the URL); ``label`` is kept in the
        entry's record and given back by :meth:`entry_of` (default: the URL); ``retry_hint`` is what else fetches
        an entry again, offered beside deleting its folder (e.g. ``run `tool download --force x```);
        ``offline_hint`` ends the message of an offline store missing the file, ``connect_hint`` the one-line message
        when the server cannot be reached (what else to do); ``progress=None`` shows a tqdm bar only on a terminal.
        """
        target = self.path_of(url)
        record = _record_path(target)
        label = label or url
        found = self._verified(target, record, url, sha256, retry_hint)
        if found is not None:
            return found
        if self.offline is not None:
            hint = f"; {offline_hint}" if offline_hint else ""
            raise FetchError(f"{self.offline} and {what or url} is not in the cache ({target}){hint}")
        from filelock import Timeout

        try:
            with self._locked(target.parent, ".lock", f"download {_shown(url, what)}"):
                found = self._verified(target, record, url, sha256, retry_hint)  # another process may have fetched it
                if found is not None:
                    return found
                self._drop_unloadable(target, record)
                self._download(url, target, sha256, what, progress, label, (retry_hint, connect_hint))
        except Timeout:
            raise FetchError(f"timed out waiting for another process to download {url} into {target}") from None
        return target

    def path_of(self, url: str) -> Path:
        """Where the store keeps ``url``'s file (whether it is there or not)."""
        name = PurePosixPath(urlparse(url).path).name or "download"
        return self.root / "downloads" / hashlib.sha256(url.encode("utf-8")).hexdigest()[:16] / name

    def is_fetched(self, url: str) -> bool:
        """Whether a complete, checked copy of ``url`` is in the store (no network access)."""
        target = self.path_of(url)
        try:
            return self._verified(target, _record_path(target), url, None, "") is not None
        except FetchError:
            return False

    def entry_of(self, path: Path) -> Optional[tuple[Path, Optional[str]]]:
        """For a path inside the store: the entry's folder (deleting it fetches or unpacks it again) and its label
        (a download's, else the source an archive was unpacked from; None if unknown); None outside the store."""
        try:
            relative = path.resolve().relative_to(self.root.resolve())
        except (OSError, ValueError):
            return None
        if len(relative.parts) < 3 or relative.parts[0] not in ("downloads", "archives"):
            return None
        folder = self.root / relative.parts[0] / relative.parts[1]
        if relative.parts[0] == "downloads":
            info = _read_record(_record_path(folder / relative.parts[2])) or {}
            return folder, info.get("name") or info.get("url")
        try:
            return folder, (folder / ".complete").read_text(encoding="utf-8").strip() or None
        except OSError:
            return folder, None

    def forget(self, source: str) -> list[Path]:
        """Remove what the store holds of ``source`` (a URL, or a local archive's path): its download and unpacked
        copies (the folder of the archive's content, and any folder labelled with ``source``); returns what went."""
        try:
            return self._forget(source)
        except OSError as err:
            raise FetchError(self._unwritable(self.root, f"remove what it holds of {source}", err)) from None

    def _forget(self, source: str) -> list[Path]:
        removed: list[Path] = []
        keys: set[str] = set()
        if is_url(source):
            target = self.path_of(source)
            recorded = self._recorded_sha256(target)
            if recorded is not None:
                keys.add(recorded[:_KEY_CHARS])
            folder = target.parent
            if folder.is_dir():
                with self._locked(folder, ".lock", f"remove what it holds of {source}"):
                    for path in folder.iterdir():
                        if path.name != ".lock":
                            path.unlink()
                            removed.append(path)
        elif Path(source).expanduser().is_file():
            keys.add(self._local_sha256(Path(source).expanduser().resolve())[0][:_KEY_CHARS])
        archives = self.root / "archives"
        wanted = source if is_url(source) else str(Path(source).expanduser().resolve())
        for done in sorted(archives.glob("*/.complete")) if archives.is_dir() else []:
            if done.parent.name in keys or done.read_text(encoding="utf-8").strip() == wanted:
                shutil.rmtree(done.parent)
                removed.append(done.parent)
        return removed

    def unpacked(self, archive: Path, *, source: Optional[str] = None, retry_hint: str = "") -> Path:
        """The folder a zip or tar archive unpacks to (once, in the store, keyed on the archive's content: module
        docstring); ``source`` names it in messages (its URL) and is recorded as its label; ``retry_hint``: what else
        fetches a downloaded archive again (as :meth:`fetch`'s)."""
        archive = archive.resolve()
        name = source or str(archive)
        archives = self.root / "archives"
        info = archive.stat()
        legacy = archives / hashlib.sha256(f"{archive}:{info.st_size}:{info.st_mtime_ns}".encode()).hexdigest()[:16]
        if (legacy / ".complete").is_file():
            return legacy  # unpacked by an older version, under the key it gave
        recorded = self._recorded_sha256(archive)
        digest, memo = (recorded, None) if recorded is not None else self._local_sha256(archive)
        key = digest[:_KEY_CHARS]
        target = archives / key
        done = target / ".complete"
        if not done.is_file():
            with self._locked(archives, f".{key}.lock", f"unpack {name}"):
                if not done.is_file():  # another process may have unpacked it meanwhile
                    if recorded is not None:
                        self._check_download(archive, recorded, name, retry_hint)
                    self._unpack(archive, archives, key, name)
        if memo is not None:
            self._remember(memo)
        return target

    def _unpack(self, archive: Path, archives: Path, key: str, name: str) -> None:
        """Unpack ``archive`` into ``archives/key`` through a temporary folder (under the caller's lock): the folder
        appears whole, with its ``.complete`` label, or not at all."""
        target = archives / key
        tmp = target.with_name(f".{key}.{os.getpid()}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            _extract(archive, tmp, name)
            (tmp / ".complete").write_text(name, encoding="utf-8")
            shutil.rmtree(target, ignore_errors=True)
            os.replace(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _check_download(self, archive: Path, recorded: str, name: str, retry_hint: str) -> None:
        """A downloaded archive about to be unpacked under the sha256 its record gives must have that sha256."""
        actual = _sha256_of(archive)
        if actual != recorded:
            raise FetchError(
                f"{name}: the downloaded archive {archive} has sha256 {actual}, but {recorded} was recorded when it "
                f"was downloaded (damaged since?); delete {archive.parent}{_or(retry_hint)} to fetch it again"
            )

    def _recorded_sha256(self, path: Path) -> Optional[str]:
        """The sha256 recorded for ``path`` when the store downloaded it, if it is a download of this store whose size
        is still the recorded one; else None."""
        try:
            relative = path.resolve().relative_to(self.root.resolve())
            size = path.stat().st_size
        except (OSError, ValueError):
            return None
        if len(relative.parts) != 3 or relative.parts[0] != "downloads":
            return None
        info = _read_record(_record_path(path)) or {}
        digest = info.get("sha256")
        return digest if info.get("size") == size and _is_sha256(digest) else None

    def _local_sha256(self, archive: Path) -> tuple[str, Optional[dict[str, Any]]]:
        """A local archive's sha256, and the memo to remember it by when it was not remembered (else None).

        Remembered (in this process, and in ``archives/.sha256/``) with the archive's path, size, mtime, ctime,
        inode and the sha256 of its first and last ``_SAMPLE_BYTES``: a remembered sha256 is used only while all of
        them are the same, so hashing a large archive is paid once, not at every load.
        """
        memo = {"path": str(archive), **_identity(archive)}
        path = self._memo_path(archive)
        for known in (_SHA256_MEMOS.get(str(archive)), _read_record(path)):
            if known is not None and {k: known.get(k) for k in memo} == memo and _is_sha256(known.get("sha256")):
                _SHA256_MEMOS[str(archive)] = known
                return known["sha256"], None
        memo["sha256"] = _sha256_of(archive)
        if _identity(archive) != {k: memo[k] for k in memo if k not in ("path", "sha256")}:
            return memo["sha256"], None  # changed while it was read: not remembered
        _SHA256_MEMOS[str(archive)] = memo
        return memo["sha256"], memo

    def _memo_path(self, archive: Path) -> Path:
        """Where a local archive's sha256 is remembered: a record named after its path."""
        return _record_path(self.root / "archives" / ".sha256" / hashlib.sha256(str(archive).encode()).hexdigest()[:16])

    def _remember(self, memo: dict[str, Any]) -> None:
        """Keep a local archive's sha256 for the next process, where the store can be written (a read-only store is
        not written to; any failure only means hashing it again next time)."""
        path = self._memo_path(Path(memo["path"]))
        if not os.access(path.parent.parent, os.W_OK):
            return
        with contextlib.suppress(OSError):
            path.parent.mkdir(exist_ok=True)
            write_json_atomically(path, memo)

    @contextlib.contextmanager
    def _locked(self, folder: Path, name: str, doing: str) -> Iterator[None]:
        """Hold the file lock ``folder/name`` (the folder made first): the way into every write to the store. A store
        that cannot be written (read-only, no permission) is a :class:`FetchError` saying so, not an ``OSError``."""
        from filelock import FileLock, Timeout

        try:
            folder.mkdir(parents=True, exist_ok=True)
            lock = FileLock(str(folder / name), timeout=_LOCK_TIMEOUT_S)
            lock.acquire()
        except Timeout:
            raise
        except OSError as err:
            raise FetchError(self._unwritable(folder, doing, err)) from None
        try:
            yield
        finally:
            lock.release()

    def _unwritable(self, folder: Path, doing: str, err: OSError) -> str:
        """The one line for a store that had to be written and could not."""
        hint = f"; {self.unwritable_hint}" if self.unwritable_hint else ""
        return f"cannot write in {folder} to {doing} ({err.strerror or type(err).__name__}){hint}"

    def _verified(self, target: Path, record: Path, url: str, sha256: Optional[str], retry_hint: str) -> Optional[Path]:
        """``target`` if it is a complete download of ``url`` (size as recorded, sha256 as expected, passing the
        check), else None."""
        info = _read_record(record)
        if info is None or not target.is_file() or info.get("url") != url:
            return None
        if target.stat().st_size != info.get("size"):
            return None  # damaged since: fetch again
        if sha256 is not None and info.get("sha256") != sha256.lower():
            raise FetchError(
                f"{target} (from {url}) has sha256 {info.get('sha256')}, but {sha256.lower()} is expected; "
                f"delete {target.parent}{_or(retry_hint)} to fetch it again"
            )
        if self._problem(target, target.name) is not None:
            return None  # stored before the check (an error page?): dropped and fetched again
        return target

    def _problem(self, path: Path, name: str) -> Optional[str]:
        """What the check finds wrong with the file at ``path``, stored as ``name``; None if nothing (or no check)."""
        return None if self.check is None else self.check(path, name)

    def _drop_unloadable(self, target: Path, record: Path) -> None:
        """A stored file that fails the check (and its record, the sha256 of that body) are removed."""
        if target.is_file() and self._problem(target, target.name) is not None:
            target.unlink()
            record.unlink(missing_ok=True)

    def _download(
        self,
        url: str,
        target: Path,
        sha256: Optional[str],
        what: str,
        progress: Optional[bool],
        label: str,
        hints: tuple[str, str],
    ) -> None:
        """Fetch ``url`` into ``target`` under the caller's lock: ``.part`` file, resume, checks, rename. ``hints``:
        the caller's ``retry_hint`` and ``connect_hint``."""
        retry_hint, connect_hint = hints
        part, version = _part_paths(target)
        record = _record_path(target)
        size, digest = _fetch_to(url, part, what, progress, connect_hint)
        problem = self._problem(part, target.name)
        if problem is not None:
            _discard(part, version)
            raise FetchError(
                f"downloading {_shown(url, what)} failed: the server answered 200, but {problem}; nothing was put in "
                "the cache, so the next try downloads it again"
            )
        expected = (sha256 or "").lower() or None
        first = _read_record(record)
        recorded = first.get("sha256") if first and first.get("url") == url else None
        for wanted, why in ((expected, "is expected"), (recorded, f"was recorded at the first download ({record})")):
            if wanted is not None and digest != wanted:
                _discard(part, version)
                raise FetchError(
                    f"{url}: the downloaded file has sha256 {digest}, but {wanted} {why}; refused "
                    f"(if the published file really changed, delete {target.parent}{_or(retry_hint)})"
                )
        os.replace(part, target)
        version.unlink(missing_ok=True)
        write_json_atomically(record, {"url": url, "size": size, "sha256": digest, "name": label})


# local archives' sha256 already known in this process: resolved path -> its memo (Store._local_sha256)
_SHA256_MEMOS: dict[str, dict[str, Any]] = {}


def _identity(path: Path) -> dict[str, Any]:
    """What tells that a file is unchanged without reading it all: size, mtime, ctime, inode, and the sha256 of its
    first and last ``_SAMPLE_BYTES`` (where a zip keeps its members' CRCs and a gzip the CRC of all it holds)."""
    info = path.stat()
    sample = hashlib.sha256()
    with open(path, "rb") as handle:
        sample.update(handle.read(_SAMPLE_BYTES))
        handle.seek(max(info.st_size - _SAMPLE_BYTES, 0))
        sample.update(handle.read(_SAMPLE_BYTES))
    return {
        "size": info.st_size,
        "mtime_ns": info.st_mtime_ns,
        "ctime_ns": info.st_ctime_ns,
        "inode": info.st_ino,
        "sample": sample.hexdigest(),
    }


def _is_sha256(value: Any) -> bool:
    """Whether ``value`` is a sha256 as records keep it (64 lowercase hex digits): the only text that names a folder."""
    return isinstance(value, str) and re.fullmatch(r"[0-9a-f]{64}", value) is not None


def _or(hint: str) -> str:
    """`` or HINT`` when there is a hint."""
    return f" or {hint}" if hint else ""


def _record_path(target: Path) -> Path:
    return target.with_name(target.name + ".json")


def _part_paths(target: Path) -> tuple[Path, Path]:
    """The ``.part`` file a transfer streams into, and the ``.part.json`` version (ETag or Last-Modified) it holds."""
    part = target.with_name(target.name + ".part")
    return part, part.with_name(part.name + ".json")


def _read_record(record: Path) -> Optional[dict[str, Any]]:
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _fetch_to(url: str, part: Path, what: str, progress: Optional[bool], connect_hint: str = "") -> tuple[int, str]:
    """Stream ``url`` into ``part`` (resuming what is there), returning (size, sha256) of the whole file.

    A resume asks for the rest with ``Range`` and ``If-Range`` (the version the ``.part`` holds); a
    reply that is not exactly that rest of that version (a 206 from another offset or of another
    version) throws the ``.part`` away and starts again from zero. ``Accept-Encoding: identity``
    keeps servers from compressing; a server that compresses anyway is decoded, its length checked
    on the wire, and never resumed (ranges would count compressed bytes). Up to ``_ATTEMPTS``
    requests; each failure becomes a :class:`FetchError` naming the download (no connection at all: one short
    line naming the host, ending with ``connect_hint``).
    """
    import requests

    name = _shown(url, what)
    transfer = _Transfer(url, part, progress)
    try:
        for attempt in range(_ATTEMPTS):
            try:
                fetched = transfer.attempt()
            except (
                requests.exceptions.ChunkedEncodingError,
                requests.exceptions.ConnectionError,
                requests.exceptions.Timeout,
                _CutOff,
            ) as err:
                if transfer.never_connected(err):
                    raise FetchError(_no_connection(url, what, err, connect_hint)) from None
                transfer.broke_off(err, name, last=attempt + 1 == _ATTEMPTS)
                continue
            except requests.exceptions.HTTPError as err:
                transfer.discard()
                raise FetchError(f"downloading {name} failed: the server answered {_short(err)}") from None
            except requests.exceptions.RequestException as err:
                transfer.discard()
                raise FetchError(f"downloading {name} failed: {_short(err)}") from None
            if fetched is not None:
                return fetched
        why = f": {transfer.mismatch}" if transfer.mismatch else ""
        raise FetchError(f"downloading {name} failed after {_ATTEMPTS} attempts{why}; nothing was put in the cache")
    finally:
        transfer.close()


def _no_connection(url: str, what: str, err: BaseException, hint: str) -> str:
    """The one line for a server that could not be reached: the download, the host, why in a few words, the hint
    (never the URL in full, nor requests' and urllib3's nested reprs)."""
    address = urlparse(url)
    host = (address.hostname or "")[:80] + (f":{address.port}" if address.port else "")
    subject = what if what and url not in what else PurePosixPath(address.path).name[:60] or host
    said = f"downloading {subject} failed: could not connect to {host} ({_connect_reason(err)})"
    return said + (f"; {hint}" if hint else "")


def _connect_reason(err: BaseException) -> str:
    """Why a connection failed, in a few words, from the innermost error requests wraps."""
    import socket

    import requests

    if isinstance(err, requests.exceptions.ProxyError):
        return "proxy unreachable"
    if isinstance(err, requests.exceptions.ConnectTimeout):
        return "timed out"
    seen: list[BaseException] = []
    pending: list[Any] = [err]
    while pending:  # the error and every error it carries (urllib3's .reason, args, causes), outermost first
        current = pending.pop(0)
        if not isinstance(current, BaseException) or any(current is s for s in seen):
            continue
        seen.append(current)
        pending += [getattr(current, "reason", None), *current.args, current.__cause__, current.__context__]
    for kind, words in (
        (socket.gaierror, "host name not resolved"),
        (ConnectionRefusedError, "connection refused"),
        (TimeoutError, "timed out"),
        (ConnectionResetError, "connection reset"),
    ):
        if any(isinstance(e, kind) for e in seen):
            return words
    return type(err).__name__


def _shown(url: str, what: str) -> str:
    """How messages name a download: ``what`` (e.g. ``model 'original'``) with the URL, unless it already has it."""
    return what if url in what else f"{what} ({url})" if what else url


class _Transfer:
    """One file's transfer into its ``.part`` over one HTTP session, across attempts: what a resume needs (the
    ``.part`` and the version beside it), whether the last reply can be resumed, the progress bar."""

    def __init__(self, url: str, part: Path, progress: Optional[bool]):
        import requests

        self.url = url
        self.part = part
        self.version_path = part.with_name(part.name + ".json")
        self.progress = progress
        self.session = requests.Session()
        self.bar: Any = None  # one tqdm bar for all attempts, made at the first reply
        self.resumable = False  # whether the last reply can be resumed (Accept-Ranges: bytes and a version to ask for)
        self.mismatch = ""  # why the last partial reply was refused, for the message if no attempt succeeds
        self.replied = False  # whether the server replied to the last request

    def attempt(self) -> Optional[tuple[int, str]]:
        """One request: the rest of the ``.part``'s version if it has one, else the whole file. Returns (size,
        sha256) of the whole file once written; None when the reply cannot be used, the ``.part`` is dropped and the
        next attempt starts again from zero. Raises ``_CutOff`` or requests' errors when the transfer fails."""
        have, version = _resume_point(self.part, self.version_path, self.url)
        headers = {"Accept-Encoding": "identity"}
        if have:
            headers.update({"Range": f"bytes={have}-", "If-Range": version})
        self.replied = False
        with self.session.get(
            self.url, stream=True, headers=headers, timeout=(_CONNECT_TIMEOUT_S, _READ_TIMEOUT_S)
        ) as response:
            self.replied = True
            if response.status_code == 416 and have:  # nothing left to send, or not of this version: start over
                self.discard()
                return None
            response.raise_for_status()
            encoded = response.headers.get("Content-Encoding", "").strip().lower() not in ("", "identity")
            resumed = response.status_code == 206
            if resumed:
                problem = _range_problem(response, have, version, encoded)
                if problem is not None:
                    self.mismatch = problem
                    self.discard()
                    return None
            start = have if resumed else 0
            self._note_version(response, encoded, resumed)
            length = response.headers.get("Content-Length")
            wire = int(length) if length is not None and length.isdigit() else None  # bytes on the wire
            bar = self._show(total=start + wire if wire is not None and not encoded else None, start=start)
            self._write(response, append=resumed, bar=bar)
            got = self.part.stat().st_size
            received = response.raw.tell() if encoded else got - start
            if wire is not None and received != wire:
                raise _CutOff(f"got {received:,} of {wire:,} bytes")
            return got, _sha256_of(self.part)

    def _note_version(self, response: Any, encoded: bool, resumed: bool) -> None:
        """Whether a cut-off of this reply could be resumed (not compressed, ``Accept-Ranges: bytes``, a version for
        ``If-Range``); a reply of the whole file replaces the ``.part``, with that version recorded beside it."""
        served = None if encoded else _version_of(response)
        self.resumable = served is not None and response.headers.get("Accept-Ranges", "").lower() == "bytes"
        if not resumed:
            self.discard()
            if self.resumable:
                write_json_atomically(self.version_path, {"url": self.url, "version": served})

    def _show(self, total: Optional[int], start: int) -> Any:
        """The progress bar, made at the first reply and set back to ``start`` of ``total`` bytes at a later one."""
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(
                total=total,
                initial=start,
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                desc=PurePosixPath(urlparse(self.url).path).name,
                disable=_bar_disabled(self.progress),
                leave=False,
            )
        else:
            self.bar.reset(total=total)
            self.bar.update(start)
        return self.bar

    def _write(self, response: Any, append: bool, bar: Any) -> None:
        """The reply's body into the ``.part`` (after what it holds when ``append``), in small reads so that a
        cut-off keeps most of what came."""
        with open(self.part, "ab" if append else "wb") as handle:
            for chunk in response.iter_content(1 << 16):
                handle.write(chunk)
                bar.update(len(chunk))

    def never_connected(self, err: BaseException) -> bool:
        """Whether ``err`` is a connection that failed before the server replied, with no bytes kept from an earlier
        try (the ``.part`` is then dropped): the network, not the transfer."""
        import requests

        if self.replied or not isinstance(err, requests.exceptions.ConnectionError):
            return False
        if self.part.is_file() and self.part.stat().st_size > 0:
            return False
        self.discard()
        return True

    def broke_off(self, err: BaseException, name: str, last: bool) -> None:
        """After a transfer failed mid-way: keep the ``.part`` for the next attempt (or the next call) when the reply
        can be resumed and bytes came, else drop it; raise a :class:`FetchError` when this was the ``last`` attempt
        or there is nothing to resume (a connection that never replied is :meth:`never_connected`'s)."""
        got = self.part.stat().st_size if self.part.is_file() else 0
        can_resume = got > 0 and self.resumable
        if not can_resume:
            self.discard()
        if last or not can_resume:
            kept = f"; the {got:,} bytes received are kept aside to resume on the next try" if can_resume else ""
            raise FetchError(
                f"downloading {name} failed: the transfer was cut off ({_short(err)}); no incomplete file was put in "
                f"the cache{kept}"
            ) from None

    def discard(self) -> None:
        """Drop the ``.part`` and its recorded version."""
        _discard(self.part, self.version_path)

    def close(self) -> None:
        """Close the progress bar and the HTTP session."""
        if self.bar is not None:
            self.bar.close()
        self.session.close()


def _resume_point(part: Path, version_path: Path, url: str) -> tuple[int, str]:
    """``(bytes in the .part, the version they are of)``; ``(0, "")`` when there is no part of a known version."""
    info = _read_record(version_path)
    have = part.stat().st_size if part.is_file() else 0
    if not have or info is None or info.get("url") != url or not isinstance(info.get("version"), str):
        _discard(part, version_path)  # bytes of an unknown version are never resumed
        return 0, ""
    return have, info["version"]


def _version_of(response: Any) -> Optional[str]:
    """What ``If-Range`` can name of a reply: its strong ETag, else its Last-Modified date, else None."""
    etag = response.headers.get("ETag", "").strip()
    if etag and not etag.startswith("W/"):  # weak ETags are not allowed in If-Range
        return etag
    modified = response.headers.get("Last-Modified", "").strip()
    return modified or None


def _range_problem(response: Any, have: int, version: str, encoded: bool) -> Optional[str]:
    """Why a 206 reply is not the rest (from byte ``have``) of the version the ``.part`` holds; None if it is."""
    if not have:
        return "the server sent a partial reply (206) to a request for the whole file"
    if encoded:
        return "the server compressed a partial reply (Content-Encoding), so its bytes cannot be appended"
    found = re.fullmatch(r"\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*", response.headers.get("Content-Range", ""))
    if found is None:
        return f"the server's partial reply has no usable Content-Range ({response.headers.get('Content-Range')!r})"
    first, last, total = int(found[1]), int(found[2]), found[3]
    if first != have or (total != "*" and last + 1 != int(total)):
        return f"asked for bytes {have}- the server sent {found[0].strip()!r}"
    length = response.headers.get("Content-Length")
    if length is not None and length.isdigit() and int(length) != last - first + 1:
        return f"the partial reply's Content-Length {length} disagrees with its Content-Range {found[0].strip()!r}"
    served = _version_of(response)
    if served is not None and served != version:
        return f"the file changed on the server since the transfer began (version {served}, was {version})"
    return None


def _discard(part: Path, version_path: Path) -> None:
    part.unlink(missing_ok=True)
    version_path.unlink(missing_ok=True)


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


# -- archives ----------------------------------------------------------------------------------


def _extract(archive: Path, into: Path, name: str) -> None:
    """Every regular file of a zip or tar archive, after checking every member's name, kind and declared size."""
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            infos = zf.infolist()
            _check_members([(info.filename, _zip_kind(info)) for info in infos], name)
            files = [info for info in infos if not info.is_dir()]
            _check_expansion([(info.filename, info.file_size) for info in files], archive, into, name)
            for info in files:
                _write_member(into, info.filename, zf.open(info), info.file_size, name)
        return
    try:
        tf = tarfile.open(archive, "r:*")  # noqa: SIM115 (the `with tf` below closes it; opening alone is guarded)
    except tarfile.TarError as err:
        raise FetchError(f"{name} is neither a zip nor a tar archive ({err})") from None
    with tf:
        entries = tf.getmembers()
        _check_members([(m.name, _tar_kind(m)) for m in entries], name)
        regular = [member for member in entries if member.isfile()]
        _check_expansion([(member.name, member.size) for member in regular], archive, into, name)
        for member in regular:
            handle = tf.extractfile(member)
            assert handle is not None
            _write_member(into, member.name, handle, member.size, name)


def _check_expansion(members: list[tuple[str, int]], archive: Path, into: Path, name: str) -> None:
    """Refuse, before writing anything, an archive whose declared sizes add up to a bomb or more than the free space.

    The bound is ``MAX_EXPANSION`` times the archive's size (at least ``MIN_EXPANSION_BYTES``): model
    weights hardly compress, so a real model archive is far below it. The error names the member
    at which the running total crosses the bound.
    """
    packed = archive.stat().st_size
    bound = max(MAX_EXPANSION * packed, MIN_EXPANSION_BYTES)
    free = _free_bytes(into) - FREE_RESERVE_BYTES
    total = 0
    for member, size in members:
        total += size
        if total > bound:
            raise FetchError(
                f"{name}: member {member!r} would bring what the archive unpacks to {_mib(total)}, more than "
                f"{MAX_EXPANSION} times the archive's {_mib(packed)}; refused (an archive bomb?)"
            )
        if total > free:
            raise FetchError(
                f"{name}: unpacking needs {_mib(total)} by member {member!r}, but only {_mib(max(free, 0))} can be "
                f"used in {into.parent} (keeping {_mib(FREE_RESERVE_BYTES)} free); refused: free some disk space"
            )


def _free_bytes(folder: Path) -> int:
    """Free bytes on the disk that holds ``folder``."""
    return shutil.disk_usage(folder).free


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


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
            raise FetchError(f"{name}: member {member!r} has an absolute path; refused (unsafe archive)")
        if ".." in parts:
            raise FetchError(f"{name}: member {member!r} leads outside the archive ('..'); refused (unsafe archive)")
        if kind not in ("file", "dir"):
            raise FetchError(f"{name}: member {member!r} is {kind}; refused (links could point outside the archive)")


def _write_member(into: Path, member: str, source: Any, declared: int, name: str) -> None:
    """Copy one member, never more than its declared size; a failed write is a FetchError naming the member."""
    path = into.joinpath(*PurePosixPath(member.replace("\\", "/")).parts)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with source, open(path, "wb") as out:
            written = 0
            for chunk in iter(lambda: source.read(_CHUNK), b""):
                written += len(chunk)
                if written > declared:
                    raise FetchError(
                        f"{name}: member {member!r} expands beyond its declared {declared:,} bytes; refused"
                    )
                out.write(chunk)
    except OSError as err:
        raise FetchError(f"{name}: cannot unpack member {member!r} into {into.parent}: {err.strerror or err}") from None
