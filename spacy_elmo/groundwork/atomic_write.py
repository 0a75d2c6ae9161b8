"""Files that appear whole: every writer of the package writes through :func:`atomic_path`.

A crash, a full disk or Ctrl-C in the middle of a write leaves either the old file or the new one,
never half of one: the bytes go to a temporary file beside the target (same folder, so the same
file system), which replaces the target in one ``os.replace`` once it is complete, and is removed on
any error. Its name is unique to the process and call, so two writers of one file never share it.
A write the disk refuses (no space, a size limit, a quota) is a :class:`WriteFailedError` naming the file.
Below every group (nothing of the package but the file names imported), so that each may write through it.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from pathlib import Path
from typing import Any

from .file_names import PathLike

# the errors of a write that the disk refused: no space, a file-size limit, a quota
_DISK_FULL = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT}


class WriteFailedError(OSError):
    """An output file could not be written (no space left on the device, file too large, an I/O error)."""

    def __str__(self) -> str:
        return str(self.strerror)  # the message names path and reason already; no "[Errno 28]" in front


def write_failed(err: OSError, path: PathLike) -> WriteFailedError:
    """``err`` as a :class:`WriteFailedError` whose one-line message names ``path`` and the reason."""
    reason = err.strerror or str(err)
    number = err.errno or errno.EIO
    return WriteFailedError(
        number, f"cannot write {path}: {reason.lower()} (errno {errno.errorcode.get(number, number)})"
    )


@contextmanager
def reported_as(path: PathLike) -> Iterator[None]:
    """A full disk (or a file-size limit, a quota) while the block writes ``path`` raises :class:`WriteFailedError`
    naming ``path``, one line for the CLI, not an ``OSError`` naming a temporary file."""
    try:
        yield
    except OSError as err:
        cause = err.__cause__ if isinstance(err, WriteFailedError) else err  # the outermost name wins (a temporary's
        if not isinstance(cause, OSError) or cause.errno not in _DISK_FULL:  # writer inside names the temporary)
            raise
        raise write_failed(cause, path) from cause


@contextmanager
def atomic_path(path: PathLike, *, report: bool = True) -> Iterator[Path]:
    """A temporary path to write ``path``'s new content to (a file or a folder); it becomes ``path`` when the block
    ends without an error, and is removed otherwise (a full disk: :class:`WriteFailedError` naming ``path``, unless
    not ``report``: the caller names the file that failed)."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with reported_as(target) if report else nullcontext():
            yield tmp
        os.replace(tmp, target)
    finally:
        if tmp.is_dir() and not tmp.is_symlink():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)


@contextmanager
def atomic_paths(*paths: PathLike) -> Iterator[list[Path]]:
    """Temporary paths for several files that belong together (a model's options and weights): none of them
    replaces its target unless every one was written, so a full disk or an error leaves the old set whole.

    The renames follow each other once all the bytes are on disk (a rename needs no space); only a crash in
    those microseconds could leave a mixed set. Write each file inside :func:`reported_as` its target, so an
    error names the file that failed.
    """
    with ExitStack() as stack:
        yield [stack.enter_context(atomic_path(path, report=False)) for path in paths]


def write_text_atomically(path: PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through :func:`atomic_path`."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json_atomically(path: PathLike, data: Any, indent: int = 2) -> None:
    """Write ``data`` as JSON (and a final newline) to ``path`` through :func:`atomic_path`."""
    write_text_atomically(path, json.dumps(data, indent=indent) + "\n")


def process_exists(pid: int) -> bool:
    """Whether process ``pid`` runs on this machine, for telling a dead writer's temporary files from a live one's
    (another user's process counts as running; on Windows, where ``os.kill(pid, 0)`` would end it, every one)."""
    if os.name == "nt":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True
    return True
