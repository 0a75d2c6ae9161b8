"""How the files a run writes name the paths it was given: never as this machine spells them.

A model folder is shared (a colleague's copy, a wheel's package data), and so is a prepared corpus: what their
``metrics.json``, ``adaptation.json``, ``corpus.json`` and checkpoint record of a path must not carry the
directories of the machine that wrote them (a home folder, a work folder). A record names a path inside its folder
relative to that folder, the folder itself and anything outside it by its name alone; what identifies a corpus
is recorded beside it (a prepared corpus's fingerprint, word counts, each file's sha256). A checkpoint, which
``--resume`` reads to open the training text again, keeps the way from its folder to each file instead
(:func:`resumable_path`, read back by :func:`resolved_path`), from the folder's real path (symbolic links followed)
to the file, so a run folder moved together with its text still resumes, and so does one reached through a link.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from pathlib import PurePath
from typing import Any, Optional, Union

from ...groundwork.file_names import PathLike

COMMAND = "command"  # the key under which a record keeps a command line (metrics.json, its stages, corpus.json)


def absolute_path(path: PathLike, cwd: Optional[PathLike] = None) -> str:
    """``path`` from the root (``~`` expanded; a relative one taken from ``cwd``, by default the working directory),
    symbolic links left as they are."""
    expanded = os.path.expanduser(os.fspath(path))
    return os.path.normpath(os.path.join(os.fspath(cwd) if cwd is not None else os.getcwd(), expanded))


def recorded_path(path: PathLike, folder: PathLike) -> str:
    """How a record in ``folder`` names ``path``: relative to ``folder`` when it lies inside it, the name alone
    for the folder itself and for anything outside it. A relative ``path`` is a recorded one already: unchanged."""
    text = os.fspath(path)
    if not os.path.isabs(text):
        return PurePath(text).as_posix()
    target, home = os.path.normpath(text), absolute_path(folder)
    inside = target != home and os.path.commonpath([target, home]) == home
    if inside:
        return PurePath(os.path.relpath(target, home)).as_posix()
    return PurePath(target).name or target  # (the root itself has no name)


def is_path_argument(value: str) -> bool:
    """Whether a command-line value names a path: a separator (not a URL's), ``~``, ``.`` or ``..``; a bare word
    (a preset, a model name, a number) is not one, and recorded as it is."""
    if "://" in value:
        return False
    return "/" in value or os.sep in value or value.startswith("~") or value in (".", "..")


def recorded_argument(value: str, folder: PathLike, cwd: Optional[PathLike] = None) -> str:
    """A command-line value as a record in ``folder`` keeps it: a path (:func:`is_path_argument`) by
    :func:`recorded_path`, taken from ``cwd`` first when the value is the running command's own (relative to where
    it ran); ``--option=PATH`` alike; anything else unchanged."""
    option, equals, rest = value.partition("=")
    if equals and option.startswith("-"):
        return f"{option}={recorded_argument(rest, folder, cwd)}"
    if not is_path_argument(value):
        return value
    return recorded_path(absolute_path(value, cwd) if cwd is not None else os.path.expanduser(value), folder)


def recorded_command(argv: Union[str, Sequence[str]], folder: PathLike, cwd: Optional[PathLike] = None) -> str:
    """A command line (``sys.argv``, or a recorded line) as a record in ``folder`` keeps it: the program as it was
    typed (``spacy-elmo``; ``python -m spacy_elmo`` for its ``.../spacy_elmo/__main__.py``), every path argument by
    :func:`recorded_argument`. ``cwd``: where the command ran, for the running command's relative paths; a recorded
    line has none."""
    args = shlex.split(argv) if isinstance(argv, str) else list(argv)
    if not args:
        return ""
    program = PurePath(args[0])
    if program.name == "__main__.py" and program.parent.name:  # what `python -m PACKAGE` puts in sys.argv[0]
        head = f"python -m {program.parent.name}"
    else:
        head = shlex.quote(recorded_argument(args[0], folder, cwd))
    return " ".join([head, *(shlex.quote(recorded_argument(a, folder, cwd)) for a in args[1:])])


def recorded(value: Any, folder: PathLike) -> Any:
    """A JSON value (a ``metrics.json``, a manifest, an adaptation's result) as a record in ``folder`` keeps it:
    every string that is a path from the root by :func:`recorded_path`, every ``"command"`` by
    :func:`recorded_command`. Recorded values are kept: applying it twice changes nothing more."""
    if isinstance(value, dict):
        return {
            k: recorded_command(v, folder) if k == COMMAND and isinstance(v, str) else recorded(v, folder)
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [recorded(v, folder) for v in value]
    if isinstance(value, str) and os.path.isabs(value) and "\n" not in value:
        return recorded_path(value, folder)
    return value


def real_folder(folder: PathLike) -> str:
    """``folder`` from the root with every symbolic link followed: the one spelling of a folder that is the same
    whichever way it is reached (a linked parent, ``.`` from inside it, its real path)."""
    return os.path.realpath(absolute_path(folder))


def resumable_path(path: PathLike, folder: PathLike) -> str:
    """The way from ``folder`` to ``path`` (``../text/train.txt``), which :func:`resolved_path` follows back: what
    a checkpoint keeps of a file that ``--resume`` opens again. The way starts at the folder's real path
    (:func:`real_folder`), so it leads to the file however the folder is reached later; from the root where there
    is no way (another drive)."""
    target = absolute_path(path)
    try:
        return PurePath(os.path.relpath(target, real_folder(folder))).as_posix()
    except ValueError:  # Windows: another drive
        return target


def resolved_path(path: PathLike, folder: PathLike) -> str:
    """A path a checkpoint in ``folder`` keeps (:func:`resumable_path`), from the root again: followed from the
    folder's real path; where nothing is there but is from ``folder`` as it is spelled (a checkpoint of an earlier
    version, which took the way from the spelling the run was started with), that. One from the root (an older
    checkpoint's) as it is."""
    real = absolute_path(path, real_folder(folder))
    if os.path.exists(real):
        return real
    spelled = absolute_path(path, absolute_path(folder))
    return spelled if os.path.exists(spelled) else real


__all__ = [
    "absolute_path",
    "is_path_argument",
    "real_folder",
    "recorded",
    "recorded_argument",
    "recorded_command",
    "recorded_path",
    "resolved_path",
    "resumable_path",
]
