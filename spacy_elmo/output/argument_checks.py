"""The checks of an output's arguments that need neither torch nor Dask: where a file goes (an embedding file, a
figure, a result), which cluster computes it, and ``spacy-elmo embed``'s arguments as a whole. The command line runs
them before it imports anything heavy (a bad path is said at once), and :mod:`.embed_file` and :mod:`.cluster` run
the same ones: each message has one home."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Optional, Union

LOCAL_SCHEDULER = re.compile(r"local:(\d+)")
SCHEDULER_ADDRESS = re.compile(r"([a-z][a-z0-9+]*://)?[^\s:/]+(:\d+)?")

__all__ = ["check_embed_arguments", "check_output_path", "read_scheduler"]


def check_output_path(output_path: Union[str, os.PathLike[str]]) -> None:
    """Refuse, before any work, an output file that cannot be written (not a traceback after it, as at the final
    rename): a directory, a folder that does not exist or is not one, a folder this process may not write in."""
    output_path = Path(output_path)
    folder = output_path.parent
    if output_path.is_dir():
        raise IsADirectoryError(f"cannot write {output_path}: it is a directory")
    if not folder.exists():
        raise FileNotFoundError(f"cannot write {output_path}: the directory {folder} does not exist")
    if not folder.is_dir():
        raise NotADirectoryError(f"cannot write {output_path}: {folder} is not a directory")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PermissionError(f"cannot write {output_path}: no permission to create files in {folder}")


def read_scheduler(scheduler: str) -> Union[int, str]:
    """What a ``--scheduler`` names: the number of worker processes of ``local:N`` (a LocalCluster started here, N at
    most the cores this process may use), or a Dask scheduler's address such as ``tcp://10.0.0.5:8786``; a
    ValueError naming the two forms otherwise."""
    from ..runtime.configuration.validation import process_count  # (imported here: the other checks need no numpy)

    text = str(scheduler).strip()
    if text == "local" or text.startswith("local:"):  # not localhost:8786
        local = LOCAL_SCHEDULER.fullmatch(text)
        digits = local[1].lstrip("0") if local else ""
        if not digits:
            raise ValueError(f"scheduler {scheduler!r}: expected local:N with N >= 1 worker processes, e.g. local:2")
        # at most the cores here: each worker is a process with its own model (more only share cores and memory)
        return process_count(int(digits) if len(digits) <= 19 else digits, "scheduler local:N's N")
    if not SCHEDULER_ADDRESS.fullmatch(text):
        raise ValueError(f"scheduler {scheduler!r}: expected a Dask scheduler address (tcp://HOST:PORT) or local:N")
    return text


def check_embed_arguments(
    output_path: Union[str, os.PathLike[str]],
    precision: str,
    dtype: Optional[str] = None,
    *,
    formats: Sequence[str] = (),
    batch_size: int,
    tokenizer: str,
    scheduler: Optional[str],
) -> str:
    """``spacy-elmo embed``'s arguments, each checked importing nothing heavy (torch, spaCy, Dask): the output file,
    the precision's name (``dtype``: the deprecated ``--dtype``, with a warning), at most one of the output
    ``formats`` asked for (--all, --top, --average), the batch size, the tokenizer's name and what ``--scheduler``
    names (None: no cluster). Returns the precision to compute in."""
    from ..runtime.configuration.defaults import DEFAULT_PRECISION
    from ..runtime.configuration.validation import check_precision, positive_int, precision_or_dtype
    from ..runtime.features.tokenize import check_tokenizer  # (imported here: the other checks need no numpy)

    check_output_path(output_path)
    if len(formats) > 1:
        raise ValueError(f"choose one of --all, --top and --average, not {' and '.join('--' + f for f in formats)}")
    precision = precision_or_dtype(precision, dtype, "spacy-elmo embed --dtype", default=DEFAULT_PRECISION)
    check_precision(precision)
    positive_int(batch_size, "batch_size")
    check_tokenizer(tokenizer)
    if scheduler is not None:
        read_scheduler(scheduler)
    return precision
