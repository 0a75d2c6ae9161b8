"""How an export folder's token encoder takes tokens (its manifest's ``tokens``), for the runner: torch-free.

``"elmo-chars"``: ELMo's char ids (:mod:`spacy_elmo.bilm.chars`), the ``<S>``/``</S>`` markers, trailing padding
that a runner may cut. ``"manylangs"``: an ELMoForManyLangs model's id rows
(:class:`~spacy_elmo.bilm.manylangs_tokens.ManyLangsVocabulary`, from the dictionaries the folder carries), the
``<bos>``/``<eos>`` markers, whole rows (its padding char has a trained embedding; the graph takes fixed rows).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from ..bilm.chars import BOS_TOKEN, EOS_TOKEN, tokens_to_char_ids
from ..bilm.manylangs_files import CHAR_DIC, WORD_DIC
from ..bilm.manylangs_tokens import ManyLangsVocabulary
from ..bilm.weights import WeightFileError
from .graph import CHAR_IDS, TOKEN_IDS
from .manifest import ADVICE, OnnxFolderError


@dataclass(frozen=True)
class TokenSpelling:
    """What a runner feeds the token encoder: the graph's input, the id rows of tokens, the sentence markers."""

    input_name: str
    token_ids: Callable[[Sequence[str]], np.ndarray]
    markers: tuple[str, str]  # put around each sentence, then dropped
    trims_padding: bool  # whether trailing padding columns may be cut (ELMo's char ids: the max-pool is unchanged)
    columns: Optional[int]  # the width of an id row the graph takes (None: any)


ELMO_CHARS = TokenSpelling(CHAR_IDS, tokens_to_char_ids, (BOS_TOKEN, EOS_TOKEN), True, None)


def manylangs_spelling(vocabulary: ManyLangsVocabulary) -> TokenSpelling:
    """An ELMoForManyLangs vocabulary's spelling."""
    markers = (vocabulary.bos_token, vocabulary.eos_token)
    return TokenSpelling(TOKEN_IDS, vocabulary.token_ids, markers, False, vocabulary.columns)


def folder_spelling(manifest: dict[str, Any], folder: Path) -> TokenSpelling:
    """The spelling of the export folder ``folder`` with the checked ``manifest``; an :class:`OnnxFolderError` (one
    line) when a dictionary it needs is missing, damaged or of another size than the manifest says."""
    if manifest.get("tokens") != "manylangs":
        return ELMO_CHARS
    settings = manifest["manylangs"]
    try:
        vocabulary = ManyLangsVocabulary.read(folder, settings["max_chars"], words=settings["n_words"] > 0)
    except WeightFileError as err:
        raise OnnxFolderError(f"{err}: {ADVICE}") from None
    for name, lexicon, size in (
        (CHAR_DIC, vocabulary.chars, settings["n_characters"]),
        (WORD_DIC, vocabulary.words, settings["n_words"]),
    ):
        if lexicon is not None and len(lexicon) != size:
            raise OnnxFolderError(
                f"{folder / name}: {len(lexicon)} entries, where the manifest says the model has {size}: {ADVICE}"
            )
    return manylangs_spelling(vocabulary)


__all__ = ["ELMO_CHARS", "TokenSpelling", "folder_spelling", "manylangs_spelling"]
