"""The command line's one error boundary: whatever a command raises ends as one line on stderr and an exit status,
never a traceback (unless asked for with ``spacy-elmo --debug`` or ``SPACY_ELMO_DEBUG=1``).

- bad input or an unusable path (ValueError, a missing or unwritable file, a failed write) and any other error of
  the system the command runs on (OSError: a full disk, standard output that cannot be written, a lost connection):
  ``error: ...`` and exit status 2, as the commands' own checks say them;
- anything else is a fault of spacy-elmo's: a line naming the command and the exception, saying it is a bug, how to
  see its traceback and where to report it, and exit status 1.

Click's own ends pass through unchanged: its usage errors (exit 2), ``typer.Exit``, an interrupt, and a closed
standard output pipe (``spacy-elmo models | head``), which click ends quietly with exit status 1.
"""

from __future__ import annotations

import errno
import importlib.metadata
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import NoReturn

import typer

from ..groundwork.atomic_write import WriteFailedError
from ..groundwork.excerpt import excerpt

try:  # typer >= 0.22 carries its own copy of click
    from typer._click.exceptions import ClickException
except ImportError:  # pragma: no cover (older typer runs on click itself)
    from click.exceptions import ClickException  # type: ignore[assignment,no-redef,import-not-found,unused-ignore]

DEBUG_ENV = "SPACY_ELMO_DEBUG"  # set to 1: an unexpected error shows its traceback (as `spacy-elmo --debug`)
MAX_LINE_CHARS = 1000  # the longest message line; a longer one keeps its head and tail (the fix is said last)

# the errors that are the user's to fix, their message naming what and how: a bad value, a missing or unusable path,
# a failed write
ONE_LINE_ERRORS = (
    ValueError,
    FileNotFoundError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
    WriteFailedError,
)

__all__ = ["DEBUG_ENV", "ONE_LINE_ERRORS", "debug_from_env", "errors_exit_2", "one_line", "say_and_exit"]


def one_line(message: str) -> str:
    """``message`` as one line: its line breaks (and the blanks around them) made one space, and a message longer than
    :data:`MAX_LINE_CHARS` cut to its head and tail around `` ... ``."""
    text = " ".join(part.strip() for part in str(message).splitlines() if part.strip())
    if len(text) <= MAX_LINE_CHARS:
        return text
    head = MAX_LINE_CHARS * 2 // 3
    return f"{text[:head]} ... {text[len(text) - (MAX_LINE_CHARS - head - 5) :]}"


def say(message: str) -> None:
    """``error: MESSAGE`` in red on stderr, one line; nothing if stderr itself cannot be written."""
    with suppress(OSError):
        typer.secho(f"error: {one_line(message)}", fg=typer.colors.RED, err=True)


@contextmanager
def errors_exit_2(quiet: bool = False) -> Iterator[None]:
    """Bad input (ValueError, incl. WeightFileError), an unusable path or a failed write: a red one-line message and
    exit 2 (``quiet``: no message; a training process other than rank 0, whose rank 0 says the same)."""
    try:
        yield
    except ONE_LINE_ERRORS as err:
        if not quiet:
            say(str(err))
        raise typer.Exit(2) from err


def debug_from_env() -> bool:
    """Whether ``SPACY_ELMO_DEBUG`` asks for tracebacks (1, true, yes or on)."""
    return os.environ.get(DEBUG_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def passes_through(err: BaseException) -> bool:
    """Whether click itself ends ``err`` as it always has: its usage errors, ``typer.Exit``, ``typer.Abort`` and a
    closed standard output pipe (quietly, exit status 1)."""
    if isinstance(err, (ClickException, typer.Exit, typer.Abort)):
        return True
    return isinstance(err, OSError) and err.errno == errno.EPIPE


def say_and_exit(err: Exception, command: str) -> NoReturn:
    """End the command ``command`` (its name, e.g. ``embed``) that raised ``err`` (not one that
    :func:`passes_through`): its one line and exit status 2 for bad input or the system's refusal, 1 for a fault of
    spacy-elmo's."""
    if isinstance(err, OSError) and (_raised_by_echo_to_stdout(err) or _standard_output_fails()):
        reason = err.strerror or str(err)
        say(
            f"spacy-elmo {command}: cannot write to standard output: {reason}; free space on the disk it goes to, "
            "or redirect it elsewhere"
        )
        raise typer.Exit(2) from err
    if isinstance(err, ONE_LINE_ERRORS):
        say(str(err))
        raise typer.Exit(2) from err
    if isinstance(err, OSError):
        say(f"spacy-elmo {command}: {_system_error(err)}")
        raise typer.Exit(2) from err
    where = _issues_url()
    say(
        f"spacy-elmo {command} failed: {type(err).__name__}: {err}; this is a bug in spacy-elmo: rerun with "
        f"`spacy-elmo --debug {command} ...` (or {DEBUG_ENV}=1) to see its traceback, and report it"
        + (f" at {where}" if where else "")
    )
    raise typer.Exit(1) from err


def _system_error(err: OSError) -> str:
    """What the system refused, and the path it refused, cut to a line's length (not ``[Errno N]`` and the whole
    path, which may be as long as a hostile value)."""
    paths = [excerpt(os.fspath(name)) for name in (err.filename, err.filename2) if name is not None]
    return f"{err.strerror or err}" + (f": {' -> '.join(paths)}" if paths else "")


def _raised_by_echo_to_stdout(err: BaseException) -> bool:
    """Whether ``err`` rose from click's ``echo`` writing to standard output (``typer.echo`` without ``err=True``:
    how every command prints its result)."""
    traceback = err.__traceback__
    while traceback is not None:
        frame = traceback.tb_frame
        module = str(frame.f_globals.get("__name__", ""))
        if frame.f_code.co_name == "echo" and module.endswith("click.utils") and not frame.f_locals.get("err"):
            return True
        traceback = traceback.tb_next
    return False


def _standard_output_fails() -> bool:
    """Whether standard output cannot take what was written to it (a full disk, an I/O error): flushing it fails."""
    try:
        sys.stdout.flush()
    except OSError:
        return True
    except ValueError:  # closed
        return False
    return False


def _issues_url() -> str:
    """Where bugs are reported: the installed distribution's ``Issues`` project URL (none when not installed)."""
    try:
        urls = importlib.metadata.metadata("spacy-elmo").get_all("Project-URL") or []
    except importlib.metadata.PackageNotFoundError:
        return ""
    for entry in urls:
        label, _, url = entry.partition(",")
        if label.strip().lower() == "issues":
            return url.strip()
    return ""
