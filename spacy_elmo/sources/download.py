"""The package's downloads: the generic fetcher (:mod:`.fetch`) with spacy-elmo's store, checks and advice.

The store is ``SPACY_ELMO_HOME`` (else the user cache directory; a read-only one is read, and what would need a
write says to point ``SPACY_ELMO_HOME`` at a writable folder); every body is checked to be what
its name says before it enters it (:mod:`.download_checks`: an HDF5 file that opens, a JSON object,
an ELMo archive); ``SPACY_ELMO_OFFLINE=1`` keeps it off the network. Messages about a cached file
name the folder to delete and the command that does it, ``spacy-elmo download --force NAME``
(:func:`forget`). Errors are :class:`DownloadError`, a ``WeightFileError``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Optional

from ..bilm.weights import WeightFileError
from .download_checks import content_problem
from .fetch import FetchError, Store, is_archive, is_url  # noqa: F401 (is_archive, is_url re-exported)

HOME_ENV = "SPACY_ELMO_HOME"
OFFLINE_ENV = "SPACY_ELMO_OFFLINE"


class DownloadError(WeightFileError, FetchError):
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


def store() -> Store:
    """The download cache as the environment sets it now: under :func:`home`, ELMo's checks, offline or not."""
    offline = f"offline mode is on ({OFFLINE_ENV}=1)" if is_offline() else None
    unwritable = f"set {HOME_ENV} to a writable folder (a copy of this cache keeps what it holds)"
    return Store(home(), check=content_problem, offline=offline, unwritable_hint=unwritable)


def cached_path(
    url: str,
    *,
    sha256: Optional[str] = None,
    what: str = "",
    download_name: Optional[str] = None,
    progress: Optional[bool] = None,
) -> Path:
    """The local copy of ``url``, downloaded into the cache first if it is not there (:mod:`.fetch`).

    ``what`` names the model in error messages (e.g. ``model 'original'``); ``download_name`` is what
    offline mode and cache errors tell the user to pass to ``spacy-elmo download`` (default: the URL);
    ``progress=None`` shows a tqdm bar only on a terminal.
    """
    name = download_name or url
    with _download_errors():
        return store().fetch(
            url,
            sha256=sha256,
            what=what,
            label=name,
            retry_hint=f"run `{force_command(name)}`",
            offline_hint=(
                f"on a machine with a network run `spacy-elmo download {name}` "
                f"(with {HOME_ENV} pointing at the same cache), or unset {OFFLINE_ENV}"
            ),
            connect_hint="check the network or proxy, or pass a folder holding the model's files",
            progress=progress,
        )


def is_cached(url: str) -> bool:
    """Whether a complete download of ``url`` is in the cache (no network access)."""
    return store().is_fetched(url)


def unpacked_archive(archive: Path, *, source: Optional[str] = None) -> Path:
    """The directory an archive unpacks to (once, in the cache); ``source`` names it in messages (its URL)."""
    with _download_errors():
        return store().unpacked(archive, source=source, retry_hint=f"run `{force_command(source)}`" if source else "")


def forget(source: str) -> list[Path]:
    """Remove what the cache holds of ``source`` (a URL, or a local archive's path): its download and unpacked
    copies."""
    with _download_errors():
        return store().forget(source)


def force_command(name: str) -> str:
    """The command that drops a model's cached files and fetches them again."""
    return f"spacy-elmo download --force {name}"


def cache_advice(path: Path) -> str:
    """For a file inside the download cache: "; delete FOLDER or run `spacy-elmo download --force NAME`", else ""."""
    entry = store().entry_of(path)
    if entry is None:
        return ""
    folder, source = entry
    command = f" or run `{force_command(source)}`" if source else ""
    return f"; it came from the download cache: delete {folder}{command} to fetch it again"


@contextlib.contextmanager
def _download_errors() -> Iterator[None]:
    """The fetcher's errors as :class:`DownloadError` (a ``WeightFileError``: a model that cannot be loaded)."""
    try:
        yield
    except DownloadError:
        raise
    except FetchError as err:
        raise DownloadError(str(err)) from None
