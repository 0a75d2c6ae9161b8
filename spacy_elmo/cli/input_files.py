"""The input files a command names, each said missing at once: before a model loads or any work starts."""

from __future__ import annotations

from pathlib import Path


def require_inputs(*paths: Path) -> None:
    """A FileNotFoundError for the first of ``paths`` that does not exist (``-`` is standard input)."""
    for path in paths:
        if str(path) != "-" and not path.exists():
            raise FileNotFoundError(f"input file {path} does not exist")
