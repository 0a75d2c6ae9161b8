"""Files: their names (the one place a model folder's and a training run's file names are spelled), and files that
appear whole: every writer of the package writes through :func:`atomic_path`.

A crash, a full disk or Ctrl-C in the middle of a write leaves either the old file or the new one,
never half of one: the bytes go to a temporary file beside the target (same folder, so the same
file system), which replaces the target in one ``os.replace`` once it is complete, and is removed on
any error. Its name is unique to the process and call, so two writers of one file never share it.
Lives in ``bilm/`` because the weight files are written here; everything else imports it from here.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Union

PathLike = Union[str, "os.PathLike[str]"]

# -- the file names of a model folder and a training run: named here only ---------------------------------------
OPTIONS = "options.json"
WEIGHTS = "weights.hdf5"
WEIGHT_NAMES = (
    WEIGHTS,
    "lm_weights.hdf5",
    "model.hdf5",
)  # looked for in this order (model.hdf5: NLPL zips); else the only *.hdf5
VOCAB = "vocab.txt"
METRICS = "metrics.json"
CHECKPOINT = "checkpoint.safetensors"
SOFTMAX = "softmax.safetensors"


@contextmanager
def atomic_path(path: PathLike) -> Iterator[Path]:
    """A temporary path to write ``path``'s new content to (a file or a folder); it becomes ``path`` when the block
    ends without an error, and is removed otherwise."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        if tmp.is_dir() and not tmp.is_symlink():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)


def write_text_atomically(path: PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through :func:`atomic_path`."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json_atomically(path: PathLike, data: Any, indent: int = 2) -> None:
    """Write ``data`` as JSON (and a final newline) to ``path`` through :func:`atomic_path`."""
    write_text_atomically(path, json.dumps(data, indent=indent) + "\n")
