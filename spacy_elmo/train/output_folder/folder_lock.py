"""One run per output folder: the exclusive lock a run holds on the folder it writes, and the temporaries of killed
runs cleared when a run takes a folder.

Two runs writing one folder (``spacy-elmo train out ... & spacy-elmo train out ...``) would each replace the
other's files: both say "saved to out", and the folder holds one run's model, or a mix. So whatever writes a
run's folder (a training run, an adaptation, ``evaluate --record``, ``prepare-corpus``) claims it first
(:func:`claim_folder`) and keeps it until it ends. The claim is an OS-level lock (filelock's, on
:data:`LOCK_NAME` in the folder): the kernel releases it when its process ends, however it ends, so a killed
run never blocks the next one. A second run asking for a claimed folder is refused at once with
:class:`FolderInUseError` (one line naming the folder), never left waiting. The lock file goes with the claim
that made it: a refused run, or one that failed before writing, leaves the folder as it was (a killed run
leaves its empty lock file, which blocks nothing).
Within one thread claims nest (an adaptation claims its folder, then its training run claims it again).

A run killed while it writes a file (SIGKILL, the OOM killer, a power cut) leaves that file's hidden temporary
(:func:`~spacy_elmo.groundwork.atomic_write.atomic_path`'s ``.NAME.PID.HEX.tmp``), as large as the file. Whoever
claims the folder next removes the temporaries of processes that no longer run (and of its own process id: a restarted
container may give the new run the killed one's), so ``--resume`` after a kill leaves none behind.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

from filelock import FileLock, Timeout

from ...groundwork.atomic_write import process_exists
from ...groundwork.file_names import PathLike
from ...groundwork.fork_safety import ForkSafeLock

LOCK_NAME = ".lock"  # in the claimed folder; hidden, never a model file
# atomic_path's temporary of a file NAME: ".NAME.PID.HEX.tmp" (groundwork/atomic_write.py writes them)
TEMPORARY = re.compile(r"^\..+\.(?P<pid>\d+)\.[0-9a-f]{8}\.tmp$")

F = TypeVar("F", bound=Callable[..., Any])


class FolderInUseError(ValueError):
    """Another run (another process, or another thread of this one) holds the folder's lock."""


@dataclass
class _Held:
    """A folder this process has claimed: its lock, the thread that claimed it, how many claims are open."""

    lock: FileLock
    thread: int
    count: int
    created: bool  # the claim made the folder: an empty one is removed again when the last claim ends
    made_lock_file: bool  # the claim made the lock file: it is removed again (a refused run leaves nothing)


_HELD: dict[Path, _Held] = {}
_GUARD = ForkSafeLock()  # guards _HELD


class FolderClaim:
    """One claim on a folder (:func:`claim_folder`); :meth:`release` ends it (once: further calls do nothing),
    :meth:`hold` claims the folder again after a release."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.held = True

    def hold(self) -> None:
        """Claim the folder again if this claim was released (a :class:`FolderInUseError` if another run has it)."""
        if not self.held:
            _acquire(self.directory)
            self.held = True

    def release(self) -> None:
        """End this claim; the lock is released when the folder's last claim in this process ends."""
        if self.held:
            self.held = False
            _release(self.directory)

    def __del__(self) -> None:  # a claim dropped without release() (an object that never ran)
        with contextlib.suppress(Exception):
            self.release()


def claim_folder(directory: PathLike) -> FolderClaim:
    """Claim ``directory`` (made if missing) for this run: a :class:`FolderInUseError` if another run holds it;
    else stale temporaries of killed runs in it are removed (:func:`remove_stale_temporaries`)."""
    path = Path(directory).expanduser()
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(f"{path} is a file, not a folder: write into a folder")
    created = not path.exists()
    path.mkdir(parents=True, exist_ok=True)
    key = path.resolve()
    _acquire(key, created)
    return FolderClaim(key)


@contextmanager
def folder_claimed(directory: PathLike) -> Iterator[Path]:
    """The block runs with ``directory`` claimed (:func:`claim_folder`); yields the folder."""
    claim = claim_folder(directory)
    try:
        yield claim.directory
    finally:
        claim.release()


def holds_output_folder(function: F) -> F:
    """``function(output_dir, ...)`` runs with ``output_dir`` claimed, released when it returns or raises."""

    @functools.wraps(function)
    def claimed(output_dir: PathLike, *args: Any, **kwargs: Any) -> Any:
        with folder_claimed(output_dir):
            return function(output_dir, *args, **kwargs)

    return claimed  # type: ignore[return-value]


def release_claim_on_error(method: F) -> F:
    """A method (a constructor) of an object whose ``folder_claim`` (a :class:`FolderClaim` or None) it may set: an
    error in it releases the claim (the object will never run)."""

    @functools.wraps(method)
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except BaseException:
            claim: Optional[FolderClaim] = getattr(self, "folder_claim", None)
            if claim is not None:
                claim.release()
            raise

    return guarded  # type: ignore[return-value]


def hold_claim_while(method: F) -> F:
    """A method (a run) of an object holding ``folder_claim``: the claim is held while it runs (claimed again if it
    was released) and released when it returns or raises."""

    @functools.wraps(method)
    def held(self: Any, *args: Any, **kwargs: Any) -> Any:
        claim: Optional[FolderClaim] = getattr(self, "folder_claim", None)
        if claim is not None:
            claim.hold()
        try:
            return method(self, *args, **kwargs)
        finally:
            if claim is not None:
                claim.release()

    return held  # type: ignore[return-value]


def remove_stale_temporaries(directory: Path) -> list[Path]:
    """Remove the temporaries (``.NAME.PID.HEX.tmp``) in ``directory`` of processes that no longer run, or of this
    process's id (it writes none there before it holds the folder); returns what was removed."""
    removed = []
    for path in directory.iterdir():
        match = TEMPORARY.match(path.name)
        if match is None or not path.is_file() or path.is_symlink():
            continue
        pid = int(match["pid"])
        if pid == os.getpid() or not process_exists(pid):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed.append(path)
    return removed
    return True


def _acquire(key: Path, created: bool = False) -> None:
    """This thread's claim on the resolved folder ``key``: nested within the thread, else the OS lock, taken now."""
    with _GUARD:
        held = _HELD.get(key)
        if held is not None:
            if held.thread != threading.get_ident():
                raise FolderInUseError(f"{key} is in use by another run in this process: write into another folder")
            held.count += 1
            return
        lock_path = key / LOCK_NAME
        existed = lock_path.exists()
        lock = FileLock(str(lock_path), thread_local=False)  # this module tracks the threads (a claim may end in
        # another thread: a dropped claim's __del__)
        try:
            lock.acquire(timeout=0)
        except Timeout:
            raise FolderInUseError(
                f"{key} is in use by another spacy-elmo run (it holds {LOCK_NAME} there): wait for it to end, or "
                "write into another folder"
            ) from None
        _HELD[key] = _Held(lock, threading.get_ident(), 1, created, not existed)
    remove_stale_temporaries(key)


def _release(key: Path) -> None:
    """End one claim on ``key``; the last one releases the OS lock (and removes a folder it made that stayed empty)."""
    with _GUARD:
        held = _HELD.get(key)
        if held is None:
            return
        held.count -= 1
        if held.count > 0:
            return
        del _HELD[key]
        if held.made_lock_file:  # unlinked while still locked: a run opening the name from now makes a new file
            with contextlib.suppress(OSError):
                (key / LOCK_NAME).unlink()
        held.lock.release(force=True)
        if held.created:  # the folder this claim made, if nothing was written into it
            with contextlib.suppress(OSError):
                key.rmdir()


__all__ = [
    "LOCK_NAME",
    "FolderClaim",
    "FolderInUseError",
    "claim_folder",
    "folder_claimed",
    "hold_claim_while",
    "holds_output_folder",
    "release_claim_on_error",
    "remove_stale_temporaries",
]
