"""The ELMo biLM in PyTorch (no spaCy or scikit-learn imports here).

The public names are imported on first use (PEP 562): ``spacy_elmo.groundwork.file_names`` and ``atomic_write`` do not
import torch, so the command line can check its arguments first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..groundwork.lazy_exports import lazy_exports

if TYPE_CHECKING:  # pragma: no cover
    from .chars import batch_to_char_ids, token_to_char_ids, tokens_to_char_ids
    from .model import BiLM
    from .options import BiLMOptions
    from .weights import WeightFileError, load_model, read_options, save_model

# each public name -> the module that defines it, imported when the name is first used
_HOMES = {
    "BiLM": ".model",
    "BiLMOptions": ".options",
    "WeightFileError": ".weights",
    "batch_to_char_ids": ".chars",
    "load_model": ".weights",
    "read_options": ".weights",
    "save_model": ".weights",
    "token_to_char_ids": ".chars",
    "tokens_to_char_ids": ".chars",
}

__all__ = [
    "BiLM",
    "BiLMOptions",
    "WeightFileError",
    "batch_to_char_ids",
    "load_model",
    "read_options",
    "save_model",
    "token_to_char_ids",
    "tokens_to_char_ids",
]


__getattr__, __dir__ = lazy_exports(__name__, _HOMES, globals())
