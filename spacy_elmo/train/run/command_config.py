"""``spacy-elmo train``'s arguments as the :class:`~.config.TrainConfig` it trains with, each read and checked before
torch is imported: text files become sources, prepared corpora and the architecture are read (its schema and size
bounds), ``--init-from``'s model is looked for (reading and downloading nothing), ``--cutoffs`` becomes word ranks,
and every option's value is checked (:func:`~.config.check_config`). The command line parses; this builds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...sources.model_names import require_model
from ..config import TrainConfig, check_config
from ..corpus.sentences import make_sources
from ..corpus.shards import read_manifest
from ..network.presets import architecture as read_architecture


def command_config(
    options: Mapping[str, Any],
    *,
    train_files: Sequence[Path],
    raw_files: Sequence[Path],
    valid_files: Sequence[Path],
    corpus_dirs: Sequence[Path],
    tokenizer: str,
    raw_tokenizer: str,
    resume: bool,
) -> TrainConfig:
    """The run's config: ``options`` are TrainConfig's option fields as the command parsed them (``init_from`` a path
    or None, ``cutoffs`` its text); ``--train``/``--valid`` files are split by ``tokenizer``, ``--raw`` prose by
    ``raw_tokenizer``. A ``ValueError`` (or ``FileNotFoundError``) names the first problem."""
    train_sources = make_sources(train_files, "lines", tokenizer) + make_sources(raw_files, "raw", raw_tokenizer)
    valid_sources = make_sources(valid_files, "lines", tokenizer)
    if not train_sources and not corpus_dirs and not resume:
        raise ValueError("give training text with --train FILE and/or --raw FILE, or --corpus DIR")
    for corpus_dir in corpus_dirs:
        read_manifest(corpus_dir)
    init_from = options["init_from"]
    if init_from is not None:
        require_model(init_from)
    elif not resume:  # (--init-from's model, or a resumed run's checkpoint, gives the architecture)
        read_architecture(options["architecture"])  # a preset or a JSON file, within the schema's size bounds
    config = TrainConfig(
        train=[s.to_json() for s in train_sources],
        valid=[s.to_json() for s in valid_sources],
        corpus=[str(d.expanduser().resolve()) for d in corpus_dirs],
        **{**options, "cutoffs": word_ranks(options["cutoffs"]), "init_from": str(init_from) if init_from else None},
    )
    check_config(config)
    return config


def word_ranks(text: str) -> tuple[int, ...]:
    """``--cutoffs 2000,10000`` as its word ranks."""
    try:
        return tuple(int(rank) for rank in text.split(",") if rank.strip())
    except ValueError:
        raise ValueError(f"--cutoffs must be word ranks separated by commas (e.g. 2000,10000), not {text!r}") from None
