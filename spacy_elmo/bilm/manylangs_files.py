"""An ELMoForManyLangs model directory's file names, and whether a folder holds one, without torch.

What a path resolution or a download check needs to recognise the format (:mod:`spacy_elmo.sources`) lives here, so
that resolving a model imports no torch; reading the files is :mod:`.manylangs_reader`'s (torch), which re-exports
these names.
"""

from __future__ import annotations

from pathlib import Path

from ..groundwork.file_names import PathLike

CONFIG = "config.json"
CHAR_DIC = "char.dic"
WORD_DIC = "word.dic"
TOKEN_EMBEDDER = "token_embedder.pkl"
ENCODER = "encoder.pkl"
STATE_FILES = (TOKEN_EMBEDDER, ENCODER)


def is_model_dir(directory: PathLike) -> bool:
    """Whether ``directory`` holds an ELMoForManyLangs model: ``config.json`` and both torch-saved state files."""
    path = Path(directory)
    return all((path / name).is_file() for name in (CONFIG, *STATE_FILES))
