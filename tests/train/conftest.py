"""What the training tests share: the tiny ``TrainConfig`` they train with (:func:`tiny_config`, its sizes per test
module in :func:`tiny_options`) and the WikiText-2 lines they train on."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Union

import pytest

from spacy_elmo.train import TrainConfig, make_sources

Files = Union[str, os.PathLike, dict, list, tuple]

# the tiny preset at a learning rate that moves it within a few steps; threads=1 is what a one-thread CLI run records
# (the Trainer leaves torch's threads alone: a test holds them at one, tests.conftest.torch_threads); a test module
# changes what it needs in its own tiny_options
TINY = dict(architecture="tiny", min_count=1, lr=1e-2, warmup_steps=2, threads=1, seed=3)


def text_sources(files: Files) -> list[dict]:
    """``TrainConfig.train`` / ``valid`` entries: a plain-text file (or a list of them) as ``train --train`` makes it
    (:func:`make_sources`' lines, whitespace-tokenized); an entry given as a dict is kept as it is."""
    if isinstance(files, (str, os.PathLike, dict)):
        files = [files]
    return [f if isinstance(f, dict) else make_sources([f])[0].to_json() for f in files]


def wikitext_lines(data_dir: Path, folder: Path, train: int, valid: int = 0) -> tuple[Path, Path]:
    """The first ``train`` lines of WikiText-2's train.txt and ``valid`` of its valid.txt, as folder/train.txt and
    folder/valid.txt (none with ``valid=0``)."""
    for name, count in (("train.txt", train), ("valid.txt", valid)):
        if not count:
            continue
        lines = (data_dir / "wikitext-2" / name).read_text(encoding="utf-8").splitlines()[:count]
        (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder / "train.txt", folder / "valid.txt"


@pytest.fixture(scope="module")
def tiny_options() -> dict[str, Any]:
    """The options a test module trains with besides :data:`TINY`'s (a module overrides this fixture)."""
    return {}


@pytest.fixture(scope="module")
def tiny_config(tiny_options):
    """Makes the tiny ``TrainConfig``: ``tiny_config(train, valid=(), corpus=(), **options)``, ``train`` and ``valid``
    text files (:func:`text_sources`), ``corpus`` prepared corpus folders, and the options over the module's
    :func:`tiny_options` over :data:`TINY`."""

    def make(train: Files = (), valid: Files = (), corpus: Files = (), **options) -> TrainConfig:
        folders = [corpus] if isinstance(corpus, (str, os.PathLike)) else corpus
        return TrainConfig(
            train=text_sources(train),
            valid=text_sources(valid),
            corpus=[str(folder) for folder in folders],
            **{**TINY, **tiny_options, **options},
        )

    return make
